// gpuslice/dra/device_classes.h
//
// The `resource.k8s.io/v1` DeviceClass objects that go with the driver's devices
// (gpuslice/dra/gpu_devices.h; ../shared/reference/kubernetes-dra.md §4.7). Claims name a class in
// `deviceClassName`; the class's CEL selectors pick the devices it may be given:
//   * `gpu.gpuslice.io`     whole GPUs (type "gpu"), extendedResourceName `nvidia.com/gpu`;
//   * `mig.gpuslice.io`     MIG devices of any profile (type "mig": on demand and fixed layouts);
//   * `shared.gpuslice.io`  shared GPUs (type "shared": consumable compute and memory);
//   * `mig-<profile label>.gpuslice.io`, one per distinct MIG profile name of the catalog: the MIG
//     devices of that profile, extendedResourceName `nvidia.com/mig-<profile>` ('+' → '.', the
//     device plugin's resource name, k8s::MigResourceName). The label is the one of the devices'
//     names (MigDeviceName): "1g.10gb" → "mig-1g-10gb.gpuslice.io", "1g.10gb+me" →
//     "mig-1g-10gb-with-me.gpuslice.io".
// With an extendedResourceName, a pod that asks for that extended resource (`nvidia.com/gpu: 1`,
// `nvidia.com/mig-1g.10gb: 1`) is given a claim for the class by the scheduler (feature gate
// DRAExtendedResource), so pod specs written for the device plugin keep working.
//
// Every class has exactly one selector, which checks `device.driver == 'gpu.gpuslice.io'` first
// and the type before any other attribute, so that it never reads an attribute a device lacks
// (CEL fails on an unknown field, and the scheduler then aborts the allocation).
// Class names are DNS subdomains (≤ 253, labels ≤ 63) and extended resource names qualified
// names (prefix a DNS subdomain, name ≤ 63); a profile whose class or resource name would be
// invalid or taken by an earlier profile is left out (the built-in catalog has none:
// tests/dra/device_classes_test.cc).
//
// Pure and deterministic: the general classes first (gpu, mig, shared), then the profiles' in
// class-name order. Each object: apiVersion, kind, metadata {name, labels}, spec.
#pragma once

#include <vector>

#include "gpuslice/hw/catalog.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {

inline constexpr char kGpuClass[] = "gpu.gpuslice.io";
inline constexpr char kMigClass[] = "mig.gpuslice.io";
inline constexpr char kSharedClass[] = "shared.gpuslice.io";

std::vector<nlohmann::json> DeviceClasses(const hw::Catalog& catalog);

}  // namespace gpuslice::dra
