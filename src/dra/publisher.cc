#include "gpuslice/dra/publisher.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpuslice::dra {

using nlohmann::json;

namespace {

std::string StringAt(const json& object, const char* pointer) {
  const json::json_pointer at(pointer);
  return object.contains(at) && object[at].is_string() ? object[at].get<std::string>() : "";
}

// ---- Quantities -------------------------------------------------------------------------------

// `digits` (decimal, most significant first) times `factor` (small).
void CanonicalQuantity(json& quantity) {
  std::string text;
  if (quantity.is_string()) text = quantity.get<std::string>();
  if (quantity.is_number()) text = quantity.dump();
  absl::StatusOr<std::string> nanos = QuantityNanos(text);
  if (nanos.ok()) quantity = "nanos:" + *nanos;
}

void CanonicalCounters(json& counters) {
  if (!counters.is_object()) return;
  for (auto& [name, counter] : counters.items()) {
    if (counter.is_object() && counter.contains("value")) CanonicalQuantity(counter["value"]);
  }
}

void CanonicalCapacity(json& capacity) {
  if (!capacity.is_object()) return;
  for (auto& [name, entry] : capacity.items()) {
    if (!entry.is_object()) continue;
    if (entry.contains("value")) CanonicalQuantity(entry["value"]);
    if (!entry.contains("requestPolicy") || !entry["requestPolicy"].is_object()) continue;
    json& policy = entry["requestPolicy"];
    if (policy.contains("default")) CanonicalQuantity(policy["default"]);
    if (policy.contains("validValues") && policy["validValues"].is_array()) {
      for (json& value : policy["validValues"]) CanonicalQuantity(value);
    }
    if (policy.contains("validRange") && policy["validRange"].is_object()) {
      for (auto& [bound, value] : policy["validRange"].items()) CanonicalQuantity(value);
    }
  }
}

void CanonicalDevice(json& device) {
  if (!device.is_object()) return;
  if (device.contains("capacity")) CanonicalCapacity(device["capacity"]);
  if (device.contains("consumesCounters") && device["consumesCounters"].is_array()) {
    for (json& consumption : device["consumesCounters"]) {
      if (consumption.is_object() && consumption.contains("counters")) {
        CanonicalCounters(consumption["counters"]);
      }
    }
  }
  if (device.contains("taints") && device["taints"].is_array()) {
    for (json& taint : device["taints"]) {
      if (taint.is_object()) taint.erase("timeAdded");
    }
  }
}

// Drops null values and empty lists and maps, at every depth.
void PruneEmpty(json& value) {
  if (value.is_array()) {
    for (json& item : value) PruneEmpty(item);
    return;
  }
  if (!value.is_object()) return;
  for (auto it = value.begin(); it != value.end();) {
    PruneEmpty(it.value());
    const bool empty = it->is_null() || ((it->is_array() || it->is_object()) && it->empty());
    it = empty ? value.erase(it) : std::next(it);
  }
}

// A spec as the API server means it: quantities by value, no taint timeAdded, no empty values.
json Comparable(json spec) {
  if (!spec.is_object()) return spec;
  if (spec.contains("sharedCounters") && spec["sharedCounters"].is_array()) {
    for (json& set : spec["sharedCounters"]) {
      if (set.is_object() && set.contains("counters")) CanonicalCounters(set["counters"]);
    }
  }
  if (spec.contains("devices") && spec["devices"].is_array()) {
    for (json& device : spec["devices"]) CanonicalDevice(device);
  }
  PruneEmpty(spec);
  return spec;
}

// The first place where `got` differs from `sent` ("" if none), and whether a field of `sent` is
// missing there (`dropped`).
std::string FirstDifference(const json& sent, const json& got, const std::string& path,
                            bool* dropped) {
  if (sent.is_object() && got.is_object()) {
    for (const auto& [key, value] : sent.items()) {
      const std::string at = absl::StrCat(path, ".", key);
      if (!got.contains(key)) {
        *dropped = true;
        return at;
      }
      std::string inner = FirstDifference(value, got[key], at, dropped);
      if (!inner.empty()) return inner;
    }
    return sent.size() == got.size() ? "" : path;
  }
  if (sent.is_array() && got.is_array() && sent.size() == got.size()) {
    for (size_t i = 0; i < sent.size(); ++i) {
      std::string inner =
          FirstDifference(sent[i], got[i], absl::StrCat(path, "[", i, "]"), dropped);
      if (!inner.empty()) return inner;
    }
    return "";
  }
  return sent == got ? "" : path;
}

// The feature gate that guards a ResourceSlice field (§4.9), by the field's last name.
std::string GateOf(const std::string& path) {
  static const std::map<std::string, std::string> kGates = {
      {"sharedCounters", "DRAPartitionableDevices"},
      {"consumesCounters", "DRAPartitionableDevices"},
      {"perDeviceNodeSelection", "DRAPartitionableDevices"},
      {"allowMultipleAllocations", "DRAConsumableCapacity"},
      {"requestPolicy", "DRAConsumableCapacity"},
      {"taints", "DRADeviceTaints"},
      {"bindsToNode", "DRADeviceBindingConditions"},
      {"bindingConditions", "DRADeviceBindingConditions"},
      {"bindingFailureConditions", "DRADeviceBindingConditions"},
  };
  std::string last = path.substr(path.rfind('.') + 1);
  last = last.substr(0, last.find('['));
  auto it = kGates.find(last);
  return it == kGates.end() ? "" : it->second;
}

// OK when the API server kept the spec sent; else FailedPrecondition naming the field.
absl::Status CheckKept(const json& sent, const json& got) {
  const json a = Comparable(sent.value("spec", json::object()));
  const json b = Comparable(got.value("spec", json::object()));
  if (a == b) return absl::OkStatus();
  bool dropped = false;
  std::string path = FirstDifference(a, b, "spec", &dropped);
  if (path.empty()) path = "spec";
  const std::string name = StringAt(got, "/metadata/name");
  if (!dropped) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the API server changed ", path, " of ResourceSlice ", name, " on writing it"));
  }
  const std::string gate = GateOf(path);
  return absl::FailedPreconditionError(absl::StrCat(
      "the API server dropped ", path, " of ResourceSlice ", name,
      gate.empty() ? ": a feature gate is off there"
                   : absl::StrCat(": is the feature gate ", gate, " off in the API server?"),
      " (not retried; publish without the field or enable the gate)"));
}

