#include "dra/apiserver_standin.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <regex>
#include <utility>

namespace gpuslice::dra::testing_standin {
namespace {

using nlohmann::json;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";

// ---- Name and value rules (§4.4, §5.2) ---------------------------------------------------------

// (Each pattern is compiled once: std::regex is slow to build.)
bool DnsLabel(const std::string& s) {
  static const std::regex re("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
  return s.size() <= 63 && std::regex_match(s, re);
}

bool DnsSubdomain(const std::string& s) {
  static const std::regex re("[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  return s.size() <= 253 && std::regex_match(s, re);
}

// `[<DNS subdomain ≤ 63>/]<C identifier ≤ 32>`.
bool QualifiedName(const std::string& s) {
  static const std::regex identifier("[A-Za-z_][A-Za-z0-9_]*");
  const size_t slash = s.find('/');
  const std::string id = slash == std::string::npos ? s : s.substr(slash + 1);
  if (slash != std::string::npos) {
    const std::string domain = s.substr(0, slash);
    if (domain.size() > 63 || !DnsSubdomain(domain)) return false;
  }
  return id.size() <= 32 && std::regex_match(id, identifier);
}

bool LabelName(const std::string& s) {
  static const std::regex re("([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]");
  return s.size() <= 63 && std::regex_match(s, re);
}

bool LabelKey(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos) return LabelName(s);
  return DnsSubdomain(s.substr(0, slash)) && LabelName(s.substr(slash + 1));
}

bool Semver(const std::string& s) {
  static const std::regex re(
      "(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)"
      "(-[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*)?(\\+[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*)?");
  return s.size() <= 64 && std::regex_match(s, re);
}

// §4.10: <sign?><digits[.digits]><suffix>.
bool QuantityText(const std::string& s) {
  static const std::regex re(
      "[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?");
  return std::regex_match(s, re);
}

std::string QuantityString(const json& q) {
  if (q.is_string()) return q.get<std::string>();
  if (q.is_number()) return q.dump();
  return "";
}

// An integer quantity ("81920Mi", "132", "2k") in base units; nullopt for other forms or overflow.
std::optional<std::int64_t> IntegerQuantity(const std::string& s) {
  static const std::map<std::string, std::int64_t> kUnits = {
      {"", 1},           {"k", 1000},       {"M", 1000000},    {"G", 1000000000},
      {"Ki", 1LL << 10}, {"Mi", 1LL << 20}, {"Gi", 1LL << 30}, {"Ti", 1LL << 40}};
  std::smatch m;
  static const std::regex re("([0-9]{1,15})([A-Za-z]*)");
  if (!std::regex_match(s, m, re) || !kUnits.contains(m[2].str())) return std::nullopt;
  const std::int64_t value = std::stoll(m[1].str());
  const std::int64_t unit = kUnits.at(m[2].str());
  if (value != 0 && unit > INT64_MAX / value) return std::nullopt;
  return value * unit;
}

// The canonical form the API server stores: integers move to the largest suffix of their kind
// that keeps them whole ("1024Mi" -> "1Gi", "2000" -> "2k"); other forms stay as written.
std::string Canonical(const std::string& s) {
  static const std::vector<std::string> kBinary = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  static const std::vector<std::string> kDecimal = {"", "k", "M", "G", "T", "P", "E"};
  std::smatch m;
  static const std::regex re("([0-9]{1,18})(|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)");
  if (!std::regex_match(s, m, re)) return s;
  std::uint64_t value = std::stoull(m[1].str());
  if (value == 0) return "0";
  const bool binary = m[2].str().ends_with("i");
  const std::vector<std::string>& suffixes = binary ? kBinary : kDecimal;
  size_t e = static_cast<size_t>(std::find(suffixes.begin(), suffixes.end(), m[2].str()) -
                                 suffixes.begin());
  const std::uint64_t base = binary ? 1024 : 1000;
  while (e + 1 < suffixes.size() && value % base == 0) {
    value /= base;
    ++e;
  }
  return std::to_string(value) + suffixes[e];
}

// ---- Problems ----------------------------------------------------------------------------------

class Problems {
 public:
  void Add(const std::string& path, const std::string& what) {
    list_.push_back(path + ": " + what);
  }
  bool empty() const { return list_.empty(); }
  std::string Joined() const {
    if (list_.size() == 1) return list_[0];
    std::string out = "[";
    for (size_t i = 0; i < list_.size(); ++i) out += (i ? ", " : "") + list_[i];
    return out + "]";
  }

 private:
  std::vector<std::string> list_;
};

std::string At(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

bool Present(const json& object, const char* key) {
  return object.is_object() && object.contains(key) && !object[key].is_null();
}

int MinorOf(const std::string& git_version) {
  std::smatch m;
  static const std::regex re("v?1\\.([0-9]+).*");
  return std::regex_match(git_version, m, re) ? std::stoi(m[1].str()) : 99;
}

// ---- Spec validation (§4.2-§4.4, §5.1, §5.2) ----------------------------------------------------

void CheckCounters(const json& counters, const std::string& path, Problems& p) {
  if (!counters.is_object() || counters.empty()) return p.Add(path, "Required value");
  if (counters.size() > 32) p.Add(path, "Too many: must have at most 32 items");
  for (const auto& [name, counter] : counters.items()) {
    if (!DnsLabel(name)) p.Add(path + "[" + name + "]", "Invalid value: not a DNS label");
    if (!Present(counter, "value")) p.Add(path + "[" + name + "].value", "Required value");
  }
}

void CheckPool(const json& spec, Problems& p) {
  if (!Present(spec, "driver") || !spec["driver"].is_string())
    return p.Add("spec.driver", "Required value");
  const std::string driver = spec["driver"].get<std::string>();
  if (driver.size() > 63 || !DnsSubdomain(driver)) p.Add("spec.driver", "Invalid value: " + driver);
  const json pool = spec.value("pool", json());
  if (!Present(pool, "name") || !pool["name"].is_string())
    return p.Add("spec.pool.name", "Required value");
  const std::string name = pool["name"].get<std::string>();
  bool good = name.size() <= 253;
  for (size_t start = 0, end = 0; good && end != std::string::npos; start = end + 1) {
    end = name.find('/', start);
    good = DnsSubdomain(name.substr(start, end == std::string::npos ? end : end - start));
  }
  if (!good) p.Add("spec.pool.name", "Invalid value: " + name);
  if (!pool.value("generation", json(0)).is_number_integer() || pool.value("generation", 0) < 0) {
    p.Add("spec.pool.generation", "Invalid value: must be greater than or equal to 0");
  }
  if (!pool.value("resourceSliceCount", json(0)).is_number_integer() ||
      pool.value("resourceSliceCount", 0) <= 0) {
    p.Add("spec.pool.resourceSliceCount", "Invalid value: must be greater than zero");
  }
}

// Exactly one of the node selection fields (per slice, or per device when `path` is a device).
void CheckNodeSelection(const json& object, const std::string& path, bool with_per_device,
                        Problems& p) {
  int set = 0;
  if (Present(object, "nodeName")) {
    ++set;
    const json& node = object["nodeName"];
    if (!node.is_string() || !DnsSubdomain(node.get<std::string>())) {
      p.Add(path + ".nodeName", "Invalid value: must be a non-empty node name");
    }
  }
  if (Present(object, "nodeSelector")) {
    ++set;
    const json terms = object["nodeSelector"].value("nodeSelectorTerms", json());
    if (!terms.is_array() || terms.size() != 1) {
      p.Add(path + ".nodeSelector.nodeSelectorTerms", "Invalid value: must have exactly 1 term");
    }
  }
  for (const char* flag : {"allNodes", "perDeviceNodeSelection"}) {
    if (!Present(object, flag) || (!with_per_device && std::string(flag) != "allNodes")) continue;
    ++set;
    if (object[flag] != json(true)) p.Add(path + "." + flag, "Invalid value: must be true");
  }
  if (set != 1) {
    p.Add(path, with_per_device ? "Invalid value: exactly one of `nodeName`, `nodeSelector`, "
                                  "`allNodes`, `perDeviceNodeSelection` is required"
                                : "Invalid value: exactly one of `nodeName`, `nodeSelector`, "
                                  "`allNodes` is required");
  }
}

void CheckCounterSets(const json& spec, int minor, Problems& p) {
  if (!Present(spec, "sharedCounters")) return;
  const json& sets = spec["sharedCounters"];
  if (!sets.is_array()) return p.Add("spec.sharedCounters", "Invalid value: not a list");
  if (minor >= 35 && sets.size() > 8)
    p.Add("spec.sharedCounters", "Too many: must have at most 8 items");
  std::set<std::string> names;
  size_t total = 0;
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::string path = At("spec.sharedCounters", i);
    const std::string name = sets[i].value("name", "");
    if (!DnsLabel(name)) p.Add(path + ".name", "Invalid value: \"" + name + "\": not a DNS label");
    if (!names.insert(name).second) p.Add(path + ".name", "Duplicate value: \"" + name + "\"");
    CheckCounters(sets[i].value("counters", json()), path + ".counters", p);
    total += sets[i].value("counters", json::object()).size();
  }
  if (minor < 35 && total > 32)
    p.Add("spec.sharedCounters", "Too many: at most 32 counters in all");
}

void CheckAttributes(const json& attributes, const std::string& path, Problems& p) {
  for (const auto& [name, value] : attributes.items()) {
    const std::string at = path + "[" + name + "]";
    if (!QualifiedName(name)) p.Add(at, "Invalid value: not a qualified name");
    int kinds = 0;
    for (const char* kind : {"int", "bool", "string", "version"}) kinds += Present(value, kind);
    if (kinds != 1 || value.size() != 1) {
      p.Add(at, "Invalid value: exactly one value must be specified");
      continue;
    }
    if (Present(value, "int") && !value["int"].is_number_integer())
      p.Add(at + ".int", "Invalid value");
    if (Present(value, "bool") && !value["bool"].is_boolean()) p.Add(at + ".bool", "Invalid value");
    if (Present(value, "string") &&
        (!value["string"].is_string() || value["string"].get<std::string>().size() > 64)) {
      p.Add(at + ".string", "Too long: may not be more than 64 bytes");
    }
    if (Present(value, "version") &&
        (!value["version"].is_string() || !Semver(value["version"].get<std::string>()))) {
      p.Add(at + ".version", "Invalid value: must be a semantic version");
    }
  }
}

// CapacityRequestPolicy with a validRange (§4.4), for integer quantities.
void CheckRange(const json& policy, std::int64_t value, const std::string& path, Problems& p) {
  const json range = policy["validRange"];
  auto get = [&](const json& q) { return IntegerQuantity(QuantityString(q)); };
  const auto min = get(range.value("min", json()));
  const auto deflt = get(policy.value("default", json()));
  if (!min || !deflt) return p.Add(path, "Required value: default and validRange.min");
  const auto max = Present(range, "max") ? get(range["max"]) : std::optional<std::int64_t>(value);
  const auto step = Present(range, "step") ? get(range["step"]) : std::optional<std::int64_t>(1);
  if (!max || !step) return p.Add(path, "Invalid value: validRange.max or step");
  const bool ok = *min <= *deflt && *deflt <= *max && *max <= value && *step > 0 &&
                  (*deflt - *min) % *step == 0 && (*max - *min) % *step == 0 &&
                  *min + *step <= value;
  if (!ok) p.Add(path + ".validRange", "Invalid value: range, step and default do not fit");
}

void CheckCapacity(const json& device, const std::string& path, Problems& p) {
  const bool shared = device.value("allowMultipleAllocations", false) == true;
  for (const auto& [name, capacity] : device["capacity"].items()) {
    const std::string at = path + "[" + name + "]";
    if (!QualifiedName(name)) p.Add(at, "Invalid value: not a qualified name");
    if (!Present(capacity, "value")) p.Add(at + ".value", "Required value");
    if (!Present(capacity, "requestPolicy")) continue;
    if (!shared) {
      p.Add(at + ".requestPolicy", "Forbidden: only for devices with allowMultipleAllocations");
      continue;
    }
    const json& policy = capacity["requestPolicy"];
    if (Present(policy, "validValues") && Present(policy, "validRange")) {
      p.Add(at + ".requestPolicy", "Invalid value: only one of validValues or validRange");
    }
    const auto value = IntegerQuantity(QuantityString(capacity.value("value", json())));
    if (Present(policy, "validRange") && value)
      CheckRange(policy, *value, at + ".requestPolicy", p);
  }
}

void CheckConsumption(const json& device, const std::string& path, int minor,
                      const std::set<std::string>& slice_sets, Problems& p) {
  const json& list = device["consumesCounters"];
  if (!list.is_array()) return p.Add(path, "Invalid value: not a list");
  if (minor >= 35 && list.size() > 2) p.Add(path, "Too many: must have at most 2 items");
  std::set<std::string> sets;
  size_t total = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string set = list[i].value("counterSet", "");
    if (!DnsLabel(set)) p.Add(At(path, i) + ".counterSet", "Invalid value: not a DNS label");
    if (!sets.insert(set).second) p.Add(At(path, i) + ".counterSet", "Duplicate value");
    if (minor < 35 && !slice_sets.contains(set)) {
      p.Add(At(path, i) + ".counterSet", "Invalid value: \"" + set + "\": not in this slice");
    }
    CheckCounters(list[i].value("counters", json()), At(path, i) + ".counters", p);
    total += list[i].value("counters", json::object()).size();
  }
  if (minor < 35 && total > 32) p.Add(path, "Too many: at most 32 counters per device");
}

void CheckTaints(const json& taints, const std::string& path, int minor, Problems& p) {
  if (!taints.is_array()) return p.Add(path, "Invalid value: not a list");
  const size_t max = minor >= 35 ? 16 : 4;
  if (taints.size() > max)
    p.Add(path, "Too many: must have at most " + std::to_string(max) + " items");
  for (size_t i = 0; i < taints.size(); ++i) {
    const std::string key = taints[i].value("key", "");
    const std::string value = taints[i].value("value", "");
    const std::string effect = taints[i].value("effect", "");
    if (!LabelKey(key)) p.Add(At(path, i) + ".key", "Invalid value: \"" + key + "\"");
    if (!value.empty() && !LabelName(value)) p.Add(At(path, i) + ".value", "Invalid value");
    if (effect != "None" && effect != "NoSchedule" && effect != "NoExecute") {
      p.Add(At(path, i) + ".effect", "Unsupported value: \"" + effect + "\"");
    }
  }
}

bool Advanced(const json& device) {
  return Present(device, "taints") || Present(device, "consumesCounters");
}

void CheckDevice(const json& device, const std::string& path, int minor, const json& spec,
                 const std::set<std::string>& slice_sets, Problems& p) {
  const std::string name = device.value("name", "");
  if (!DnsLabel(name)) p.Add(path + ".name", "Invalid value: \"" + name + "\": not a DNS label");
  const size_t entries = device.value("attributes", json::object()).size() +
                         device.value("capacity", json::object()).size();
  if (entries > 32) p.Add(path, "Too many: at most 32 attributes and capacities");
  if (Present(device, "attributes")) CheckAttributes(device["attributes"], path + ".attributes", p);
  if (Present(device, "capacity")) CheckCapacity(device, path + ".capacity", p);
  if (Present(device, "consumesCounters")) {
    CheckConsumption(device, path + ".consumesCounters", minor, slice_sets, p);
  }
  if (Present(device, "taints")) CheckTaints(device["taints"], path + ".taints", minor, p);
  const bool per_device = spec.value("perDeviceNodeSelection", false) == true;
  if (per_device) {
    CheckNodeSelection(device, path, false, p);
  } else {
    for (const char* field : {"nodeName", "nodeSelector", "allNodes"}) {
      if (Present(device, field))
        p.Add(path + "." + field, "Forbidden: needs perDeviceNodeSelection");
    }
  }
}

void CheckDevices(const json& spec, int minor, Problems& p) {
  if (!Present(spec, "devices")) return;
  const json& devices = spec["devices"];
  if (!devices.is_array()) return p.Add("spec.devices", "Invalid value: not a list");
  if (minor >= 35 && Present(spec, "sharedCounters")) {
    p.Add("spec", "Invalid value: only one of sharedCounters or devices is allowed");
  }
  const bool advanced = std::any_of(devices.begin(), devices.end(), Advanced);
  const size_t max = minor >= 35 && advanced ? 64 : 128;
  if (devices.size() > max)
    p.Add("spec.devices", "Too many: must have at most " + std::to_string(max) + " items");
  std::set<std::string> sets;
  for (const json& set : spec.value("sharedCounters", json::array()))
    sets.insert(set.value("name", ""));
  std::set<std::string> names;
  size_t consumed = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].is_object()) {
      p.Add(At("spec.devices", i), "Invalid value: not an object");
      continue;
    }
    CheckDevice(devices[i], At("spec.devices", i), minor, spec, sets, p);
    const std::string name = devices[i].value("name", "");
    if (!names.insert(name).second)
      p.Add(At("spec.devices", i) + ".name", "Duplicate value: \"" + name + "\"");
    for (const json& c : devices[i].value("consumesCounters", json::array())) {
      consumed += c.value("counters", json::object()).size();
    }
  }
  if (minor < 35 && consumed > 1024)
    p.Add("spec.devices", "Too many: at most 1024 device counters");
}

