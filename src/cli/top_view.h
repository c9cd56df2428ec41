// The frame `gpuslice top` shows: a machine's GPUs and their MIG instances, each with a memory bar,
// SM activity, processes, how long it has been idle and the lease (tenant) that holds it.
//
//   GPU 0  NVIDIA H100 80GB HBM3 · MIG · mem █░░░░░░░░░ 10.00/79.65 GiB · sm 12% · util - · temp
//   41C · …
//     DEVICE  PROFILE  PLACEMENT  MEMORY                      SM   PROCS  IDLE    LEASE
//     GI 2    3g.40gb  ····████   ███░░░░░░░ 10.00/39.50 GiB  37%  1      0s      #3 team-a medium:
//     ... GI 9    1g.10gb  █·······   ░░░░░░░░░░ 0.00/9.62 GiB    0%   0      ≥5m07s  -
//
// Everything here is pure and deterministic: the command (command_top.cc) collects the figures,
// fetches the leases, measures the clock and paints the terminal; this file only turns what it was
// given into lines (RenderTop) or JSON (TopJson), and keeps the idle clocks (IdleTracker).
//
// Contract:
//   * A figure that is absent (std::nullopt in the collector's figures, or a device without a
//     lease, idle time or placement) shows as "-" in text and null in JSON, never as a zero.
//   * Every line fits `width` display columns: longer ones are cut and end with "…"; nothing wraps.
//   * ANSI colour codes appear only when `color` is set; they never count towards the width.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpuslice/device/backend.h"
#include "gpuslice/hw/gpu_model.h"
#include "gpuslice/metrics/collector.h"
#include "nlohmann/json.hpp"

namespace gpuslice::cli {

// A lease that holds a device (from the service's GET /v1/leases `bound` devices).
struct DeviceLease {
  std::int64_t lease = 0;
  std::string tenant;
  std::string class_name;
  std::string purpose;
};

// Where a GPU's instances sit, for the placement columns and the drawing. The collector's figures
// carry no placements; the command reads them from the backend (ListGpuInstances).
struct GpuPlacements {
  const hw::GpuModel* model = nullptr;       // the catalog's model; null: not in the catalog
  std::vector<device::GpuInstanceInfo> gis;  // by GI id
};

// How long a device has had no process.
struct Idle {
  std::int64_t seconds = 0;
  // The device had no process when watching began: it has been idle at least `seconds`.
  bool at_least = false;
};

struct TopInput {
  std::string title;  // first line when not empty
  metrics::MachineFigures machine;
  std::map<int, GpuPlacements> placements;  // by GPU index; a GPU missing here has no drawing
  std::map<std::string, std::vector<DeviceLease>> leases;  // by device key (DeviceKey)
  std::map<std::string, Idle> idle;                        // by device key (DeviceKey)
  std::vector<std::string> status;  // last lines: the leases' source, hints, errors
};

struct TopOptions {
  std::size_t width = 120;  // display columns per line
  bool color = false;       // ANSI colours (bars by fill, throttle and loss in red, bold headers)
  bool processes = false;   // a line per process under its device
  bool drawing = true;      // the memory-slice drawing (layout_drawing.h) under each MIG GPU
};

// The key of a device in TopInput's maps: a MIG instance's UUID (its first compute instance's),
// "<GPU UUID>/gi<N>" for an instance without a compute instance, the GPU's UUID for a whole GPU.
// These are the UUIDs a lease's bound devices name.
std::string DeviceKey(const metrics::GpuFigures& gpu);
std::string DeviceKey(const metrics::GpuFigures& gpu, const metrics::InstanceFigures& instance);

// The frame, one string per line, without line ends. Each line fits options.width columns.
std::vector<std::string> RenderTop(const TopInput& input, const TopOptions& options);

// The frame's data: {host, gpus: [{index, uuid, name, mig, lost, memory_used_mib,
// memory_total_mib, temperature_c, power_w, power_limit_w, utilization_pct, sm_active_pct,
// throttle: [..], processes: [{pid, name, used_memory_mib, gi, ci}], leases, idle_s,
// idle_at_least, instances: [{gi, profile, uuid, placement: {start, size}, memory_used_mib,
// ...}]}], xids, errors, status}. Absent figures are null.
nlohmann::json TopJson(const TopInput& input);

// One line per GPU, so that a whole 8-GPU node fits a terminal above the details:
//   GPU 0  NVIDIA H100 80GB HBM3  MIG ██▒▒····  4 inst · 1 leased · mem 10.00/79.65 GiB · sm 12% ·
//   41C
// The strip has one column per placement unit: █ an instance with processes or a lease, ▒ an idle
// instance, · a free unit ("-" when the placements are unknown). Each line fits options.width.
std::vector<std::string> RenderOverview(const TopInput& input, const TopOptions& options);

// The order of the GPUs in a frame: by index, most memory used, most SM activity, or the longest
// idle device first (a GPU counts its longest idle instance). Unknown figures sort last; ties keep
// index order.
enum class TopSort { kIndex, kMemory, kActivity, kIdle };
inline constexpr int kTopSorts = 4;
// "index", "memory", "sm", "idle".
const char* TopSortName(TopSort sort);
void SortGpus(TopSort sort, TopInput& input);

// `text` cut to `width` display columns (ANSI escapes take none), ending with "…" when cut.
std::string FitToWidth(const std::string& text, std::size_t width);

// "42s", "5m07s", "3h05m", "2d04h"; a leading "≥" when `at_least`.
std::string IdleText(const Idle& idle);

// The names of the heat and power throttle reasons set in `reasons` (device::kThrottle*):
// "power-cap", "hw-slowdown", "sw-thermal", "hw-thermal", "power-brake". Idling and clock
// settings are not throttling and are left out.
std::vector<std::string> ThrottleNames(std::uint64_t reasons);

// The idle clocks of the devices, fed one collection at a time. A device is idle while its process
// count is known and zero; its clock starts at the first collection that saw it idle (and is a
// lower bound when that was the first collection). A device with processes is idle 0 s; one whose
// processes are unknown (or a lost GPU) has no idle time.
class IdleTracker {
 public:
  void Observe(const metrics::MachineFigures& machine, double now_s);
  // The idle times at the last Observe.
  const std::map<std::string, Idle>& idle() const { return idle_; }

 private:
  struct Clock {
    double since_s = 0;
    bool at_least = false;
  };
  bool first_ = true;
  std::map<std::string, Clock> clocks_;  // devices idle now, since when
  std::map<std::string, Idle> idle_;
};

// Lease JSON from GET /v1/leases ({"leases": [Lease]}) to the devices they hold, keyed by the bound
// devices' UUIDs (MIG or GPU). Only active leases count; malformed entries are skipped.
std::map<std::string, std::vector<DeviceLease>> LeasesByDevice(const nlohmann::json& reply);

}  // namespace gpuslice::cli
