// gpuslice/dra/gpu_devices.h
//
// The devices one GPU offers to Kubernetes' DRA scheduler, and the counters that make the
// scheduler's choices safe. MIG on demand: one device per GPU-instance profile × allowed
// placement start, none of which exists yet; preparing a claim creates the instance at exactly
// that placement. The scheduler knows nothing about MIG, only counters: a set of devices can be
// allocated together when, for every counter, what they consume adds up to at most its value.
// The counters are chosen so that this holds exactly for the sets of instances the catalog's
// rules (gpuslice/geometry/shape.h) accept, on the driver branch given:
//   * memory-slice-<u> = 1 for every placement unit u; an instance consumes the units it covers
//     (no overlap);
//   * compute-slices = the GPU's compute slices; an instance consumes its own;
//   * ofa-engines = the GPU's optical-flow engines; an instance consumes its own (this is what
//     limits "+me" profiles to one instance);
//   * media-users = the GPU's placement units; every instance that is not "-me" consumes 1, a
//     "+me.all" instance all of them (it may only sit beside "-me" instances);
//   * max-<profile> = the profile's instance cap, only where the cap binds (placements alone
//     would allow more); an instance of the profile consumes 1;
//   * pairing-3-4 (drivers before R510 only) = the most 3-slice instances a GPU can hold; a
//     3-slice instance consumes 1 and a 4-slice instance all of it (they may not coexist);
//   * the whole-GPU device consumes every counter in full, so it excludes every MIG device.
// Profiles newer than the driver branch are left out. tests/dra/counters_test.cc checks both
// directions against the geometry's own validator for every MIG model of the catalog.
//
// Instances the driver did not create (`GpuInfo::foreign`: an admin's, another tool's) stay
// exact too: what each one consumes is taken out of the counter values, and a device that no
// longer fits beside them is not offered (nor the whole GPU), so any set the scheduler can
// allocate, together with them, is still a valid layout. A foreign instance the catalog cannot
// place (unknown profile or start) makes the GPU offer nothing on demand.
// Other kinds of GPU:
//   * `fixed`: an admin-fixed layout; its existing instances are the devices (no counters); with
//     `shared` too, each instance is a shared device ("<its name>-shared") with the consumable
//     capacities below, taken from the instance (a fractional MIG slice);
//   * `shared` (MIG off): one device `gpu-<i>-shared` that many claims share, with consumable
//     capacities `compute` (per mille of the GPU's time) and `memory` (MiB), each with a request
//     policy (compute: default 100, 10 to 1000 in steps of 10; memory: 256 MiB steps, default a
//     tenth of the GPU), instead of the whole GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpuslice/dra/resource_model.h"
#include "gpuslice/hw/gpu_model.h"

namespace gpuslice::dra {

inline constexpr char kDriverName[] = "gpu.gpuslice.io";

// An instance that exists on a GPU: its GI profile name as the catalog spells it and its start.
struct ExistingInstance {
  std::string profile;
  int start = 0;
  std::string uuid;  // "MIG-..." of its compute instance (fixed layouts publish it); may be ""
};

// What the driver knows about one GPU of its node.
struct GpuInfo {
  int index = 0;     // NVML index, also in device names
  std::string uuid;  // "GPU-..."
  const hw::GpuModel* model = nullptr;
  std::string driver_version;             // as NVML reports it, e.g. "550.54.15"
  int driver_branch = 0;                  // e.g. 470; 0 = the newest rules
  bool mig_on_demand = true;              // offer MIG devices (the GPU is MIG-capable and allowed)
  bool whole = true;                      // offer the whole GPU
  std::vector<ExistingInstance> foreign;  // instances the driver did not create
  bool fixed = false;   // offer `foreign` as they are (an admin-fixed layout), nothing on demand
  bool shared = false;  // MIG off: gpu-<i>-shared instead of the whole GPU; fixed: shared instances
  std::vector<DeviceTaint> taints;  // put on every device of this GPU (health, drain)
};

// The consumable capacities of a shared device and their steps.
inline constexpr std::int64_t kComputeMilli = 1000;
inline constexpr std::int64_t kComputeStep = 10;
inline constexpr std::int64_t kMemoryStepMib = 256;

struct GpuDevices {
  std::vector<CounterSet> counter_sets;  // one or two per GPU (a second one if > 32 counters)
  std::vector<Device> devices;           // sorted by name
};

// The counter sets and devices of one GPU. REQUIRES: gpu.model != nullptr.
GpuDevices DevicesOf(const GpuInfo& gpu);

// "gpu-<index>-mig-<profile as a DNS label>-<start>", "gpu-<index>".
std::string MigDeviceName(int gpu_index, const std::string& profile, int start);
std::string WholeDeviceName(int gpu_index);
std::string SharedDeviceName(int gpu_index);
// The memory capacity a shared device of this much memory offers (whole 256 MiB steps).
std::int64_t SharedMemoryMib(std::int64_t memory_mib);

// "8.0" -> "8.0.0", "550.54.15" -> "550.54.15", "535.104.05" -> "535.104.5"; "" if unparsable.
std::string SemverOf(const std::string& dotted);

}  // namespace gpuslice::dra
