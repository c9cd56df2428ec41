#include "gpuslice/util/yaml_reader.h"

#include <array>
#include <charconv>
#include <cmath>

namespace gpuslice::util {

namespace {

// The shortest text that reads back as `value` ("0.5", "1e+09").
std::string FormatDouble(double value) {
  std::array<char, 32> buffer{};
  auto [end, error] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  if (error != std::errc()) return std::to_string(value);
  return std::string(buffer.data(), end);
}

}  // namespace

void ThrowYamlError(std::string_view origin, const YAML::Node& at, std::string_view path,
                    std::string_view message, absl::StatusCode code) {
  std::string text(origin);
  if (at.IsDefined() && at.Mark().line >= 0) {
    text += ":" + std::to_string(at.Mark().line + 1);
  }
  text += ": ";
  if (!path.empty()) {
    text += std::string(path) + ": ";
  }
  text += message;
  throw ParseError(text, code);
}

absl::Status StatusOfYaml(const YAML::Exception& error, std::string_view origin) {
  std::string message(origin);
  if (error.mark.line >= 0) message += ":" + std::to_string(error.mark.line + 1);
  return absl::InvalidArgumentError(message + ": " + error.msg);
}

YamlMap::YamlMap(const YAML::Node& node, std::string_view origin, std::string path)
    : node_(node), origin_(origin), path_(std::move(path)) {
  if (!node.IsMap()) {
    ThrowYamlError(origin_, node, path_, "expected a mapping");
  }
}

bool YamlMap::Has(std::string_view key) const { return node_[std::string(key)].IsDefined(); }

std::string YamlMap::PathOf(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

YAML::Node YamlMap::Node(std::string_view key) {
  YAML::Node value = OptionalNode(key);
  if (!value.IsDefined() || value.IsNull()) {
    Fail(node_, key, "required field is missing");
  }
  return value;
}

YAML::Node YamlMap::OptionalNode(std::string_view key) {
  used_.emplace(key);
  const YAML::Node& const_node = node_;
  return const_node[std::string(key)];
}

std::string YamlMap::String(std::string_view key) {
  return YamlString(Node(key), origin_, PathOf(key));
}

std::string YamlMap::String(std::string_view key, std::string fallback) {
  YAML::Node value = OptionalNode(key);
  if (!value.IsDefined() || value.IsNull()) return fallback;
  return YamlString(value, origin_, PathOf(key));
}

std::int64_t YamlMap::Int(std::string_view key, std::int64_t min, std::int64_t max) {
  return YamlInt(Node(key), origin_, PathOf(key), min, max);
}

std::int64_t YamlMap::Int(std::string_view key, std::int64_t min, std::int64_t max,
                          std::int64_t fallback) {
  YAML::Node value = OptionalNode(key);
  if (!value.IsDefined() || value.IsNull()) return fallback;
  return YamlInt(value, origin_, PathOf(key), min, max);
}

double YamlMap::Double(std::string_view key, double min, double max) {
  return YamlDouble(Node(key), origin_, PathOf(key), min, max);
}

double YamlMap::Double(std::string_view key, double min, double max, double fallback) {
  YAML::Node value = OptionalNode(key);
  if (!value.IsDefined() || value.IsNull()) return fallback;
  return YamlDouble(value, origin_, PathOf(key), min, max);
}

bool YamlMap::Bool(std::string_view key, bool fallback) {
  YAML::Node value = OptionalNode(key);
  if (!value.IsDefined() || value.IsNull()) return fallback;
  const std::string text = YamlString(value, origin_, PathOf(key));
  if (text == "true") return true;
  if (text == "false") return false;
  ThrowYamlError(origin_, value, PathOf(key), "expected true or false, got '" + text + "'");
}

std::vector<std::string> YamlMap::StringList(std::string_view key) {
  YAML::Node value = OptionalNode(key);
  std::vector<std::string> out;
  if (!value.IsDefined() || value.IsNull()) return out;
  if (!value.IsSequence()) ThrowYamlError(origin_, value, PathOf(key), "expected a list");
  for (size_t i = 0; i < value.size(); ++i) {
    out.push_back(YamlString(value[i], origin_, PathOf(key) + "[" + std::to_string(i) + "]"));
  }
  return out;
}

std::vector<std::int64_t> YamlMap::IntList(std::string_view key, std::int64_t min,
                                           std::int64_t max) {
  YAML::Node value = OptionalNode(key);
  std::vector<std::int64_t> out;
  if (!value.IsDefined() || value.IsNull()) return out;
  if (!value.IsSequence()) ThrowYamlError(origin_, value, PathOf(key), "expected a list");
  for (size_t i = 0; i < value.size(); ++i) {
    out.push_back(
        YamlInt(value[i], origin_, PathOf(key) + "[" + std::to_string(i) + "]", min, max));
  }
  return out;
}

void YamlMap::Finish() const {
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (used_.find(key) == used_.end()) {
      ThrowYamlError(origin_, it->first, PathOf(key), "unknown field");
    }
  }
}

void YamlMap::Fail(std::string_view field, std::string_view message) const {
  const YAML::Node& const_node = node_;
  YAML::Node value = field.empty() ? YAML::Node() : const_node[std::string(field)];
  ThrowYamlError(origin_, value.IsDefined() ? value : node_, field.empty() ? path_ : PathOf(field),
                 message);
}

void YamlMap::Fail(const YAML::Node& at, std::string_view field, std::string_view message) const {
  ThrowYamlError(origin_, at, field.empty() ? path_ : PathOf(field), message);
}

std::string YamlString(const YAML::Node& node, std::string_view origin, std::string_view path) {
  if (!node.IsScalar()) ThrowYamlError(origin, node, path, "expected a text value");
  return node.Scalar();
}

std::int64_t YamlInt(const YAML::Node& node, std::string_view origin, std::string_view path,
                     std::int64_t min, std::int64_t max) {
  const std::string text = YamlString(node, origin, path);
  std::int64_t value = 0;
  std::string_view digits = text;
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits.remove_prefix(2);
    base = 16;
  }
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
  if (error != std::errc() || end != digits.data() + digits.size()) {
    ThrowYamlError(origin, node, path, "expected an integer, got '" + text + "'");
  }
  if (value < min || value > max) {
    ThrowYamlError(
        origin, node, path,
        "value " + text + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

double YamlDouble(const YAML::Node& node, std::string_view origin, std::string_view path,
                  double min, double max) {
  const std::string text = YamlString(node, origin, path);
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value)) {
    ThrowYamlError(origin, node, path, "expected a number, got '" + text + "'");
  }
  if (value < min || value > max) {
    ThrowYamlError(
        origin, node, path,
        "value " + text + " is outside [" + FormatDouble(min) + ", " + FormatDouble(max) + "]");
  }
  return value;
}

}  // namespace gpuslice::util