// Every problem of a ResourceSlice object, or "".
std::string Validate(const json& object, int minor) {
  Problems p;
  const std::string name = object["metadata"].value("name", "");
  if (!DnsSubdomain(name)) p.Add("metadata.name", "Invalid value: \"" + name + "\"");
  const json& spec = object.value("spec", json());
  if (!spec.is_object()) {
    p.Add("spec", "Required value");
    return p.Joined();
  }
  CheckPool(spec, p);
  CheckNodeSelection(spec, "spec", minor >= 33, p);
  CheckCounterSets(spec, minor, p);
  CheckDevices(spec, minor, p);
  return p.empty() ? ""
                   : "ResourceSlice.resource.k8s.io \"" + name + "\" is invalid: " + p.Joined();
}

// ---- Admission: gates, quantities, defaults ----------------------------------------------------

struct GateFields {
  std::vector<std::string> spec;
  std::vector<std::string> device;
};

const std::map<std::string, GateFields>& Gates() {
  static const std::map<std::string, GateFields> kGates = {
      {"DRAPartitionableDevices",
       {{"sharedCounters", "perDeviceNodeSelection"},
        {"consumesCounters", "nodeName", "nodeSelector", "allNodes"}}},
      {"DRAConsumableCapacity", {{}, {"allowMultipleAllocations", "requestPolicy"}}},
      {"DRADeviceTaints", {{}, {"taints"}}},
  };
  return kGates;
}

