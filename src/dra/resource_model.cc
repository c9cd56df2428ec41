#include "gpuslice/dra/resource_model.h"

#include <cctype>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {
namespace {

nlohmann::json QuantityJson(const Quantity& q) { return {{"value", q.ToString()}}; }

nlohmann::json AttributeJson(const AttributeValue& value) {
  return std::visit(
      [](const auto& v) -> nlohmann::json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::int64_t>) return {{"int", v}};
        if constexpr (std::is_same_v<T, bool>) return {{"bool", v}};
        if constexpr (std::is_same_v<T, std::string>) return {{"string", v}};
        if constexpr (std::is_same_v<T, Version>) return {{"version", v.text}};
      },
      value);
}

nlohmann::json CountersJson(const std::map<std::string, Quantity>& counters) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, q] : counters) out[name] = QuantityJson(q);
  return out;
}

// A qualified name: an optional "<DNS subdomain ≤ 63>/" and a C identifier ≤ 32.
bool IsQualifiedName(const std::string& name) {
  static const std::regex identifier("[A-Za-z_][A-Za-z0-9_]{0,31}");
  static const std::regex subdomain(
      "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  const size_t slash = name.find('/');
  if (slash == std::string::npos) return std::regex_match(name, identifier);
  const std::string domain = name.substr(0, slash);
  return domain.size() <= 63 && std::regex_match(domain, subdomain) &&
         std::regex_match(name.substr(slash + 1), identifier);
}

bool IsSemver(const std::string& text) {
  static const std::regex semver(
      "(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)"
      "(-[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*)?(\\+[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*)?");
  return text.size() <= 64 && std::regex_match(text, semver);
}

// `counter_sets`: the sets a consumption may name (Kubernetes 1.34: those of the device's own
// slice); null where they live in other slices of the pool.
absl::Status ValidateDevice(const Device& device, const std::set<std::string>* counter_sets) {
  const std::string where = absl::StrCat("device ", device.name, ": ");
  if (!IsDnsLabel(device.name))
    return absl::InvalidArgumentError(where + "name is not a DNS label");
  if (device.attributes.size() + device.capacity.size() >
      static_cast<size_t>(kMaxAttributesAndCapacities)) {
    return absl::InvalidArgumentError(where + "more than 32 attributes and capacities");
  }
  for (const auto& [name, value] : device.attributes) {
    if (!IsQualifiedName(name)) return absl::InvalidArgumentError(where + "attribute " + name);
    if (const auto* s = std::get_if<std::string>(&value);
        s != nullptr && s->size() > static_cast<size_t>(kMaxStringAttributeBytes)) {
      return absl::InvalidArgumentError(where + "attribute " + name + " longer than 64 bytes");
    }
    if (const auto* v = std::get_if<Version>(&value); v != nullptr && !IsSemver(v->text)) {
      return absl::InvalidArgumentError(where + "attribute " + name + " is not a semver");
    }
  }
  for (const auto& [name, capacity] : device.capacity) {
    if (!IsQualifiedName(name)) return absl::InvalidArgumentError(where + "capacity " + name);
    if (capacity.value.value < 0) return absl::InvalidArgumentError(where + "negative " + name);
    if (capacity.request_policy && !device.allow_multiple_allocations) {
      return absl::InvalidArgumentError(where + "requestPolicy without allowMultipleAllocations");
    }
    if (const auto& p = capacity.request_policy) {
      const std::int64_t v = capacity.value.value;
      const bool ok = p->step.value > 0 && p->min.value <= p->default_value.value &&
                      p->default_value.value <= p->max.value && p->max.value <= v &&
                      (p->default_value.value - p->min.value) % p->step.value == 0 &&
                      (p->max.value - p->min.value) % p->step.value == 0 &&
                      p->min.value + p->step.value <= v;
      if (!ok) return absl::InvalidArgumentError(where + "request policy of " + name);
    }
  }
  if (device.consumes_counters.size() > static_cast<size_t>(kMaxConsumptionsPerDevice)) {
    return absl::InvalidArgumentError(where + "more than 2 counter consumptions");
  }
  for (const CounterConsumption& c : device.consumes_counters) {
    if (c.counters.empty() || c.counters.size() > static_cast<size_t>(kMaxCountersPerSet)) {
      return absl::InvalidArgumentError(where + "1-32 counters per consumption");
    }
    if (counter_sets != nullptr && !counter_sets->contains(c.counter_set)) {
      return absl::InvalidArgumentError(where + "unknown counter set " + c.counter_set);
    }
  }
  if (device.taints.size() > 16) return absl::InvalidArgumentError(where + "more than 16 taints");
  return absl::OkStatus();
}

}  // namespace

std::string Quantity::ToString() const {
  return mebibytes ? absl::StrCat(value, "Mi") : absl::StrCat(value);
}

