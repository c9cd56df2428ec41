// gpuslice/metrics/collector.h
//
// Per-GPU and per-MIG-instance figures of one machine, read through a device::Backend (NVML or
// the simulator), and the Prometheus families that expose them (gpuslice/metrics/exposition.h).
//
// Collect asks the backend for each GPU's memory and processes and, with MIG on, for each GPU
// instance, its compute instances, their memory and their processes. A query that fails leaves
// its figure absent (and says why in `errors`): a figure the hardware cannot give is never written
// as a made-up zero.
//
// Families uses dcgm-exporter's names and labels where the meaning is the same, so that existing
// dashboards work:
//   DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE, DCGM_FI_DEV_FB_TOTAL   MiB, per GPU and per instance
//   labels gpu, UUID, device, modelName, Hostname, and for an instance GPU_I_ID, GPU_I_PROFILE
// and gpuslice_* for the rest:
//   gpuslice_gpu_mig_mode                    1 when MIG is on
//   gpuslice_processes                       compute processes, per GPU and per instance
//   gpuslice_process_memory_mib              their memory, per GPU and per instance
//   gpuslice_lease_info                      1 per device a lease holds: lease, tenant, class, UUID
//   gpuslice_lease_idle_seconds              how long the lease's devices have had no process
//   gpuslice_lease_vram_limit_mib            the VRAM cap of a share (issue 8's interposer)
//   gpuslice_collect_errors                  queries that failed in this collection
// Software slices (issue 8's interposer, gpuslice/shim/slices.h), per slice, labels slice, UUID
// (the slice's GPU, "" before its first context), Hostname, and lease for a slice `lease-<id>`:
//   gpuslice_slice_vram_used_bytes           device memory the slice's live processes hold
//   gpuslice_slice_vram_cap_bytes            its VRAM cap (only when it has one)
//   gpuslice_slice_vram_peak_bytes           the most it ever held
//   gpuslice_slice_compute_share             its compute share, ratio 0-1 (only when it has one)
//   gpuslice_slice_processes                 its live processes
//   gpuslice_slice_kernel_seconds_total      GPU time of its kernels
//   gpuslice_slice_throttled_seconds_total   time its launches were held back for the share
//   gpuslice_slice_launches_total            kernel and graph launches
//   gpuslice_slice_refused_allocations_total allocations refused at the cap
//   gpuslice_slice_reclaimed_processes_total dead processes whose memory was given back
//   (the counters are over the slice's life, its dead processes included)
// Health, per GPU (each only where the GPU gives it):
//   DCGM_FI_DEV_GPU_TEMP (C), DCGM_FI_DEV_POWER_USAGE and _POWER_MGMT_LIMIT (W),
//   DCGM_FI_DEV_SM_CLOCK and _MEM_CLOCK (MHz), DCGM_FI_DEV_GPU_UTIL and _MEM_COPY_UTIL (%, MIG
//   off), DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (bits) and gpuslice_gpu_throttled{reason} (0/1 each),
//   DCGM_FI_DEV_ECC_SBE_VOL_TOTAL / _DBE_VOL_TOTAL, DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS /
//   _UNCORRECTABLE_REMAPPED_ROWS / _ROW_REMAP_FAILURE, gpuslice_gpu_row_remap_pending,
//   gpuslice_gpu_lost
//   (dcgm-exporter declares the ECC totals as counters; they are gauges here because the
//   exposition format wants counters to end in _total, and these names are kept for dashboards)
// Activity, per GPU and per MIG instance, from GPM (ratios 0-1, as dcgm-exporter gives them):
//   DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_SM_OCCUPANCY, DCGM_FI_PROF_DRAM_ACTIVE
// Families is pure; Collect only reads the backend, CollectSlices the slices' accounting files.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpuslice/device/backend.h"
#include "gpuslice/metrics/exposition.h"
#include "gpuslice/shim/slices.h"

namespace gpuslice::metrics {

struct InstanceFigures {
  int gi = -1;
  std::string profile;  // GPU instance profile name, "1g.10gb"
  std::string uuid;     // MIG device UUID of its first compute instance ("" when it has none)
  std::optional<std::int64_t> memory_used_mib;
  std::optional<std::int64_t> memory_total_mib;
  std::optional<int> processes;
  std::optional<std::int64_t> process_memory_mib;
  std::vector<device::ProcessInfo> process_list;  // when `processes` is known
  std::optional<device::Activity> activity;       // GPM, Hopper and later
};

struct GpuFigures {
  int index = 0;
  std::string uuid;
  std::string name;  // as the driver names it ("NVIDIA H100 80GB HBM3"): dcgm's modelName
  bool mig = false;
  std::optional<std::int64_t> memory_used_mib;
  std::optional<std::int64_t> memory_total_mib;
  std::optional<int> processes;
  std::optional<std::int64_t> process_memory_mib;
  std::vector<device::ProcessInfo> process_list;  // when `processes` is known (all instances')
  device::GpuTelemetry telemetry;                 // each figure absent when not given
  std::optional<device::Activity> activity;       // GPM, Hopper and later
  bool lost = false;                              // a query answered GPU_IS_LOST
  std::vector<InstanceFigures> instances;         // MIG only, by GI id
};

// The Kubernetes pod holding a device or a software slice (from kubelet's pod-resources API,
// gpuslice/k8s/pod_resources.h): its series get dcgm-exporter's pod, namespace and container
// labels.
struct PodOwnerLabels {
  std::string pod_namespace;
  std::string pod;
  std::string container;
};

struct MachineFigures {
  std::string host;
  std::map<std::string, PodOwnerLabels> pods_by_uuid;   // GPU or MIG UUID → pod
  std::map<std::string, PodOwnerLabels> pods_by_slice;  // software slice id → pod
  std::vector<GpuFigures> gpus;
  std::vector<device::XidEvent> xids;       // critical Xid events taken by CollectXids
  std::vector<shim::SliceSnapshot> slices;  // software slices read by CollectSlices, by id
  std::vector<std::string> errors;          // one line per query that failed
};

// Reads the machine's figures through `backend`. Never fails as a whole: a GPU list that cannot
// be read gives no GPUs and an error line.
MachineFigures Collect(device::Backend& backend, const std::string& host);

// Takes the backend's Xid events (those since the previous call) into `machine.xids`. Separate
// from Collect because taking them drains them: only the one loop that feeds the alerts
// (metrics/alerts.h) calls it, so that scrapes in between do not steal them.
void CollectXids(device::Backend& backend, MachineFigures& machine);

// Reads the software slices' accounting files of `directory` (shim::SliceDirectory() on the
// machine the interposer runs on) into `machine.slices`. A missing directory is no slices; a file
// that cannot be read is left out with an error line.
void CollectSlices(const std::string& directory, MachineFigures& machine);

// A device a lease holds, to tie its series to the lease and tenant.
struct Holder {
  std::string device_uuid;  // MIG or GPU UUID, as in the lease's bound devices
  std::int64_t lease = 0;
  std::string tenant;
  std::string class_name;
  std::optional<std::int64_t> idle_s;  // absent when not known
  std::int64_t vram_limit_mib = 0;     // shares only; 0 = none
  std::int64_t idle_threshold_s = 0;   // the class's idle timeout; 0 = none (no idle alert)
};

// The throttle reason bits and their label values ("sw_thermal", ...), in bit order.
const std::vector<std::pair<std::uint64_t, std::string>>& ThrottleReasonNames();

// The families of one machine and the leases held there.
std::vector<Family> Families(const MachineFigures& machine, const std::vector<Holder>& holders);

}  // namespace gpuslice::metrics
