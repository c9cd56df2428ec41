#include "gpuslice/device/sim_machine.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "gpuslice/geometry/compute_instances.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/util/strings.h"

namespace gpuslice::device::sim {
namespace {

using util::Trim;

constexpr int kMaxGpus = 64;

// splitmix64: deterministic ids from (seed, counter).
std::uint64_t Mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::string MakeUuid(SimState& state, std::string_view prefix) {
  const std::uint64_t a = Mix(state.seed ^ Mix(++state.uuid_counter));
  const std::uint64_t b = Mix(a);
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "%.*s-%08x-%04x-%04x-%04x-%012llx",
                static_cast<int>(prefix.size()), prefix.data(), static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xFFFF), static_cast<unsigned>(a & 0xFFFF),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xFFFFFFFFFFFFULL));
  return uuid;
}

geometry::Occupancy OccupancyOf(const geometry::Shape& shape, const SimGpu& gpu) {
  geometry::Occupancy occupancy;
  for (const SimGi& gi : gpu.gis) {
    const hw::GiProfile* profile = shape.mig().FindProfileBySmiId(gi.profile_id);
    if (profile != nullptr) shape.Add(occupancy, shape.mig().IndexOf(*profile), gi.start);
  }
  return occupancy;
}

// A GI's compute instances as CI-profile indices and starts.
std::vector<geometry::CiPlaced> PlacedCis(const geometry::CiShape& shape, const SimGi& gi) {
  std::vector<geometry::CiPlaced> placed;
  for (const SimCi& ci : gi.cis) {
    const int index = shape.FindById(ci.profile_id);
    if (index >= 0) {
      placed.push_back({static_cast<std::uint8_t>(index), static_cast<std::uint8_t>(ci.start)});
    }
  }
  return placed;
}

bool HasProcessOn(const SimGpu& gpu, int gi, int ci) {
  return std::any_of(gpu.processes.begin(), gpu.processes.end(),
                     [&](const SimProcess& p) { return p.gi == gi && (ci < 0 || p.ci == ci); });
}

}  // namespace

absl::StatusOr<SimState> NewMachine(const hw::Catalog& catalog, std::string_view spec,
                                    std::uint64_t seed) {
  SimState state;
  state.seed = seed;
  std::string text(spec);
  size_t begin = 0;
  std::vector<const hw::GpuModel*> models;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string item = Trim(std::string_view(text).substr(begin, end - begin));
    begin = end + 1;
    if (item.empty()) {
      if (end == text.size() && !models.empty()) break;
      return absl::InvalidArgumentError("fleet spec '" + std::string(spec) +
                                        "': empty item; expected e.g. 2xH100-80GB,1xA100-40GB");
    }
    int count = 1;
    size_t digits = 0;
    while (digits < item.size() && std::isdigit(static_cast<unsigned char>(item[digits]))) ++digits;
    if (digits > 0 && digits < item.size() && (item[digits] == 'x' || item[digits] == '*')) {
      std::from_chars(item.data(), item.data() + digits, count);
      item = Trim(std::string_view(item).substr(digits + 1));
    }
    if (count < 1 || count > kMaxGpus) {
      return absl::InvalidArgumentError("fleet spec: bad GPU count in '" + item + "' (1-64)");
    }
    absl::StatusOr<const hw::GpuModel*> model = catalog.Resolve(item);
    if (!model.ok()) return model.status();
    for (int i = 0; i < count; ++i) models.push_back(*model);
    if (end == text.size()) break;
  }
  if (models.empty()) return absl::InvalidArgumentError("fleet spec is empty");
  if (models.size() > kMaxGpus) {
    return absl::InvalidArgumentError("fleet spec: at most 64 GPUs per simulated machine");
  }
  for (size_t i = 0; i < models.size(); ++i) {
    const hw::GpuModel& model = *models[i];
    SimGpu gpu;
    gpu.index = static_cast<int>(i);
    gpu.model_id = model.id;
    gpu.name = model.nvml_names.empty() ? model.display_name : model.nvml_names.front();
    gpu.pci_device_id = model.pci_device_ids.empty() ? 0 : model.pci_device_ids.front();
    char bus[32];
    std::snprintf(bus, sizeof bus, "00000000:%02X:00.0",
                  static_cast<unsigned>(0x18 + 0x10 * i) & 0xFFU);
    gpu.bus_id = bus;
    gpu.memory_total_mib = model.memory_mib;
    gpu.mig_capable = model.mig_capable();
    state.gpus.push_back(std::move(gpu));
  }
  for (SimGpu& gpu : state.gpus) gpu.uuid = MakeUuid(state, "GPU");
  return state;
}