namespace {

std::string MultiplyDigits(const std::string& digits, int factor) {
  std::string out(digits.size(), '0');
  int carry = 0;
  for (size_t i = digits.size(); i-- > 0;) {
    const int product = (digits[i] - '0') * factor + carry;
    out[i] = static_cast<char>('0' + product % 10);
    carry = product / 10;
  }
  while (carry > 0) {
    out.insert(out.begin(), static_cast<char>('0' + carry % 10));
    carry /= 10;
  }
  return out;
}

// The power of ten (or of 1024, `binary`) a suffix stands for; false if it is none.
bool SuffixPower(std::string_view suffix, int* power, bool* binary) {
  static const std::map<std::string_view, int> kBinary = {{"Ki", 1}, {"Mi", 2}, {"Gi", 3},
                                                          {"Ti", 4}, {"Pi", 5}, {"Ei", 6}};
  static const std::map<std::string_view, int> kDecimal = {
      {"", 0},  {"n", -9}, {"u", -6}, {"m", -3}, {"k", 3},
      {"M", 6}, {"G", 9},  {"T", 12}, {"P", 15}, {"E", 18}};
  *binary = kBinary.contains(suffix);
  if (*binary) {
    *power = kBinary.at(suffix);
    return true;
  }
  if (auto it = kDecimal.find(suffix); it != kDecimal.end()) {
    *power = it->second;
    return true;
  }
  if (suffix.size() < 2 || suffix.size() > 5 || (suffix[0] != 'e' && suffix[0] != 'E')) {
    return false;
  }
  size_t i = 1;
  const bool negative = suffix[i] == '-';
  if (suffix[i] == '-' || suffix[i] == '+') ++i;
  if (i == suffix.size()) return false;
  int exponent = 0;
  for (; i < suffix.size(); ++i) {
    if (suffix[i] < '0' || suffix[i] > '9') return false;
    exponent = exponent * 10 + (suffix[i] - '0');
  }
  *power = negative ? -exponent : exponent;
  return true;
}

// `digits` shifted by `power` decimal places; dropped non-zero digits round the magnitude up.
std::string ShiftDigits(std::string digits, int power) {
  if (power >= 0) return digits.append(static_cast<size_t>(power), '0');
  const size_t drop = static_cast<size_t>(-power);
  const size_t keep = digits.size() > drop ? digits.size() - drop : 0;
  const bool inexact = digits.find_first_not_of('0', keep) != std::string::npos;
  digits.resize(keep);
  if (!inexact) return digits;
  // Add one: 0199 -> 0200.
  size_t i = digits.size();
  while (i > 0 && digits[i - 1] == '9') digits[--i] = '0';
  if (i == 0) return "1" + digits;
  ++digits[i - 1];
  return digits;
}

// ---- Comparing specs --------------------------------------------------------------------------

// Replaces a quantity (string, or number as the schema allows) by its exact value, if it is one.
}  // namespace

absl::StatusOr<std::string> QuantityNanos(std::string_view text) {
  const auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(text), "' is not a quantity"));
  };
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) ++i;
  std::string digits;
  int fraction = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) digits.push_back(text[i]);
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++fraction) {
      digits.push_back(text[i]);
    }
  }
  int power = 0;
  bool binary = false;
  if (digits.empty() || digits.size() > 64 || !SuffixPower(text.substr(i), &power, &binary) ||
      power > 1000 || power < -1000) {
    return invalid();
  }
  for (int k = 0; binary && k < power; ++k) digits = MultiplyDigits(digits, 1024);
  digits = ShiftDigits(std::move(digits), 9 - fraction + (binary ? 0 : power));
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.empty()) return std::string("0");
  return negative ? "-" + digits : digits;
}

absl::StatusOr<std::int64_t> ParseQuantityMilli(const std::string& text) {
  absl::StatusOr<std::string> nanos = QuantityNanos(text);
  if (!nanos.ok()) return nanos.status();
  if (nanos->front() == '-') {
    return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, 64), "' is negative"));
  }
  // Thousandths = nanos / 10^6, rounded up.
  const size_t keep = nanos->size() > 6 ? nanos->size() - 6 : 0;
  const std::string whole = keep == 0 ? "0" : nanos->substr(0, keep);
  const bool rest = nanos->find_first_not_of('0', keep) != std::string::npos;
  std::int64_t milli = 0;
  if (whole.size() > 19 || !absl::SimpleAtoi(whole, &milli) ||
      (rest && milli == std::numeric_limits<std::int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, 64), "' is too large"));
  }
  return rest ? milli + 1 : milli;
}