// Whether a device uses a field; requestPolicy lives under capacity.
bool DeviceUses(const json& device, const std::string& field) {
  if (field != "requestPolicy") return Present(device, field.c_str());
  if (!Present(device, "capacity") || !device["capacity"].is_object()) return false;
  for (const auto& [name, capacity] : device["capacity"].items()) {
    if (Present(capacity, "requestPolicy")) return true;
  }
  return false;
}

bool SpecUses(const json& spec, const GateFields& fields) {
  for (const std::string& f : fields.spec) {
    if (Present(spec, f.c_str())) return true;
  }
  for (const json& device : spec.value("devices", json::array())) {
    for (const std::string& f : fields.device) {
      if (DeviceUses(device, f)) return true;
    }
  }
  return false;
}

void DropFields(json& spec, const GateFields& fields) {
  for (const std::string& f : fields.spec) spec.erase(f);
  if (!Present(spec, "devices") || !spec["devices"].is_array()) return;
  for (json& device : spec["devices"]) {
    for (const std::string& f : fields.device) {
      if (f != "requestPolicy") {
        device.erase(f);
        continue;
      }
      if (!Present(device, "capacity")) continue;
      for (auto& [name, capacity] : device["capacity"].items()) capacity.erase("requestPolicy");
    }
  }
}