SimMachine::SimMachine(SimState& state, const hw::Catalog& catalog)
    : state_(state), catalog_(catalog) {}

int SimMachine::Enter(std::string_view call) {
  if (state_.faults.empty()) return kNvmlSuccess;
  ++state_.calls;
  for (FaultRule& rule : state_.faults) {
    if (rule.times == 0) continue;
    if (rule.at_call != 0 && rule.at_call != state_.calls) continue;
    if (!rule.match.empty() && call.find(rule.match) == std::string_view::npos) continue;
    if (rule.times > 0) --rule.times;
    if (rule.abort_process) {
      if (before_abort_) before_abort_();
      std::fprintf(stderr, "gpuslice simulator: injected abort at call %lld (%.*s)\n",
                   static_cast<long long>(state_.calls), static_cast<int>(call.size()),
                   call.data());
      std::abort();
    }
    return rule.code;
  }
  return kNvmlSuccess;
}

const SimGpu* SimMachine::Gpu(int index) const {
  if (index < 0 || index >= GpuCount()) return nullptr;
  return &state_.gpus[static_cast<size_t>(index)];
}

SimGpu* SimMachine::MutableGpu(int index) {
  if (index < 0 || index >= GpuCount()) return nullptr;
  return &state_.gpus[static_cast<size_t>(index)];
}

const hw::GpuModel* SimMachine::ModelOf(int gpu) const {
  const SimGpu* g = Gpu(gpu);
  return g == nullptr ? nullptr : catalog_.Find(g->model_id);
}

const SimGi* SimMachine::Gi(int gpu, int gi) const {
  const SimGpu* g = Gpu(gpu);
  if (g == nullptr) return nullptr;
  for (const SimGi& instance : g->gis) {
    if (instance.id == gi) return &instance;
  }
  return nullptr;
}

SimGi* SimMachine::MutableGi(int gpu, int gi) { return const_cast<SimGi*>(Gi(gpu, gi)); }

std::string SimMachine::NewUuid(std::string_view prefix) { return MakeUuid(state_, prefix); }

int SimMachine::SetMigMode(int gpu, MigMode mode, MigModeChange* change) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  if (!g->mig_capable) return kNvmlNotSupported;
  *change = {};
  if (mode == MigMode::kDisabled && !g->gis.empty()) return kNvmlInUse;
  g->mig_pending = mode;
  if (g->mig_current == mode) {
    change->applied = true;
    return kNvmlSuccess;
  }
  if (!g->processes.empty() || !g->holders.empty()) {
    change->activation_code = kNvmlInUse;
  } else if (!g->reset_supported) {
    change->activation_code = kNvmlResetRequired;
  } else {
    g->mig_current = mode;  // the driver resets the idle GPU itself
    change->applied = true;
  }
  return kNvmlSuccess;
}

int SimMachine::ResetGpu(int gpu) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  if (!g->reset_supported) return kNvmlNotSupported;
  if (!g->processes.empty() || !g->holders.empty()) return kNvmlInUse;
  g->gis.clear();
  g->mig_current = g->mig_pending;
  return kNvmlSuccess;
}