// ---- Matching ---------------------------------------------------------------------------------

// The index in a name "<hex index>-<driver>-<node>-<suffix>", or -1.
int IndexOfName(const std::string& name, const std::string& driver, const std::string& node) {
  const size_t dash = name.find('-');
  if (dash == 0 || dash == std::string::npos || dash > 7) return -1;
  const std::string rest = absl::StrCat("-", driver, "-", node, "-");
  if (name.compare(dash, rest.size(), rest) != 0) return -1;
  int index = 0;
  for (size_t i = 0; i < dash; ++i) {
    const char c = name[i];
    const int digit = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (digit < 0) return -1;
    index = index * 16 + digit;
  }
  return index;
}

std::int64_t GenerationOf(const json& slice) {
  const json::json_pointer at("/spec/pool/generation");
  return slice.contains(at) && slice[at].is_number_integer() ? slice[at].get<std::int64_t>() : 0;
}

// The listed slices sorted out against the desired indices.
struct Matching {
  std::map<int, json> kept;    // index -> the existing slice to update in place
  std::vector<json> obsolete;  // to delete
  std::int64_t current = 0;    // the pool's highest generation
};

Matching Match(std::vector<json> existing, const std::set<int>& wanted, const std::string& driver,
               const std::string& node) {
  Matching out;
  for (const json& slice : existing) out.current = std::max(out.current, GenerationOf(slice));
  // Highest generation first, then by name: the first of an index is the one kept.
  std::sort(existing.begin(), existing.end(), [](const json& a, const json& b) {
    if (GenerationOf(a) != GenerationOf(b)) return GenerationOf(a) > GenerationOf(b);
    return StringAt(a, "/metadata/name") < StringAt(b, "/metadata/name");
  });
  for (json& slice : existing) {
    const int index = IndexOfName(StringAt(slice, "/metadata/name"), driver, node);
    const bool keep =
        wanted.contains(index) && !out.kept.contains(index) && GenerationOf(slice) == out.current;
    if (keep) {
      out.kept.emplace(index, std::move(slice));
    } else {
      out.obsolete.push_back(std::move(slice));
    }
  }
  return out;
}