// Canonicalises one quantity; false if it is not one.
bool CanonicalQuantity(json& q) {
  const std::string text = QuantityString(q);
  if (!QuantityText(text)) return false;
  q = Canonical(text);
  return true;
}

bool CanonicalCounters(json& counters) {
  bool ok = true;
  for (auto& [name, counter] : counters.items()) {
    if (Present(counter, "value")) ok = CanonicalQuantity(counter["value"]) && ok;
  }
  return ok;
}

bool CanonicalDevice(json& device) {
  bool ok = true;
  json empty = json::object();
  json& capacities = Present(device, "capacity") ? device["capacity"] : empty;
  for (auto& [name, entry] : capacities.items()) {
    if (Present(entry, "value")) ok = CanonicalQuantity(entry["value"]) && ok;
    if (!Present(entry, "requestPolicy")) continue;
    json& policy = entry["requestPolicy"];
    if (Present(policy, "default")) ok = CanonicalQuantity(policy["default"]) && ok;
    if (Present(policy, "validValues")) {
      for (json& v : policy["validValues"]) ok = CanonicalQuantity(v) && ok;
    }
    if (Present(policy, "validRange")) {
      for (auto& [bound, v] : policy["validRange"].items()) ok = CanonicalQuantity(v) && ok;
    }
  }
  if (Present(device, "consumesCounters")) {
    for (json& c : device["consumesCounters"]) {
      if (Present(c, "counters")) ok = CanonicalCounters(c["counters"]) && ok;
    }
  }
  return ok;
}

