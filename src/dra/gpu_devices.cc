#include "gpuslice/dra/gpu_devices.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gpuslice::dra {
namespace {

// Before this driver branch a 4-slice GPU instance cannot sit beside a 3-slice one
// (../shared/reference/mig-facts.md).
constexpr int kPairingDriverBranch = 510;

using Counters = std::map<std::string, Quantity>;

bool Available(const hw::GiProfile& profile, const hw::MigSpec& mig, int branch) {
  return branch == 0 || (profile.min_driver_branch <= branch && mig.min_driver_branch <= branch);
}

// The most instances of `profile` whose placements do not overlap (greedy by end).
int DisjointPlacements(const hw::GiProfile& profile) {
  std::vector<std::pair<int, int>> intervals;  // (end, start)
  for (int start : profile.starts) intervals.emplace_back(start + profile.placement_size, start);
  std::sort(intervals.begin(), intervals.end());
  int count = 0;
  int free_from = -1;
  for (const auto& [end, start] : intervals) {
    if (start >= free_from) {
      ++count;
      free_from = end;
    }
  }
  return count;
}

// "1g.10gb+me" -> "1g-10gb-with-me", "1g.10gb-me" -> "1g-10gb-without-me": distinct labels for
// the media variants, which a plain DnsLabelOf would merge.
std::string ProfileLabel(const std::string& profile) {
  std::string spelled;
  for (char c : profile) {
    if (c == '+') {
      spelled += " with ";
    } else if (c == '-') {
      spelled += " without ";
    } else {
      spelled.push_back(c);
    }
  }
  return DnsLabelOf(spelled);
}

std::string CapCounter(const hw::GiProfile& profile) { return "max-" + ProfileLabel(profile.name); }

// The GPU's counters (all in one map) and which profiles have a binding cap.
struct Budget {
  Counters counters;
  int media_users = 0;
  int pairing = 0;  // 0: no pairing rule
};

Budget BudgetOf(const GpuInfo& gpu) {
  const hw::MigSpec& mig = *gpu.model->mig;
  Budget budget;
  for (int u = 0; u < mig.placement_units; ++u) {
    budget.counters[absl::StrCat("memory-slice-", u)] = Count(1);
  }
  budget.counters["compute-slices"] = Count(mig.compute_slices);
  int ofa = 0;
  int jpeg = 0;
  for (const hw::GiProfile& p : mig.profiles) {
    ofa = std::max(ofa, p.engines.ofa);
    jpeg = std::max(jpeg, p.engines.jpeg);
  }
  budget.counters["ofa-engines"] = Count(ofa);
  budget.counters["jpeg-engines"] = Count(jpeg);
  budget.media_users = mig.placement_units;
  budget.counters["media-users"] = Count(budget.media_users);
  if (gpu.driver_branch != 0 && gpu.driver_branch < kPairingDriverBranch) {
    budget.pairing = mig.compute_slices / 3;
    budget.counters["pairing-3-4"] = Count(budget.pairing);
  }
  for (const hw::GiProfile& p : mig.profiles) {
    if (Available(p, mig, gpu.driver_branch) && p.max_instances < DisjointPlacements(p)) {
      budget.counters[CapCounter(p)] = Count(p.max_instances);
    }
  }
  return budget;
}

Counters ConsumptionOf(const hw::GiProfile& p, int start, const Budget& budget) {
  Counters c;
  for (int u = start; u < start + p.placement_size; ++u)
    c[absl::StrCat("memory-slice-", u)] = Count(1);
  c["compute-slices"] = Count(p.compute_slices);
  if (p.engines.ofa > 0) c["ofa-engines"] = Count(p.engines.ofa);
  if (p.engines.jpeg > 0) c["jpeg-engines"] = Count(p.engines.jpeg);
  if (p.variant == hw::MediaVariant::kMeAll) {
    c["media-users"] = Count(budget.media_users);
  } else if (p.variant != hw::MediaVariant::kNoMe) {
    c["media-users"] = Count(1);
  }
  if (budget.pairing > 0 && p.compute_slices == 3) c["pairing-3-4"] = Count(1);
  if (budget.pairing > 0 && p.compute_slices == 4) c["pairing-3-4"] = Count(budget.pairing);
  if (budget.counters.contains(CapCounter(p))) c[CapCounter(p)] = Count(1);
  return c;
}

// Splits counters into sets of at most 32 (memory slices and rules first, caps last).
std::vector<CounterSet> SetsOf(int index, const Counters& counters) {
  std::vector<CounterSet> sets;
  for (const auto& [name, q] : counters) {
    const bool cap = name.rfind("max-", 0) == 0;
    const size_t set = cap && counters.size() > static_cast<size_t>(kMaxCountersPerSet) ? 1 : 0;
    if (sets.size() <= set) sets.resize(set + 1);
    sets[set].counters[name] = q;
  }
  for (size_t i = 0; i < sets.size(); ++i) {
    sets[i].name = absl::StrCat("gpu-", index, i == 0 ? "-counters" : "-caps");
  }
  return sets;
}

std::vector<CounterConsumption> Split(const Counters& consumed,
                                      const std::vector<CounterSet>& sets) {
  std::vector<CounterConsumption> out;
  for (const CounterSet& set : sets) {
    CounterConsumption c{set.name, {}};
    for (const auto& [name, q] : consumed) {
      if (set.counters.contains(name)) c.counters[name] = q;
    }
    if (!c.counters.empty()) out.push_back(std::move(c));
  }
  return out;
}

void CommonAttributes(const GpuInfo& gpu, Device& device) {
  const hw::GpuModel& model = *gpu.model;
  device.attributes["index"] = std::int64_t{gpu.index};
  device.attributes["model"] = model.id;
  device.attributes["productName"] = model.display_name.substr(0, kMaxStringAttributeBytes);
  if (!model.architecture.empty()) device.attributes["architecture"] = model.architecture;
  if (const std::string cc = SemverOf(model.compute_capability); !cc.empty()) {
    device.attributes["cudaComputeCapability"] = Version{cc};
  }
  if (const std::string v = SemverOf(gpu.driver_version); !v.empty()) {
    device.attributes["driverVersion"] = Version{v};
  }
}

Device MigDevice(const GpuInfo& gpu, const hw::GiProfile& p, int start, const Budget& budget,
                 const std::vector<CounterSet>& sets) {
  Device device;
  device.name = MigDeviceName(gpu.index, p.name, start);
  CommonAttributes(gpu, device);
  device.attributes["type"] = std::string("mig");
  device.attributes["profile"] = p.name;
  device.attributes["placementStart"] = std::int64_t{start};
  device.attributes["placementSize"] = std::int64_t{p.placement_size};
  device.attributes["computeSlices"] = std::int64_t{p.compute_slices};
  if (!gpu.uuid.empty()) device.attributes["parentUUID"] = gpu.uuid;
  device.capacity["memory"] = {Mebibytes(p.memory_mib), std::nullopt};
  device.capacity["multiprocessors"] = {Count(p.sms), std::nullopt};
  device.consumes_counters = Split(ConsumptionOf(p, start, budget), sets);
  return device;
}

Device WholeDevice(const GpuInfo& gpu, const Budget* budget, const std::vector<CounterSet>& sets) {
  Device device;
  device.name = WholeDeviceName(gpu.index);
  CommonAttributes(gpu, device);
  device.attributes["type"] = std::string("gpu");
  if (!gpu.uuid.empty()) device.attributes["uuid"] = gpu.uuid;
  device.capacity["memory"] = {Mebibytes(gpu.model->memory_mib), std::nullopt};
  device.capacity["multiprocessors"] = {Count(gpu.model->sms), std::nullopt};
  if (budget != nullptr) device.consumes_counters = Split(budget->counters, sets);
  return device;
}

}  // namespace

