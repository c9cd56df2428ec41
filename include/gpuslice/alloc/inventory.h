// gpuslice/alloc/inventory.h
//
// The placement inventory of one machine, from its GPUs as the device backend lists them. GPUs of
// one model and mode form one placement node named "<host>/<model>" (the engine's nodes have one
// model and mode each); the machine's CPU and memory are split among the groups in proportion to
// their GPU counts. A GPU in MIG mode (or, with `mig_if_capable`, any MIG-capable GPU, as for a
// simulated fleet) is handed out as MIG instances; the others are shared: taken whole, or in
// fractional shares whose limits the CUDA interposer enforces (docs/SHIM.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/place/cluster.h"

namespace gpuslice::alloc {

// Whether a GPU is handed out as MIG instances, and the placement node it belongs to:
// "<host>/<model id>", with "-mig" appended when it is. REQUIRES: gpu.model is set.
bool HandedOutAsMig(const device::GpuInfo& gpu, bool mig_if_capable);
std::string NodeNameFor(const std::string& host, const device::GpuInfo& gpu, bool mig_if_capable);

// `fixed` (by NVML index; may be null) gives GPUs in MIG mode a fixed layout.
absl::StatusOr<place::Cluster> InventoryFromGpus(
    const std::string& host, const std::vector<device::GpuInfo>& gpus, std::int64_t cpu_milli,
    std::int64_t memory_mib, bool mig_if_capable,
    const std::map<int, place::FixedLayout>* fixed = nullptr);

}  // namespace gpuslice::alloc
