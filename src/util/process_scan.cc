#include "gpuslice/util/process_scan.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace gpuslice::util {

std::vector<FoundProcess> FindProcesses(const std::string& proc_root,
                                        const std::vector<ProcessPattern>& patterns) {
  std::vector<FoundProcess> found;
  DIR* dir = ::opendir(proc_root.c_str());
  if (dir == nullptr) return found;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string pid_text = entry->d_name;
    if (pid_text.empty() || !std::all_of(pid_text.begin(), pid_text.end(),
                                         [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    std::ifstream file(proc_root + "/" + pid_text + "/comm");
    std::string comm;
    if (!file || !std::getline(file, comm)) continue;
    for (const ProcessPattern& pattern : patterns) {
      if (comm.rfind(pattern.comm_prefix, 0) == 0) {
        found.push_back({std::strtol(pid_text.c_str(), nullptr, 10), pattern.name});
        break;
      }
    }
  }
  ::closedir(dir);
  std::sort(found.begin(), found.end(),
            [](const FoundProcess& a, const FoundProcess& b) { return a.pid < b.pid; });
  return found;
}

}  // namespace gpuslice::util