int SimMachine::CreateGi(int gpu, int profile_id, std::optional<int> start, int* gi_id) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  const hw::GpuModel* model = ModelOf(gpu);
  if (!g->mig_capable || model == nullptr || !model->mig) return kNvmlNotSupported;
  if (g->mig_current != MigMode::kEnabled) return kNvmlNotSupported;
  const geometry::Shape shape(*model);
  const hw::GiProfile* profile = shape.mig().FindProfileBySmiId(profile_id);
  if (profile == nullptr) return kNvmlInvalidArgument;
  const int index = shape.mig().IndexOf(*profile);
  const geometry::Occupancy occupancy = OccupancyOf(shape, *g);
  int at = 0;
  if (start) {
    if (!shape.StartAllowed(index, *start)) return kNvmlInvalidArgument;
    if (!shape.CanAdd(occupancy, index, *start, {}).ok()) return kNvmlInsufficientResources;
    at = *start;
  } else {
    at = shape.DefaultStart(occupancy, index);
    if (at < 0) return kNvmlInsufficientResources;
  }
  SimGi gi;
  gi.id = shape.GpuInstanceId(index, at);
  gi.profile_id = profile_id;
  gi.start = at;
  gi.size = profile->placement_size;
  g->gis.push_back(gi);
  std::sort(g->gis.begin(), g->gis.end(),
            [](const SimGi& a, const SimGi& b) { return a.id < b.id; });
  *gi_id = gi.id;
  return kNvmlSuccess;
}

int SimMachine::CreateCi(int gpu, int gi_id, int ci_profile_id, std::optional<int> start,
                         int* ci_id) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  SimGi* gi = MutableGi(gpu, gi_id);
  if (gi == nullptr) return kNvmlNotFound;
  const hw::GpuModel* model = ModelOf(gpu);
  const hw::GiProfile* gi_profile = model->mig->FindProfileBySmiId(gi->profile_id);
  const geometry::CiShape ci_shape(*model->mig, *gi_profile);
  const int ci_index = ci_shape.FindById(ci_profile_id);
  if (ci_index < 0) return kNvmlNotSupported;
  const std::vector<geometry::CiPlaced> existing = PlacedCis(ci_shape, *gi);
  const hw::CiProfile& ci_profile = ci_shape.profiles()[static_cast<size_t>(ci_index)];
  int at = -1;
  if (start) {
    if (std::find(ci_profile.starts.begin(), ci_profile.starts.end(), *start) ==
        ci_profile.starts.end()) {
      return kNvmlInvalidArgument;
    }
    at = *start;
  }
  auto fits = [&](int candidate) {
    std::vector<geometry::CiPlaced> trial = existing;
    trial.push_back({static_cast<std::uint8_t>(ci_index), static_cast<std::uint8_t>(candidate)});
    return !ci_shape.Validate(trial).has_value();
  };
  if (at >= 0) {
    if (!fits(at)) return kNvmlInsufficientResources;
  } else {
    for (int candidate : ci_profile.starts) {
      if (fits(candidate)) {
        at = candidate;
        break;
      }
    }
    if (at < 0) return kNvmlInsufficientResources;
  }
  int id = 0;
  while (std::any_of(gi->cis.begin(), gi->cis.end(), [&](const SimCi& ci) { return ci.id == id; }))
    ++id;
  if (id > 7) return kNvmlInsufficientResources;
  SimCi ci;
  ci.id = id;
  ci.profile_id = ci_profile_id;
  ci.start = at;
  ci.size = ci_profile.slices;
  ci.uuid = NewUuid("MIG");
  gi->cis.push_back(ci);
  std::sort(gi->cis.begin(), gi->cis.end(),
            [](const SimCi& a, const SimCi& b) { return a.id < b.id; });
  *ci_id = id;
  return kNvmlSuccess;
}