// ---- Writing ----------------------------------------------------------------------------------

// Keeps the stored timeAdded of taints that are unchanged (same device, key, value and effect).
void KeepTaintTimes(const json& existing_spec, json& spec) {
  if (!spec.contains("devices") || !existing_spec.contains("devices")) return;
  std::map<std::string, std::string> times;  // device/key/value/effect -> timeAdded
  auto key_of = [](const json& device, const json& taint) {
    return absl::StrCat(device.value("name", ""), "/", taint.value("key", ""), "=",
                        taint.value("value", ""), ":", taint.value("effect", ""));
  };
  for (const json& device : existing_spec["devices"]) {
    if (!device.is_object() || !device.contains("taints")) continue;
    for (const json& taint : device["taints"]) {
      if (taint.is_object() && taint.contains("timeAdded") && taint["timeAdded"].is_string()) {
        times[key_of(device, taint)] = taint["timeAdded"].get<std::string>();
      }
    }
  }
  for (json& device : spec["devices"]) {
    if (!device.contains("taints")) continue;
    for (json& taint : device["taints"]) {
      auto it = times.find(key_of(device, taint));
      if (it != times.end()) taint["timeAdded"] = it->second;
    }
  }
}

bool NeedsWrite(const json& existing, const json& desired) {
  if (!SameSliceSpec(existing.value("spec", json::object()), desired["spec"])) return true;
  const json::json_pointer owners("/metadata/ownerReferences");
  return desired.contains(owners) &&
         (!existing.contains(owners) || existing[owners] != desired[owners]);
}

// The PUT body: the listed object's metadata with the desired owner, and the desired spec.
json UpdateBody(const json& existing, json desired) {
  json metadata = existing.value("metadata", json::object());
  if (desired["metadata"].contains("ownerReferences")) {
    metadata["ownerReferences"] = desired["metadata"]["ownerReferences"];
  }
  metadata.erase("managedFields");
  KeepTaintTimes(existing.value("spec", json::object()), desired["spec"]);
  desired["metadata"] = std::move(metadata);
  return desired;
}

// A write's error; NotFound under an update means someone deleted the slice: a conflict.
absl::Status AsConflict(const absl::Status& status, const std::string& name) {
  if (!absl::IsNotFound(status)) return status;
  return absl::AbortedError(absl::StrCat("ResourceSlice ", name, " vanished: ", status.message()));
}

// A desired slice's JSON at a generation, with the pool's slice count and owner.
struct Renderer {
  const std::vector<ResourceSlice>* desired;
  const std::string* node_uid;
  json operator()(const ResourceSlice& slice, std::int64_t generation) const {
    ResourceSlice copy = slice;
    copy.generation = generation;
    copy.slice_count = static_cast<std::int64_t>(desired->size());
    return ToJson(copy, *node_uid);
  }
};

