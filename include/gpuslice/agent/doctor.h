// gpuslice/agent/doctor.h
//
// The pre-deployment checklist for one node, each check pass / warn / fail with the fix:
// the driver library and its version against each GPU's MIG minimum (mig-facts §7), the CUDA
// driver library, MIG capability, MIG mode and a pending change, the driver's GPU-instance
// profiles against the catalog (profiles either side lacks, names and memory sizes that differ),
// what holds each GPU and would block a reset (daemons, the display driver, processes), and the
// Kubernetes GPU components and monitoring agents that must be paused during a MIG
// reconfiguration.
#pragma once

#include <string>
#include <vector>

#include "gpuslice/device/backend.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::agent {

enum class CheckLevel { kPass, kInfo, kWarn, kFail };

struct Check {
  CheckLevel level = CheckLevel::kPass;
  std::string subject;  // "node", "GPU 0"
  std::string what;     // the finding
  std::string fix;      // what to do (empty for pass/info)
};

struct DoctorOptions {
  bool simulated = false;  // host checks (CUDA library, /proc) do not apply
  std::string proc_root = "/proc";
  std::string cuda_library = "libcuda.so.1";
};

std::vector<Check> RunDoctor(device::Backend& backend, const hw::Catalog& catalog,
                             const DoctorOptions& options);

// Compares dotted driver versions numerically ("525.85.12" < "580.65.06"); -1, 0 or 1.
int CompareVersions(const std::string& a, const std::string& b);

std::string ToString(CheckLevel level);

}  // namespace gpuslice::agent