int SimMachine::DestroyGi(int gpu, int gi_id) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  SimGi* gi = MutableGi(gpu, gi_id);
  if (gi == nullptr) return kNvmlNotFound;
  if (!gi->cis.empty() || HasProcessOn(*g, gi_id, -1)) return kNvmlInUse;
  g->gis.erase(std::remove_if(g->gis.begin(), g->gis.end(),
                              [&](const SimGi& candidate) { return candidate.id == gi_id; }),
               g->gis.end());
  return kNvmlSuccess;
}

int SimMachine::DestroyCi(int gpu, int gi_id, int ci_id) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  SimGi* gi = MutableGi(gpu, gi_id);
  if (gi == nullptr) return kNvmlNotFound;
  auto it =
      std::find_if(gi->cis.begin(), gi->cis.end(), [&](const SimCi& ci) { return ci.id == ci_id; });
  if (it == gi->cis.end()) return kNvmlNotFound;
  if (HasProcessOn(*g, gi_id, ci_id)) return kNvmlInUse;
  gi->cis.erase(it);
  return kNvmlSuccess;
}

int SimMachine::Memory(int gpu, std::optional<int> gi_id, std::optional<int> ci_id,
                       MemoryInfo* out) const {
  const SimGpu* g = Gpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  *out = {};
  if (gi_id) {
    const SimGi* gi = Gi(gpu, *gi_id);
    if (gi == nullptr) return kNvmlNotFound;
    if (ci_id && std::none_of(gi->cis.begin(), gi->cis.end(),
                              [&](const SimCi& ci) { return ci.id == *ci_id; })) {
      return kNvmlNotFound;
    }
    const hw::GpuModel* model = ModelOf(gpu);
    out->total_mib = model->mig->FindProfileBySmiId(gi->profile_id)->memory_mib;
    for (const SimProcess& p : g->processes) {
      if (p.gi == *gi_id) out->used_mib += p.used_mib;  // CIs share their GI's memory
    }
  } else {
    out->total_mib = g->memory_total_mib;
    for (const SimProcess& p : g->processes) out->used_mib += p.used_mib;
  }
  out->free_mib = std::max<std::int64_t>(0, out->total_mib - out->used_mib);
  return kNvmlSuccess;
}

int SimMachine::AddProcess(int gpu, const SimProcess& process) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  if (process.pid == 0 || process.used_mib < 0) return kNvmlInvalidArgument;
  for (const SimGpu& other : state_.gpus) {
    for (const SimProcess& p : other.processes) {
      if (p.pid == process.pid && other.index == gpu) return kNvmlInvalidArgument;
    }
  }
  if (g->mig_current == MigMode::kEnabled) {
    const SimGi* gi = Gi(gpu, process.gi);
    if (gi == nullptr) return kNvmlNotFound;
    if (std::none_of(gi->cis.begin(), gi->cis.end(),
                     [&](const SimCi& ci) { return ci.id == process.ci; })) {
      return kNvmlNotFound;
    }
  } else if (process.gi >= 0 || process.ci >= 0) {
    return kNvmlInvalidArgument;
  }
  g->processes.push_back(process);
  return kNvmlSuccess;
}

int SimMachine::RemoveProcess(std::uint32_t pid) {
  bool found = false;
  for (SimGpu& gpu : state_.gpus) {
    const size_t before = gpu.processes.size();
    gpu.processes.erase(std::remove_if(gpu.processes.begin(), gpu.processes.end(),
                                       [&](const SimProcess& p) { return p.pid == pid; }),
                        gpu.processes.end());
    found = found || gpu.processes.size() != before;
  }
  return found ? kNvmlSuccess : kNvmlNotFound;
}

int SimMachine::AddHolder(int gpu, const std::string& name) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr || name.empty()) return kNvmlInvalidArgument;
  if (std::find(g->holders.begin(), g->holders.end(), name) == g->holders.end())
    g->holders.push_back(name);
  return kNvmlSuccess;
}

int SimMachine::RemoveHolder(int gpu, const std::string& name) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  auto it = std::find(g->holders.begin(), g->holders.end(), name);
  if (it == g->holders.end()) return kNvmlNotFound;
  g->holders.erase(it);
  return kNvmlSuccess;
}

