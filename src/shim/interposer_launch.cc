// The interposer's launches (interposer.h): every launch path counted, and held to the slice's
// compute share by the throttle (throttle.h) once the slice has its place in the GPU's schedule.
#include <atomic>
#include <mutex>
#include <string>

#include "interposer.h"

namespace gpuslice::shim {

using namespace gpuslice::cuda;  // NOLINT: the driver's names, as applications write them

namespace {
std::atomic<std::uint64_t> g_launches{0};
}  // namespace

void FlushLaunches() {
  const std::uint64_t launches = g_launches.exchange(0, std::memory_order_relaxed);
  if (launches > 0 && g_accounting.IsOpen()) g_accounting.AddLaunches(launches);
}

namespace {

inline void CountLaunch() {
  if ((g_launches.fetch_add(1, std::memory_order_relaxed) & 4095) == 4095) [[unlikely]] {
    FlushLaunches();
  }
}

// The slice's place in its GPU's schedule, at its first launch. False: launches are refused,
// since the share could not be kept.
bool JoinSchedule() {
  static std::mutex mutex;
  static bool failed = false;  // said once; launches stay refused
  std::lock_guard<std::mutex> hold(mutex);
  if (failed) return false;
  if (!g_throttle.NeedsSchedule()) return true;  // another thread joined meanwhile
  char uuid[kGpuUuidSize];
  g_accounting.GpuUuid(uuid, sizeof uuid);
  std::string error;
  if (g_throttle.JoinSchedule(uuid[0] != '\0' ? uuid : "unknown", g_config.slice_id.c_str(),
                              &error)) {
    return true;
  }
  Log(1, "%s; kernel launches are refused because the compute share could not be kept",
      error.c_str());
  failed = true;
  return false;
}

template <typename Call>
CUresult Launch(CUstream stream, bool per_thread, const void* key, Call&& call) {
  CountLaunch();
  if (!g_throttle.Timing()) return call();
  if (g_throttle.NeedsSchedule() && !JoinSchedule()) return CUDA_ERROR_NOT_PERMITTED;
  Throttle::Ticket ticket = g_throttle.Before(stream, per_thread, key);
  const CUresult result = call();
  g_throttle.After(ticket, result);
  return result;
}

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::cuda;  // NOLINT
namespace cuda = gpuslice::cuda;
namespace shim = gpuslice::shim;
using shim::g_driver;

// ---------------------------------------------------------------------------------------------
// Launches: every path goes through the throttle.

#define GPUSLICE_LAUNCH_KERNEL(name, per_thread)                                             \
  GPUSLICE_EXPORT CUresult name(                                                             \
      CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,     \
      unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                \
      unsigned int sharedMemBytes, CUstream stream, void** kernelParams, void** extra) {     \
    GPUSLICE_ENTER(name, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,   \
                   sharedMemBytes, stream, kernelParams, extra)                              \
    return shim::Launch(stream, per_thread, f, [&] {                                         \
      return g_driver.name(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, \
                           sharedMemBytes, stream, kernelParams, extra);                     \
    });                                                                                      \
  }
GPUSLICE_LAUNCH_KERNEL(cuLaunchKernel, false)
GPUSLICE_LAUNCH_KERNEL(cuLaunchKernel_ptsz, true)
#undef GPUSLICE_LAUNCH_KERNEL

#define GPUSLICE_LAUNCH_EX(name, per_thread)                                                     \
  GPUSLICE_EXPORT CUresult name(const CUlaunchConfig* config, CUfunction f, void** kernelParams, \
                                void** extra) {                                                  \
    GPUSLICE_ENTER(name, config, f, kernelParams, extra)                                         \
    return shim::Launch(config == nullptr ? nullptr : config->hStream, per_thread, f,            \
                        [&] { return g_driver.name(config, f, kernelParams, extra); });          \
  }
GPUSLICE_LAUNCH_EX(cuLaunchKernelEx, false)
GPUSLICE_LAUNCH_EX(cuLaunchKernelEx_ptsz, true)
#undef GPUSLICE_LAUNCH_EX

#define GPUSLICE_LAUNCH_COOPERATIVE(name, per_thread)                                        \
  GPUSLICE_EXPORT CUresult name(                                                             \
      CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,     \
      unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                \
      unsigned int sharedMemBytes, CUstream stream, void** kernelParams) {                   \
    GPUSLICE_ENTER(name, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,   \
                   sharedMemBytes, stream, kernelParams)                                     \
    return shim::Launch(stream, per_thread, f, [&] {                                         \
      return g_driver.name(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, \
                           sharedMemBytes, stream, kernelParams);                            \
    });                                                                                      \
  }
GPUSLICE_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel, false)
GPUSLICE_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz, true)
#undef GPUSLICE_LAUNCH_COOPERATIVE

GPUSLICE_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList,
                                                              unsigned int numDevices,
                                                              unsigned int flags) {
  GPUSLICE_ENTER(cuLaunchCooperativeKernelMultiDevice, launchParamsList, numDevices, flags)
  const bool any = launchParamsList != nullptr && numDevices > 0;
  return shim::Launch(any ? launchParamsList[0].hStream : nullptr, false,
                      any ? static_cast<const void*>(launchParamsList[0].function) : nullptr, [&] {
                        return g_driver.cuLaunchCooperativeKernelMultiDevice(launchParamsList,
                                                                             numDevices, flags);
                      });
}

#define GPUSLICE_GRAPH_LAUNCH(name, per_thread)                                                   \
  GPUSLICE_EXPORT CUresult name(CUgraphExec graph, CUstream stream) {                             \
    GPUSLICE_ENTER(name, graph, stream)                                                           \
    return shim::Launch(stream, per_thread, graph, [&] { return g_driver.name(graph, stream); }); \
  }
GPUSLICE_GRAPH_LAUNCH(cuGraphLaunch, false)
GPUSLICE_GRAPH_LAUNCH(cuGraphLaunch_ptsz, true)
#undef GPUSLICE_GRAPH_LAUNCH

GPUSLICE_EXPORT CUresult cuLaunch(CUfunction f) {
  GPUSLICE_ENTER(cuLaunch, f)
  return shim::Launch(nullptr, false, f, [&] { return g_driver.cuLaunch(f); });
}

GPUSLICE_EXPORT CUresult cuLaunchGrid(CUfunction f, int gridWidth, int gridHeight) {
  GPUSLICE_ENTER(cuLaunchGrid, f, gridWidth, gridHeight)
  return shim::Launch(nullptr, false, f,
                      [&] { return g_driver.cuLaunchGrid(f, gridWidth, gridHeight); });
}

GPUSLICE_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int gridWidth, int gridHeight,
                                           CUstream stream) {
  GPUSLICE_ENTER(cuLaunchGridAsync, f, gridWidth, gridHeight, stream)
  return shim::Launch(stream, false, f,
                      [&] { return g_driver.cuLaunchGridAsync(f, gridWidth, gridHeight, stream); });
}