bool CanonicalSpec(json& spec) {
  bool ok = true;
  if (Present(spec, "sharedCounters") && spec["sharedCounters"].is_array()) {
    for (json& set : spec["sharedCounters"]) {
      if (Present(set, "counters") && set["counters"].is_object()) {
        ok = CanonicalCounters(set["counters"]) && ok;
      }
    }
  }
  if (Present(spec, "devices") && spec["devices"].is_array()) {
    for (json& device : spec["devices"]) {
      if (device.is_object()) ok = CanonicalDevice(device) && ok;
    }
  }
  return ok;
}

std::string Now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void StampTaints(json& spec) {
  if (!Present(spec, "devices") || !spec["devices"].is_array()) return;
  for (json& device : spec["devices"]) {
    if (!Present(device, "taints") || !device["taints"].is_array()) continue;
    for (json& taint : device["taints"]) {
      if (!Present(taint, "timeAdded")) taint["timeAdded"] = Now();
    }
  }
}

json StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

// spec.nodeName=a,spec.driver=b -> {field: value}; false for an unsupported field.
bool ParseSelector(const std::string& text, std::map<std::string, std::string>* out,
                   std::string* bad) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string term = text.substr(start, end - start);
    const size_t eq = term.find('=');
    const std::string field = term.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : term.substr(eq + 1);
    if (value.starts_with("=")) value.erase(0, 1);
    if (eq == std::string::npos || (field != "spec.nodeName" && field != "spec.driver")) {
      *bad = term;
      return false;
    }
    (*out)[field] = value;
    start = end + 1;
  }
  return true;
}

bool Selected(const json& slice, const std::map<std::string, std::string>& selector) {
  for (const auto& [field, value] : selector) {
    const std::string key = field.substr(5);  // after "spec."
    if (slice["spec"].value(key, std::string()) != value) return false;
  }
  return true;
}

}  // namespace

// ---- The server --------------------------------------------------------------------------------

ApiServerStandin::ApiServerStandin(ApiServerOptions options)
    : options_(std::move(options)), random_(std::random_device()()) {
  server_ = std::make_unique<httplib::Server>();
  Route(*server_);
  port_ = server_->bind_to_any_port("127.0.0.1");
  Listen();
}

ApiServerStandin::~ApiServerStandin() { Stop(); }

