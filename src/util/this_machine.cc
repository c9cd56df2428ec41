#include "gpuslice/util/this_machine.h"

#include <unistd.h>

#include <algorithm>

namespace gpuslice::util {

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

std::int64_t MachineMemoryMib() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page / (1024 * 1024) : 65536;
}

std::int64_t MachineCpuMilli() {
  return static_cast<std::int64_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))) * 1000;
}

}  // namespace gpuslice::util