int SimMachine::InjectXid(int gpu, std::uint64_t xid, int gi, int ci) {
  const SimGpu* g = Gpu(gpu);
  if (g == nullptr || xid == 0) return kNvmlInvalidArgument;
  if (gi >= 0 && Gi(gpu, gi) == nullptr) return kNvmlNotFound;
  state_.xids.push_back({gpu, xid, gi, gi >= 0 ? ci : -1});
  return kNvmlSuccess;
}

int SimMachine::SetLost(int gpu, bool lost) {
  SimGpu* g = MutableGpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  g->lost = lost;
  return kNvmlSuccess;
}

int SimMachine::CheckGpu(int gpu) const {
  const SimGpu* g = Gpu(gpu);
  if (g == nullptr) return kNvmlInvalidArgument;
  return g->lost ? kNvmlGpuIsLost : kNvmlSuccess;
}

void SimMachine::TakeXids(std::vector<XidEvent>* out) {
  for (const SimXid& x : state_.xids) {
    XidEvent event;
    event.gpu = x.gpu;
    event.xid = x.xid;
    if (x.gi >= 0) event.gi = x.gi;
    if (x.ci >= 0) event.ci = x.ci;
    out->push_back(event);
  }
  state_.xids.clear();
}

namespace {

bool Unsupported(const SimGpu& gpu, std::string_view figure) {
  return std::find(gpu.telemetry.unsupported.begin(), gpu.telemetry.unsupported.end(), figure) !=
         gpu.telemetry.unsupported.end();
}

// Board power limit by model id prefix, in W (public board specifications; 300 W for models not
// listed). Longer ids come before their prefixes ("H200" before "H20", "L40S" before "L4").
double PowerLimitW(const std::string& model_id) {
  static const std::pair<const char*, double> kLimits[] = {
      {"A100-40GB", 400}, {"A100-80GB", 400},
      {"A30", 165},       {"H100-80GB", 700},
      {"H100-NVL", 400},  {"H100-96GB", 700},
      {"H200", 700},      {"H20", 500},
      {"B200", 1000},     {"B300", 1100},
      {"GH200", 900},     {"GB200", 1200},
      {"GB300", 1400},    {"RTX-PRO-6000", 600},
      {"L40S", 350},      {"L40", 300},
      {"L4", 72},         {"T4", 70},
      {"A10", 150}};
  for (const auto& [prefix, watts] : kLimits) {
    if (model_id.rfind(prefix, 0) == 0) return watts;
  }
  return 300;
}

struct Clocks {
  int sm_idle;
  int sm_busy;
  int memory;
};

Clocks ClocksOf(const std::string& architecture) {
  if (architecture == "Hopper") return {345, 1980, 2619};
  if (architecture == "Blackwell") return {420, 1965, 3996};
  if (architecture == "Ampere") return {210, 1410, 1593};
  return {300, 1500, 5001};
}

bool HasGpm(const std::string& architecture) {
  return architecture == "Hopper" || architecture == "Blackwell";
}

double Round1(double value) { return std::round(value * 10) / 10; }

}  // namespace

double SimMachine::Load(const SimGpu& gpu, std::optional<int> gi) const {
  auto instance_load = [&](int id) {
    double sum = 0;
    for (const SimProcess& p : gpu.processes) {
      if (p.gi == id) sum += p.sm_activity_pct;
    }
    return std::min(100.0, sum);
  };
  if (gi) return instance_load(*gi);
  if (gpu.mig_current != MigMode::kEnabled) {
    double sum = 0;
    for (const SimProcess& p : gpu.processes) sum += p.sm_activity_pct;
    return std::min(100.0, sum);
  }
  // MIG: each instance's load weighted by its share of the compute slices.
  const hw::GpuModel* model = catalog_.Find(gpu.model_id);
  if (model == nullptr || !model->mig) return 0;
  double weighted = 0;
  for (const SimGi& instance : gpu.gis) {
    const hw::GiProfile* profile = model->mig->FindProfileBySmiId(instance.profile_id);
    if (profile == nullptr) continue;
    weighted += instance_load(instance.id) * profile->compute_slices;
  }
  return std::min(100.0, weighted / model->mig->compute_slices);
}