void ApiServerStandin::Listen() {
  httplib::Server* server = server_.get();
  thread_ = std::thread([server] { server->listen_after_bind(); });
  for (int i = 0; i < 500 && !server->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ApiServerStandin::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

void ApiServerStandin::Start() {
  if (thread_.joinable()) return;
  server_ = std::make_unique<httplib::Server>();
  Route(*server_);
  for (int i = 0; i < 200 && !server_->bind_to_port("127.0.0.1", port_); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Listen();
}

std::string ApiServerStandin::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

void ApiServerStandin::Route(httplib::Server& server) {
  auto serve = [this](auto handler) {
    return [this, handler](const httplib::Request& request, httplib::Response& response) {
      const Reply reply = handler(request);
      response.status = reply.status;
      response.set_content(reply.body.dump(), "application/json");
      Log(request, response);
    };
  };
  server.set_pre_routing_handler(
      [this](const httplib::Request& request, httplib::Response& response) {
        return Intercept(request, response) ? httplib::Server::HandlerResponse::Handled
                                            : httplib::Server::HandlerResponse::Unhandled;
      });
  const httplib::Server::HandlerWithResponse on_error = [this](const httplib::Request& request,
                                                               httplib::Response& response) {
    if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::string message = "the server could not find the requested resource";
    response.set_content(StatusBody(response.status, "NotFound", message).dump(),
                         "application/json");
    Log(request, response);
    return httplib::Server::HandlerResponse::Handled;
  };
  server.set_error_handler(on_error);
  const std::string slices = R"(/apis/resource\.k8s\.io/v1/resourceslices)";
  const std::string one = slices + "/([^/]+)";
  server.Get("/version", serve([this](const auto& r) { return Get(r); }));
  server.Get(R"(/api/v1/nodes/([^/]+))", serve([this](const auto& r) { return Get(r); }));
  server.Get(R"(/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+))",
             serve([this](const auto& r) { return Get(r); }));
  server.Get(slices, serve([this](const auto& r) { return ListSlices(r); }));
  server.Get(one, serve([this](const auto& r) { return Get(r); }));
  server.Post(slices, serve([this](const auto& r) { return CreateSlice(r); }));
  server.Put(one, serve([this](const auto& r) { return UpdateSlice(r, r.matches[1].str()); }));
  server.Delete(one, serve([this](const auto& r) { return DeleteSlice(r, r.matches[1].str()); }));
  server.Delete(slices, serve([this](const auto& r) { return DeleteSlices(r); }));
}

bool ApiServerStandin::Intercept(const httplib::Request& request, httplib::Response& response) {
  std::function<void()> action;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!before_.empty() && before_.front().first == request.method) {
      action = std::move(before_.front().second);
      before_.pop_front();
    }
  }
  if (action) action();
  std::unique_lock<std::mutex> lock(mutex_);
  json body;
  if (fail_count_ > 0) {
    --fail_count_;
    response.status = fail_status_;
    body = StatusBody(fail_status_, "ServiceUnavailable", "injected failure");
  } else if (garbage_count_ > 0) {
    --garbage_count_;
    response.status = 200;
    response.set_content("<html>not json{", "text/html");
  } else if (!options_.token.empty() &&
             request.get_header_value("Authorization") != "Bearer " + options_.token) {
    response.status = 401;
    body = StatusBody(401, "Unauthorized", "Unauthorized");
  } else {
    return false;
  }
  if (!body.is_null()) response.set_content(body.dump(), "application/json");
  lock.unlock();
  Log(request, response);
  return true;
}

void ApiServerStandin::Log(const httplib::Request& request, const httplib::Response& response) {
  LoggedRequest entry;
  entry.method = request.method;
  entry.path = request.path;
  for (const auto& [key, value] : request.params) entry.query[key] = value;
  entry.authorization = request.get_header_value("Authorization");
  if (!request.body.empty()) {
    entry.body = json::parse(request.body, nullptr, false);
    if (entry.body.is_discarded()) entry.body = request.body;
  }
  entry.status = response.status;
  std::lock_guard<std::mutex> lock(mutex_);
  log_.push_back(std::move(entry));
}

std::string ApiServerStandin::NextVersion() { return std::to_string(++version_); }

std::string ApiServerStandin::RandomText(size_t length, const std::string& alphabet) {
  std::string out;
  for (size_t i = 0; i < length; ++i) out.push_back(alphabet[random_() % alphabet.size()]);
  return out;
}

ApiServerStandin::Reply ApiServerStandin::Get(const httplib::Request& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string& path = request.path;
  if (path == "/version") {
    const int minor = MinorOf(options_.git_version);
    return {200,
            {{"major", "1"},
             {"minor", std::to_string(minor)},
             {"gitVersion", options_.git_version},
             {"platform", "linux/amd64"}}};
  }
  const std::string name = request.matches[request.matches.size() - 1].str();
  if (path.starts_with("/api/v1/nodes/")) {
    auto it = options_.nodes.find(name);
    if (it == options_.nodes.end()) {
      return {404, StatusBody(404, "NotFound", "nodes \"" + name + "\" not found")};
    }
    nlohmann::json node = {
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata", {{"name", name}, {"uid", it->second}, {"resourceVersion", "1"}}}};
    if (auto a = node_annotations_.find(name); a != node_annotations_.end()) {
      node["metadata"]["annotations"] = a->second;
    }
    return {200, node};
  }
  if (path.starts_with(kSlices)) {
    auto it = slices_.find(name);
    if (it == slices_.end()) {
      return {404, StatusBody(404, "NotFound",
                              "resourceslices.resource.k8s.io \"" + name + "\" not found")};
    }
    return {200, it->second};
  }
  auto it = claims_.find(request.matches[1].str() + "/" + name);
  if (it == claims_.end()) {
    return {404, StatusBody(404, "NotFound",
                            "resourceclaims.resource.k8s.io \"" + name + "\" not found")};
  }
  return {200, it->second};
}

ApiServerStandin::Reply ApiServerStandin::ListSlices(const httplib::Request& request) {
  if (request.has_param("watch")) {
    return {400, StatusBody(400, "BadRequest", "watch is not served by the stand-in")};
  }
  std::map<std::string, std::string> selector;
  std::string bad;
  if (!ParseSelector(request.get_param_value("fieldSelector"), &selector, &bad)) {
    return {400, StatusBody(400, "BadRequest", "field label not supported: " + bad)};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  json items = json::array();
  for (const auto& [name, slice] : slices_) {
    if (Selected(slice, selector)) items.push_back(slice);
  }
  return {200,
          {{"apiVersion", "resource.k8s.io/v1"},
           {"kind", "ResourceSliceList"},
           {"metadata", {{"resourceVersion", std::to_string(version_)}}},
           {"items", items}}};
}

std::optional<ApiServerStandin::Reply> ApiServerStandin::Admit(json& object, const json* old) {
  if (!object.is_object() || object.value("apiVersion", "") != "resource.k8s.io/v1" ||
      object.value("kind", "") != "ResourceSlice" || !object.contains("metadata") ||
      !object["metadata"].is_object()) {
    return Reply{400, StatusBody(400, "BadRequest", "not a resource.k8s.io/v1 ResourceSlice")};
  }
  if (!object.contains("spec") || !object["spec"].is_object()) object["spec"] = json::object();
  json& spec = object["spec"];
  for (const auto& [gate, fields] : Gates()) {
    const bool kept = old != nullptr && SpecUses((*old)["spec"], fields);
    if (options_.disabled_gates.contains(gate) && !kept) DropFields(spec, fields);
  }
  if (!CanonicalSpec(spec)) {
    return Reply{400, StatusBody(400, "BadRequest",
                                 "quantities must match the regular expression "
                                 "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")};
  }
  const std::string problems = Validate(object, MinorOf(options_.git_version));
  if (!problems.empty()) return Reply{422, StatusBody(422, "Invalid", problems)};
  if (!options_.disabled_gates.contains("DRADeviceTaints")) StampTaints(spec);
  return std::nullopt;
}

ApiServerStandin::Reply ApiServerStandin::CreateSlice(const httplib::Request& request) {
  json object = json::parse(request.body, nullptr, false);
  if (object.is_discarded()) return {400, StatusBody(400, "BadRequest", "the body is not JSON")};
  std::lock_guard<std::mutex> lock(mutex_);
  if (object.is_object() && object.contains("metadata") && object["metadata"].is_object()) {
    json& metadata = object["metadata"];
    if (!metadata.value("resourceVersion", "").empty()) {
      return {400, StatusBody(400, "BadRequest",
                              "resourceVersion should not be set on objects to be created")};
    }
    if (metadata.value("name", "").empty()) {
      const std::string prefix = metadata.value("generateName", "");
      if (prefix.empty()) {
        return {422, StatusBody(422, "Invalid",
                                "metadata.name: Required value: name or "
                                "generateName is required")};
      }
      metadata["name"] = prefix + RandomText(5, "bcdfghjklmnpqrstvwxz2456789");
    }
  }
  if (std::optional<Reply> refused = Admit(object, nullptr)) return *refused;
  json& metadata = object["metadata"];
  const std::string name = metadata["name"].get<std::string>();
  if (slices_.contains(name)) {
    return {409, StatusBody(409, "AlreadyExists",
                            "resourceslices.resource.k8s.io \"" + name + "\" already exists")};
  }
  metadata["uid"] = RandomText(8, "0123456789abcdef") + "-" + RandomText(4, "0123456789abcdef") +
                    "-4" + RandomText(3, "0123456789abcdef") + "-8" +
                    RandomText(3, "0123456789abcdef") + "-" + RandomText(12, "0123456789abcdef");
  metadata["resourceVersion"] = NextVersion();
  metadata["creationTimestamp"] = Now();
  metadata["generation"] = 1;
  slices_[name] = object;
  return {201, object};
}

ApiServerStandin::Reply ApiServerStandin::UpdateSlice(const httplib::Request& request,
                                                      const std::string& name) {
  json object = json::parse(request.body, nullptr, false);
  if (object.is_discarded()) return {400, StatusBody(400, "BadRequest", "the body is not JSON")};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = slices_.find(name);
  if (it == slices_.end()) {
    return {404, StatusBody(404, "NotFound",
                            "resourceslices.resource.k8s.io \"" + name + "\" not found")};
  }
  const json& old = it->second;
  const json metadata = object.is_object() ? object.value("metadata", json::object()) : json();
  if (!metadata.is_object() || metadata.value("name", "") != name) {
    return {400, StatusBody(400, "BadRequest", "the name of the object does not match the URL")};
  }
  const std::string version = metadata.value("resourceVersion", "");
  if (version.empty()) {
    return {422, StatusBody(422, "Invalid",
                            "metadata.resourceVersion: Invalid value: 0x0: must "
                            "be specified for an update")};
  }
  const std::string uid = metadata.value("uid", "");
  if (version != old["metadata"]["resourceVersion"] ||
      (!uid.empty() && uid != old["metadata"]["uid"])) {
    return {409,
            StatusBody(409, "Conflict",
                       "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"" + name +
                           "\": the object has been modified; please apply your "
                           "changes to the latest version and try again")};
  }
  if (std::optional<Reply> refused = Admit(object, &old)) return *refused;
  for (const char* field : {"driver", "nodeName"}) {
    if (object["spec"].value(field, json()) != old["spec"].value(field, json())) {
      return {422,
              StatusBody(422, "Invalid",
                         std::string("spec.") + field + ": Invalid value: field is immutable")};
    }
  }
  if (object["spec"]["pool"].value("name", json()) != old["spec"]["pool"].value("name", json())) {
    return {422, StatusBody(422, "Invalid", "spec.pool.name: Invalid value: field is immutable")};
  }
  json& stored = object["metadata"];
  for (const char* kept : {"uid", "creationTimestamp", "generation"})
    stored[kept] = old["metadata"][kept];
  if (object["spec"] != old["spec"])
    stored["generation"] = old["metadata"].value("generation", 1) + 1;
  stored["resourceVersion"] = NextVersion();
  it->second = object;
  return {200, object};
}

ApiServerStandin::Reply ApiServerStandin::DeleteSlice(const httplib::Request& request,
                                                      const std::string& name) {
  const json options =
      request.body.empty() ? json::object() : json::parse(request.body, nullptr, false);
  if (!options.is_object()) return {400, StatusBody(400, "BadRequest", "the body is not JSON")};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = slices_.find(name);
  if (it == slices_.end()) {
    return {404, StatusBody(404, "NotFound",
                            "resourceslices.resource.k8s.io \"" + name + "\" not found")};
  }
  const json pre = options.value("preconditions", json::object());
  const json& metadata = it->second["metadata"];
  if (Present(pre, "uid") && pre["uid"] != metadata["uid"]) {
    return {409, StatusBody(409, "Conflict",
                            "Precondition failed: UID in precondition: " + pre["uid"].dump() +
                                ", UID in object meta: " + metadata["uid"].dump())};
  }
  if (Present(pre, "resourceVersion") && pre["resourceVersion"] != metadata["resourceVersion"]) {
    return {409, StatusBody(409, "Conflict",
                            "Precondition failed: ResourceVersion in precondition: " +
                                pre["resourceVersion"].dump() +
                                ", ResourceVersion in object "
                                "meta: " +
                                metadata["resourceVersion"].dump())};
  }
  json deleted = it->second;
  slices_.erase(it);
  ++version_;
  return {200, deleted};
}

ApiServerStandin::Reply ApiServerStandin::DeleteSlices(const httplib::Request& request) {
  std::map<std::string, std::string> selector;
  std::string bad;
  if (!ParseSelector(request.get_param_value("fieldSelector"), &selector, &bad)) {
    return {400, StatusBody(400, "BadRequest", "field label not supported: " + bad)};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  json items = json::array();
  for (auto it = slices_.begin(); it != slices_.end();) {
    if (!Selected(it->second, selector)) {
      ++it;
      continue;
    }
    items.push_back(it->second);
    it = slices_.erase(it);
  }
  ++version_;
  return {200,
          {{"apiVersion", "resource.k8s.io/v1"},
           {"kind", "ResourceSliceList"},
           {"metadata", json::object()},
           {"items", items}}};
}

// ---- Settings, faults, the store, the log -------------------------------------------------------

void ApiServerStandin::SetVersion(std::string git_version) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.git_version = std::move(git_version);
}

void ApiServerStandin::SetToken(std::string token) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.token = std::move(token);
}

void ApiServerStandin::SetDisabledGates(std::set<std::string> gates) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.disabled_gates = std::move(gates);
}

void ApiServerStandin::AddNode(const std::string& name, const std::string& uid) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.nodes[name] = uid;
}

