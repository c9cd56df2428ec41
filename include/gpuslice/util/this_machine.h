// gpuslice/util/this_machine.h: the machine this process runs on, as the daemons report it.
#pragma once

#include <cstdint>
#include <string>

namespace gpuslice::util {

// Its host name ("localhost" when the kernel gives none).
std::string Hostname();
// Its memory in MiB (65536 when the kernel does not say).
std::int64_t MachineMemoryMib();
// Its online CPUs, in milli-cores.
std::int64_t MachineCpuMilli();

}  // namespace gpuslice::util
