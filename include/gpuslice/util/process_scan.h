// gpuslice/util/process_scan.h
//
// Finding host processes by name: the daemons that hold GPUs (nvidia-persistenced, DCGM, …) and
// the Kubernetes GPU components, which NVML cannot report. Reads PROC_ROOT/<pid>/comm (the kernel
// truncates it to 15 characters, so patterns are prefixes of at most 15 characters).
#pragma once

#include <string>
#include <vector>

namespace gpuslice::util {

struct ProcessPattern {
  std::string comm_prefix;  // matched against the start of /proc/<pid>/comm
  std::string name;         // how to report it
};

struct FoundProcess {
  long pid = 0;
  std::string name;  // the pattern's name
};

// The processes under `proc_root` whose comm starts with one of the patterns, ordered by pid.
// A missing or unreadable proc_root gives an empty list.
std::vector<FoundProcess> FindProcesses(const std::string& proc_root,
                                        const std::vector<ProcessPattern>& patterns);

}  // namespace gpuslice::util