void ApiServerStandin::SetNodeAnnotation(const std::string& node, const std::string& key,
                                         const std::string& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  node_annotations_[node][key] = value;
}

void ApiServerStandin::FailNext(int count, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail_count_ = count;
  fail_status_ = status;
}

void ApiServerStandin::GarbageNext(int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  garbage_count_ = count;
}

void ApiServerStandin::BeforeNext(const std::string& method, std::function<void()> action) {
  std::lock_guard<std::mutex> lock(mutex_);
  before_.emplace_back(method, std::move(action));
}

std::vector<json> ApiServerStandin::Slices() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<json> out;
  for (const auto& [name, slice] : slices_) out.push_back(slice);
  return out;
}

std::optional<json> ApiServerStandin::Slice(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = slices_.find(name);
  if (it == slices_.end()) return std::nullopt;
  return it->second;
}

int ApiServerStandin::WipeSlices(const std::string& node) {
  std::lock_guard<std::mutex> lock(mutex_);
  int count = 0;
  for (auto it = slices_.begin(); it != slices_.end();) {
    if (it->second["spec"].value("nodeName", "") == node) {
      it = slices_.erase(it);
      ++count;
    } else {
      ++it;
    }
  }
  ++version_;
  return count;
}

bool ApiServerStandin::TouchSlice(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = slices_.find(name);
  if (it == slices_.end()) return false;
  it->second["metadata"]["labels"]["touched"] = std::to_string(version_);
  it->second["metadata"]["resourceVersion"] = NextVersion();
  return true;
}