// Deletes the obsolete slices, then updates the changed ones, then creates the missing ones.
absl::Status Write(const DraApi& api, const Matching& matching, const Renderer& render,
                   std::int64_t generation) {
  for (const json& slice : matching.obsolete) {
    absl::Status deleted =
        api.DeleteSlice(StringAt(slice, "/metadata/name"), StringAt(slice, "/metadata/uid"),
                        StringAt(slice, "/metadata/resourceVersion"));
    if (!deleted.ok()) return deleted;
  }
  std::vector<json> creates;
  for (const ResourceSlice& slice : *render.desired) {
    json wanted = render(slice, generation);
    auto it = matching.kept.find(slice.index);
    if (it == matching.kept.end()) {
      creates.push_back(std::move(wanted));
      continue;
    }
    if (!NeedsWrite(it->second, wanted)) continue;
    const json body = UpdateBody(it->second, std::move(wanted));
    absl::StatusOr<json> updated = api.UpdateSlice(body);
    if (!updated.ok()) return AsConflict(updated.status(), StringAt(body, "/metadata/name"));
    if (absl::Status kept = CheckKept(body, *updated); !kept.ok()) return kept;
  }
  for (const json& body : creates) {
    absl::StatusOr<json> created = api.CreateSlice(body);
    if (!created.ok()) return created.status();
    if (absl::Status kept = CheckKept(body, *created); !kept.ok()) return kept;
  }
  return absl::OkStatus();
}

}  // namespace

bool SameSliceSpec(const json& a, const json& b) { return Comparable(a) == Comparable(b); }

absl::Status SlicePublisher::Publish(std::vector<ResourceSlice> desired,
                                     const std::string& node_uid) {
  if (desired.empty()) {
    ResourceSlice empty;
    empty.driver = driver_;
    empty.node_name = node_;
    desired.push_back(empty);
  }
  std::set<int> indices;
  for (const ResourceSlice& slice : desired) {
    if (slice.driver != driver_ || slice.node_name != node_ || slice.index < 0 ||
        !indices.insert(slice.index).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("slice ", slice.index, " of driver ", slice.driver, " on ", slice.node_name,
                       ": expected driver ", driver_, ", node ", node_, " and distinct indices"));
    }
  }
  // Listed objects of an unexpected shape make nlohmann::json throw: an error, not a crash.
  const auto once = [&]() -> absl::Status {
    try {
      return PublishOnce(desired, node_uid);
    } catch (const json::exception& error) {
      return absl::InternalError(absl::StrCat(
          "a ResourceSlice from the API server has an unexpected shape: ", error.what()));
    }
  };
  absl::Status status = once();
  if (absl::IsAborted(status)) status = once();  // re-list once
  return status;
}

absl::Status SlicePublisher::PublishOnce(const std::vector<ResourceSlice>& desired,
                                         const std::string& node_uid) const {
  absl::StatusOr<std::vector<json>> listed = api_->ListSlices(node_, driver_);
  if (!listed.ok()) return listed.status();
  std::set<int> wanted;
  std::int64_t asked = 0;
  for (const ResourceSlice& slice : desired) {
    wanted.insert(slice.index);
    asked = std::max(asked, slice.generation);
  }
  const Matching matching = Match(*std::move(listed), wanted, driver_, node_);
  const Renderer render{&desired, &node_uid};
  // Keep the generation only if nothing is created and at most one slice changes.
  int changes = 0;
  for (const ResourceSlice& slice : desired) {
    auto it = matching.kept.find(slice.index);
    if (it != matching.kept.end() && NeedsWrite(it->second, render(slice, matching.current))) {
      ++changes;
    }
  }
  const bool keep = matching.kept.size() == desired.size() && changes <= 1;
  const std::int64_t generation = std::max(asked, matching.current + (keep ? 0 : 1));
  return Write(*api_, matching, render, generation);
}

absl::Status SlicePublisher::Wipe() {
  absl::Status status = WipeOnce();
  if (absl::IsAborted(status)) status = WipeOnce();
  return status;
}

absl::Status SlicePublisher::WipeOnce() const {
  absl::StatusOr<std::vector<json>> listed = api_->ListSlices(node_, driver_);
  if (!listed.ok()) return listed.status();
  for (const json& slice : *listed) {
    absl::Status deleted =
        api_->DeleteSlice(StringAt(slice, "/metadata/name"), StringAt(slice, "/metadata/uid"),
                          StringAt(slice, "/metadata/resourceVersion"));
    if (!deleted.ok()) return deleted;
  }
  return absl::OkStatus();
}

}  // namespace gpuslice::dra