int SimMachine::Telemetry(int gpu, GpuTelemetry* out) const {
  if (int code = CheckGpu(gpu); code != kNvmlSuccess) return code;
  const SimGpu& g = *Gpu(gpu);
  const hw::GpuModel* model = ModelOf(gpu);
  const std::string architecture = model != nullptr ? model->architecture : "";
  const SimTelemetry& t = g.telemetry;
  const double load = Load(g, std::nullopt);
  const bool idle = g.processes.empty();
  *out = {};
  if (!Unsupported(g, "temperature")) {
    out->temperature_c = t.temperature_c.value_or(32 + static_cast<int>(std::lround(load / 2)));
  }
  if (!Unsupported(g, "power")) {
    const double limit = PowerLimitW(g.model_id);
    out->power_limit_w = limit;
    out->power_w = t.power_w.value_or(Round1(limit * (0.12 + 0.78 * load / 100)));
  }
  if (!Unsupported(g, "clocks")) {
    const Clocks clocks = ClocksOf(architecture);
    out->sm_clock_mhz = idle ? clocks.sm_idle : clocks.sm_busy;
    out->memory_clock_mhz = clocks.memory;
  }
  // NVML gives no utilisation rates while MIG is on.
  if (!Unsupported(g, "utilization") && g.mig_current != MigMode::kEnabled) {
    const int utilization = t.utilization_pct.value_or(static_cast<int>(std::lround(load)));
    out->utilization_pct = utilization;
    out->memory_utilization_pct = static_cast<int>(std::lround(utilization * 0.6));
  }
  if (!Unsupported(g, "throttle")) {
    out->throttle_reasons = t.throttle_reasons | (idle ? kThrottleGpuIdle : 0);
  }
  // GeForce boards have no ECC memory.
  const bool geforce =
      g.model_id.find("4090") != std::string::npos || g.model_id.find("5090") != std::string::npos;
  if (!Unsupported(g, "ecc") && !geforce) {
    out->ecc_corrected = t.ecc_corrected;
    out->ecc_uncorrected = t.ecc_uncorrected;
  }
  // Row remapping came with Ampere's HBM boards (the MIG-capable ones).
  if (!Unsupported(g, "remapped_rows") && g.mig_capable) {
    out->remapped_rows_correctable = t.remapped_rows_correctable;
    out->remapped_rows_uncorrectable = t.remapped_rows_uncorrectable;
    out->remap_pending = t.remap_pending;
    out->remap_failure = t.remap_failure;
  }
  return kNvmlSuccess;
}

int SimMachine::SampleActivity(int gpu, std::optional<int> gi, Activity* out) const {
  if (int code = CheckGpu(gpu); code != kNvmlSuccess) return code;
  const SimGpu& g = *Gpu(gpu);
  const hw::GpuModel* model = ModelOf(gpu);
  if (model == nullptr || !HasGpm(model->architecture) || Unsupported(g, "gpm")) {
    return kNvmlNotSupported;
  }
  if (gi) {
    if (g.mig_current != MigMode::kEnabled) return kNvmlNotSupported;
    if (Gi(gpu, *gi) == nullptr) return kNvmlNotFound;
  }
  double load = Load(g, gi);
  if (!gi && g.mig_current != MigMode::kEnabled && g.telemetry.utilization_pct) {
    load = *g.telemetry.utilization_pct;
  }
  *out = {};
  out->sm_active_pct = Round1(load);
  out->sm_occupancy_pct = Round1(load * 0.6);
  out->dram_bandwidth_pct = Round1(load * 0.4);
  return kNvmlSuccess;
}

}  // namespace gpuslice::device::sim