void ApiServerStandin::PutSliceUnchecked(json slice) {
  std::lock_guard<std::mutex> lock(mutex_);
  slice["metadata"]["uid"] = "unchecked-" + RandomText(8, "0123456789abcdef");
  slice["metadata"]["resourceVersion"] = NextVersion();
  slices_[slice["metadata"]["name"].get<std::string>()] = slice;
}

json ApiServerStandin::PutClaim(json claim) {
  std::lock_guard<std::mutex> lock(mutex_);
  json& metadata = claim["metadata"];
  if (!metadata.contains("uid")) metadata["uid"] = "claim-uid-" + RandomText(8, "0123456789abcdef");
  metadata["resourceVersion"] = NextVersion();
  claim["apiVersion"] = "resource.k8s.io/v1";
  claim["kind"] = "ResourceClaim";
  claims_[metadata.value("namespace", "") + "/" + metadata.value("name", "")] = claim;
  return claim;
}

std::vector<LoggedRequest> ApiServerStandin::log() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return log_;
}

void ApiServerStandin::ClearLog() {
  std::lock_guard<std::mutex> lock(mutex_);
  log_.clear();
}

int ApiServerStandin::Count(const std::string& method, int status) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int count = 0;
  for (const LoggedRequest& entry : log_) {
    count += entry.method == method && (status == 0 || entry.status == status);
  }
  return count;
}

}  // namespace gpuslice::dra::testing_standin
