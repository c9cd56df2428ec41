#include "gpuslice/metrics/exposition.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace gpuslice::metrics {
namespace {

bool ValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool ValidLabelName(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Backslash and newline always; the double quote inside label values.
std::string Escape(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

void AppendValue(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else {
    char buffer[32];
    const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, result.ptr);
  }
}

std::string LabelKey(const Sample& sample) {
  std::string key;
  for (const auto& [name, value] : sample.labels)
    absl::StrAppend(&key, name, "\x1f", value, "\x1e");
  return key;
}

}  // namespace

absl::Status Validate(const std::vector<Family>& families) {
  std::set<std::string> names;
  for (const Family& family : families) {
    if (!ValidMetricName(family.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric name '", family.name, "': must match [a-zA-Z_:][a-zA-Z0-9_:]*"));
    }
    if (!names.insert(family.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(family.name, ": family given twice"));
    }
    if (family.type == MetricType::kCounter &&
        (family.name.size() < 6 || family.name.substr(family.name.size() - 6) != "_total")) {
      return absl::InvalidArgumentError(
          absl::StrCat(family.name, ": a counter's name ends in _total"));
    }
    std::set<std::string> label_sets;
    for (const Sample& sample : family.samples) {
      std::set<std::string> label_names;
      for (const auto& [name, value] : sample.labels) {
        if (!ValidLabelName(name)) {
          return absl::InvalidArgumentError(
              absl::StrCat(family.name, ": label name '", name,
                           "' must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __"));
        }
        if (!label_names.insert(name).second) {
          return absl::InvalidArgumentError(
              absl::StrCat(family.name, ": label ", name, " twice in one sample"));
        }
      }
      if (!label_sets.insert(LabelKey(sample)).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(family.name, ": two samples with the same labels"));
      }
      if (family.type == MetricType::kCounter && !(sample.value >= 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(family.name, ": a counter is never negative or NaN"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Write(const std::vector<Family>& families) {
  if (absl::Status status = Validate(families); !status.ok()) return status;
  // One allocation for the whole text (a scrape of a busy machine is 100+ KB).
  std::size_t estimate = 0;
  for (const Family& family : families) {
    estimate += 2 * family.name.size() + family.help.size() + 32;
    for (const Sample& sample : family.samples) {
      estimate += family.name.size() + 32;
      for (const auto& [name, value] : sample.labels) estimate += name.size() + value.size() + 4;
    }
  }
  std::string out;
  out.reserve(estimate);
  for (const Family& family : families) {
    absl::StrAppend(&out, "# HELP ", family.name, " ", Escape(family.help, false), "\n");
    absl::StrAppend(&out, "# TYPE ", family.name, " ",
                    family.type == MetricType::kCounter ? "counter" : "gauge", "\n");
    for (const Sample& sample : family.samples) {
      out += family.name;
      if (!sample.labels.empty()) {
        out += '{';
        for (size_t i = 0; i < sample.labels.size(); ++i) {
          if (i > 0) out += ',';
          absl::StrAppend(&out, sample.labels[i].first, "=\"",
                          Escape(sample.labels[i].second, true), "\"");
        }
        out += '}';
      }
      out += ' ';
      AppendValue(out, sample.value);
      out += '\n';
    }
  }
  return out;
}

std::vector<Family> OnlyLabelled(std::vector<Family> families, const std::string& label,
                                 const std::string& value) {
  for (Family& family : families) {
    std::erase_if(family.samples, [&](const Sample& sample) {
      return std::none_of(sample.labels.begin(), sample.labels.end(), [&](const auto& pair) {
        return pair.first == label && pair.second == value;
      });
    });
  }
  return families;
}

}  // namespace gpuslice::metrics
