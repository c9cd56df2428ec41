// gpuslice/device/presence.h — signs that a machine has NVIDIA GPUs or their driver, whether or
// not NVML works. `gpuslice serve` falls back to a simulated fleet only where there are none: on
// a GPU host with a broken driver it must refuse, never hand out fake slices.
#pragma once

#include <string>
#include <vector>

namespace gpuslice::device {

// What under `root` ("/" on a real machine; a scratch tree in tests) shows NVIDIA hardware or a
// loaded driver: /proc/driver/nvidia/version, /dev/nvidiactl, /dev/nvidia0, and PCI devices of
// vendor 0x10de whose class is a display or 3D controller (0x03xxxx). One line per sign found;
// empty when there is none.
std::vector<std::string> NvidiaTraces(const std::string& root = "/");

}  // namespace gpuslice::device