bool IsDnsLabel(const std::string& name) {
  static const std::regex label("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
  return name.size() <= 63 && std::regex_match(name, label);
}

std::string DnsLabelOf(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) {
      out.push_back(static_cast<char>(std::tolower(u)));
    } else if (!out.empty() && out.back() != '-') {
      out.push_back('-');
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

nlohmann::json ToJson(const Device& device) {
  nlohmann::json out = {{"name", device.name}};
  if (!device.attributes.empty()) {
    nlohmann::json attributes = nlohmann::json::object();
    for (const auto& [name, value] : device.attributes) attributes[name] = AttributeJson(value);
    out["attributes"] = attributes;
  }
  if (!device.capacity.empty()) {
    nlohmann::json capacity = nlohmann::json::object();
    for (const auto& [name, c] : device.capacity) {
      nlohmann::json entry = QuantityJson(c.value);
      if (c.request_policy) {
        entry["requestPolicy"] = {{"default", c.request_policy->default_value.ToString()},
                                  {"validRange",
                                   {{"min", c.request_policy->min.ToString()},
                                    {"max", c.request_policy->max.ToString()},
                                    {"step", c.request_policy->step.ToString()}}}};
      }
      capacity[name] = entry;
    }
    out["capacity"] = capacity;
  }
  if (!device.consumes_counters.empty()) {
    nlohmann::json consumes = nlohmann::json::array();
    for (const CounterConsumption& c : device.consumes_counters) {
      consumes.push_back({{"counterSet", c.counter_set}, {"counters", CountersJson(c.counters)}});
    }
    out["consumesCounters"] = consumes;
  }
  if (device.allow_multiple_allocations) out["allowMultipleAllocations"] = true;
  if (!device.taints.empty()) {
    nlohmann::json taints = nlohmann::json::array();
    for (const DeviceTaint& t : device.taints) {
      taints.push_back({{"key", t.key}, {"value", t.value}, {"effect", t.effect}});
    }
    out["taints"] = taints;
  }
  return out;
}

nlohmann::json ToJson(const ResourceSlice& slice, const std::string& node_uid) {
  nlohmann::json metadata = {
      {"generateName", absl::StrFormat("%05x-%s-%s-", slice.index, slice.driver, slice.node_name)}};
  if (!node_uid.empty()) {
    metadata["ownerReferences"] = nlohmann::json::array({{{"apiVersion", "v1"},
                                                          {"kind", "Node"},
                                                          {"name", slice.node_name},
                                                          {"uid", node_uid},
                                                          {"controller", true}}});
  }
  nlohmann::json spec = {{"driver", slice.driver},
                         {"nodeName", slice.node_name},
                         {"pool",
                          {{"name", slice.node_name},
                           {"generation", slice.generation},
                           {"resourceSliceCount", slice.slice_count}}}};
  if (!slice.devices.empty()) {
    nlohmann::json devices = nlohmann::json::array();
    for (const Device& device : slice.devices) devices.push_back(ToJson(device));
    spec["devices"] = devices;
  }
  if (!slice.shared_counters.empty()) {
    nlohmann::json sets = nlohmann::json::array();
    for (const CounterSet& set : slice.shared_counters) {
      sets.push_back({{"name", set.name}, {"counters", CountersJson(set.counters)}});
    }
    spec["sharedCounters"] = sets;
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", metadata},
          {"spec", spec}};
}

absl::Status Validate(const ResourceSlice& slice, bool kubernetes_134) {
  if (slice.generation < 0 || slice.slice_count <= 0) {
    return absl::InvalidArgumentError("pool generation < 0 or resourceSliceCount <= 0");
  }
  if (!kubernetes_134 && !slice.devices.empty() && !slice.shared_counters.empty()) {
    return absl::InvalidArgumentError("only one of sharedCounters or devices is allowed");
  }
  if (kubernetes_134) {
    size_t counters = 0;
    for (const CounterSet& set : slice.shared_counters) counters += set.counters.size();
    if (counters > static_cast<size_t>(kMaxCountersPerSet)) {
      return absl::InvalidArgumentError("more than 32 counters in the slice's sets (1.34)");
    }
  }
  bool advanced = false;
  for (const Device& d : slice.devices) {
    advanced = advanced || !d.consumes_counters.empty() || !d.taints.empty();
  }
  const int max_devices = advanced ? kMaxDevicesPerSliceWithCounters : kMaxDevicesPerSlice;
  if (slice.devices.size() > static_cast<size_t>(max_devices)) {
    return absl::InvalidArgumentError(absl::StrCat("more than ", max_devices, " devices"));
  }
  if (!kubernetes_134 &&
      slice.shared_counters.size() > static_cast<size_t>(kMaxCounterSetsPerSlice)) {
    return absl::InvalidArgumentError("more than 8 counter sets");
  }
  std::set<std::string> sets;
  for (const CounterSet& set : slice.shared_counters) {
    if (!IsDnsLabel(set.name) || !sets.insert(set.name).second) {
      return absl::InvalidArgumentError("counter set " + set.name + ": bad or repeated name");
    }
    if (set.counters.empty() || set.counters.size() > static_cast<size_t>(kMaxCountersPerSet)) {
      return absl::InvalidArgumentError("counter set " + set.name + ": 1-32 counters");
    }
    for (const auto& [name, q] : set.counters) {
      if (!IsDnsLabel(name)) return absl::InvalidArgumentError("counter " + name);
    }
  }
  std::set<std::string> names;
  for (const Device& device : slice.devices) {
    if (!names.insert(device.name).second) {
      return absl::InvalidArgumentError("device " + device.name + " repeated");
    }
    if (absl::Status s = ValidateDevice(device, kubernetes_134 ? &sets : nullptr); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace gpuslice::dra