std::string MigDeviceName(int gpu_index, const std::string& profile, int start) {
  return absl::StrCat("gpu-", gpu_index, "-mig-", ProfileLabel(profile), "-", start);
}

std::string WholeDeviceName(int gpu_index) { return absl::StrCat("gpu-", gpu_index); }

std::string SemverOf(const std::string& dotted) {
  std::vector<std::string> parts = absl::StrSplit(dotted, '.');
  if (parts.empty() || parts.size() > 3) return "";
  std::vector<std::string> out;
  for (const std::string& part : parts) {
    int value = 0;
    if (part.empty() || part.size() > 9 || !absl::SimpleAtoi(part, &value) || value < 0 ||
        part.find_first_not_of("0123456789") != std::string::npos) {
      return "";
    }
    out.push_back(absl::StrCat(value));
  }
  while (out.size() < 3) out.emplace_back("0");
  return absl::StrCat(out[0], ".", out[1], ".", out[2]);
}

namespace {

// The consumable capacities of a shared device of `sms` SMs and `memory_mib` of memory.
void ShareCapacities(std::int64_t memory_mib, int sms, Device& device) {
  device.allow_multiple_allocations = true;
  device.capacity["compute"] = {
      Count(kComputeMilli),
      RequestPolicy{Count(100), Count(kComputeStep), Count(kComputeMilli), Count(kComputeStep)}};
  const std::int64_t memory = SharedMemoryMib(memory_mib);
  const std::int64_t tenth =
      std::max(kMemoryStepMib, memory / 10 / kMemoryStepMib * kMemoryStepMib);
  device.capacity["memory"] = {Mebibytes(memory),
                               RequestPolicy{Mebibytes(tenth), Mebibytes(kMemoryStepMib),
                                             Mebibytes(memory), Mebibytes(kMemoryStepMib)}};
  device.attributes["multiprocessors"] = std::int64_t{sms};
}

Device SharedDevice(const GpuInfo& gpu) {
  Device device;
  device.name = SharedDeviceName(gpu.index);
  CommonAttributes(gpu, device);
  device.attributes["type"] = std::string("shared");
  if (!gpu.uuid.empty()) device.attributes["uuid"] = gpu.uuid;
  ShareCapacities(gpu.model->memory_mib, gpu.model->sms, device);
  return device;
}

// Takes what the foreign instances consume out of the budget; false when one of them cannot be
// placed by the catalog (then nothing is offered on demand).
bool SubtractForeign(const GpuInfo& gpu, Budget& budget) {
  const hw::MigSpec& mig = *gpu.model->mig;
  for (const ExistingInstance& instance : gpu.foreign) {
    const hw::GiProfile* p = mig.FindProfile(instance.profile);
    if (p == nullptr ||
        std::find(p->starts.begin(), p->starts.end(), instance.start) == p->starts.end()) {
      return false;
    }
    for (const auto& [name, q] : ConsumptionOf(*p, instance.start, budget)) {
      budget.counters[name].value =
          std::max<std::int64_t>(0, budget.counters[name].value - q.value);
    }
  }
  return true;
}

bool Fits(const Counters& consumed, const Budget& budget) {
  for (const auto& [name, q] : consumed) {
    auto it = budget.counters.find(name);
    if (it == budget.counters.end() || it->second.value < q.value) return false;
  }
  return true;
}

// An admin-fixed layout's instances as they are; with `shared`, each as a shared device
// ("<name>-shared", type "shared") whose consumable capacities are the instance's.
std::vector<Device> FixedDevices(const GpuInfo& gpu) {
  std::vector<Device> devices;
  for (const ExistingInstance& instance : gpu.foreign) {
    const hw::GiProfile* p = gpu.model->mig->FindProfile(instance.profile);
    if (p == nullptr) continue;
    Device device = MigDevice(gpu, *p, instance.start, Budget{}, {});
    device.consumes_counters.clear();
    if (!instance.uuid.empty()) device.attributes["uuid"] = instance.uuid;
    if (gpu.shared) {
      device.name += "-shared";
      device.attributes["type"] = std::string("shared");
      device.capacity.clear();
      ShareCapacities(p->memory_mib, p->sms, device);
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

void Finish(const GpuInfo& gpu, GpuDevices& result) {
  for (Device& device : result.devices) device.taints = gpu.taints;
  std::sort(result.devices.begin(), result.devices.end(),
            [](const Device& a, const Device& b) { return a.name < b.name; });
}

}  // namespace

std::string SharedDeviceName(int gpu_index) { return absl::StrCat("gpu-", gpu_index, "-shared"); }

std::int64_t SharedMemoryMib(std::int64_t memory_mib) {
  return memory_mib / kMemoryStepMib * kMemoryStepMib;
}

GpuDevices DevicesOf(const GpuInfo& gpu) {
  GpuDevices result;
  const bool mig_model = gpu.model->mig_capable();
  if (gpu.fixed && mig_model) {
    result.devices = FixedDevices(gpu);
    Finish(gpu, result);
    return result;
  }
  const bool mig =
      gpu.mig_on_demand && mig_model &&
      (gpu.driver_branch == 0 || gpu.model->mig->min_driver_branch <= gpu.driver_branch);
  if (!mig) {
    if (gpu.shared) {
      result.devices.push_back(SharedDevice(gpu));
    } else if (gpu.whole) {
      result.devices.push_back(WholeDevice(gpu, nullptr, {}));
    }
    Finish(gpu, result);
    return result;
  }
  Budget budget = BudgetOf(gpu);
  const Budget full = budget;
  if (!SubtractForeign(gpu, budget)) return result;
  result.counter_sets = SetsOf(gpu.index, budget.counters);
  for (const hw::GiProfile& p : gpu.model->mig->profiles) {
    if (!Available(p, *gpu.model->mig, gpu.driver_branch)) continue;
    for (int start : p.starts) {
      if (!Fits(ConsumptionOf(p, start, full), budget)) continue;
      result.devices.push_back(MigDevice(gpu, p, start, full, result.counter_sets));
    }
  }
  if (gpu.whole && gpu.foreign.empty()) {
    result.devices.push_back(WholeDevice(gpu, &budget, result.counter_sets));
  }
  Finish(gpu, result);
  return result;
}

}  // namespace gpuslice::dra
