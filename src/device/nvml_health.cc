// NvmlBackend: health figures (GetTelemetry), GPM activity (SampleActivity) and Xid events.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/util/process_scan.h"
#include "nvml_api.h"
#include "nvml_internal.h"

namespace gpuslice::device {

using namespace nvml_internal;  // NOLINT(google-build-using-namespace): the helpers of this class

namespace {

// Calls an optional NVML function; FUNCTION_NOT_FOUND when the library lacks it.
template <typename Fn, typename... Args>
int CallOptional(Fn fn, Args... args) {
  return fn == nullptr ? static_cast<int>(kNvmlFunctionNotFound) : fn(args...);
}

}  // namespace

absl::StatusOr<GpuTelemetry> NvmlBackend::GetTelemetry(int gpu) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device_or = DeviceHandle(api, gpu);
  if (!device_or.ok()) return device_or.status();
  const nvmlDevice_t device = *device_or;
  GpuTelemetry out;
  // Each query fills its figures when it succeeds and returns the NVML code (FUNCTION_NOT_FOUND
  // for a function the library lacks). Only GPU_IS_LOST fails the call: any other failure leaves
  // the figure absent rather than made up.
  struct Query {
    const char* name;
    std::function<int()> run;
  };
  const Query queries[] = {
      {"nvmlDeviceGetTemperature",
       [&]() {
         unsigned celsius = 0;
         const int code =
             CallOptional(api.nvmlDeviceGetTemperature, device, nvml::kTemperatureGpu, &celsius);
         if (code == kNvmlSuccess) out.temperature_c = I(celsius);
         return code;
       }},
      {"nvmlDeviceGetPowerUsage",
       [&]() {
         unsigned milliwatts = 0;
         const int code = CallOptional(api.nvmlDeviceGetPowerUsage, device, &milliwatts);
         if (code == kNvmlSuccess) out.power_w = static_cast<double>(milliwatts) / 1000.0;
         return code;
       }},
      {"nvmlDeviceGetEnforcedPowerLimit",
       [&]() {
         unsigned milliwatts = 0;
         const int code = CallOptional(api.nvmlDeviceGetEnforcedPowerLimit, device, &milliwatts);
         if (code == kNvmlSuccess) out.power_limit_w = static_cast<double>(milliwatts) / 1000.0;
         return code;
       }},
      {"nvmlDeviceGetClockInfo (SM)",
       [&]() {
         unsigned mhz = 0;
         const int code = CallOptional(api.nvmlDeviceGetClockInfo, device, nvml::kClockSm, &mhz);
         if (code == kNvmlSuccess) out.sm_clock_mhz = I(mhz);
         return code;
       }},
      {"nvmlDeviceGetClockInfo (MEM)",
       [&]() {
         unsigned mhz = 0;
         const int code = CallOptional(api.nvmlDeviceGetClockInfo, device, nvml::kClockMem, &mhz);
         if (code == kNvmlSuccess) out.memory_clock_mhz = I(mhz);
         return code;
       }},
      {"nvmlDeviceGetUtilizationRates",  // NOT_SUPPORTED while MIG is on
       [&]() {
         nvml::nvmlUtilization_t rates{};
         const int code = CallOptional(api.nvmlDeviceGetUtilizationRates, device, &rates);
         if (code == kNvmlSuccess) {
           out.utilization_pct = I(rates.gpu);
           out.memory_utilization_pct = I(rates.memory);
         }
         return code;
       }},
      {"nvmlDeviceGetCurrentClocksEventReasons",
       [&]() {
         unsigned long long reasons = 0;
         int code = CallOptional(api.nvmlDeviceGetCurrentClocksEventReasons, device, &reasons);
         if (code == kNvmlFunctionNotFound) {  // drivers before the rename
           code = CallOptional(api.nvmlDeviceGetCurrentClocksThrottleReasons, device, &reasons);
         }
         if (code == kNvmlSuccess) out.throttle_reasons = reasons;
         return code;
       }},
      {"nvmlDeviceGetTotalEccErrors (corrected, volatile)",
       [&]() {
         unsigned long long count = 0;
         const int code = CallOptional(api.nvmlDeviceGetTotalEccErrors, device,
                                       nvml::kMemoryErrorTypeCorrected, nvml::kVolatileEcc, &count);
         if (code == kNvmlSuccess) out.ecc_corrected = count;
         return code;
       }},
      {"nvmlDeviceGetTotalEccErrors (uncorrected, volatile)",
       [&]() {
         unsigned long long count = 0;
         const int code =
             CallOptional(api.nvmlDeviceGetTotalEccErrors, device,
                          nvml::kMemoryErrorTypeUncorrected, nvml::kVolatileEcc, &count);
         if (code == kNvmlSuccess) out.ecc_uncorrected = count;
         return code;
       }},
      {"nvmlDeviceGetRemappedRows",
       [&]() {
         unsigned correctable = 0;
         unsigned uncorrectable = 0;
         unsigned pending = 0;
         unsigned failure = 0;
         const int code = CallOptional(api.nvmlDeviceGetRemappedRows, device, &correctable,
                                       &uncorrectable, &pending, &failure);
         if (code == kNvmlSuccess) {
           out.remapped_rows_correctable = I(correctable);
           out.remapped_rows_uncorrectable = I(uncorrectable);
           out.remap_pending = pending != 0;
           out.remap_failure = failure != 0;
         }
         return code;
       }},
  };
  for (const Query& query : queries) {
    if (const int code = query.run(); code == kNvmlGpuIsLost) {
      return NvmlError(code, std::string(query.name) + " (" + GpuText(gpu) + ")");
    }
  }
  return out;
}

absl::StatusOr<Activity> NvmlBackend::SampleActivity(int gpu, std::optional<int> gi) {
  const Api& api = *api_;
  const std::string what = gi ? GiText(gpu, *gi) : GpuText(gpu);
  if (api.nvmlGpmQueryDeviceSupport == nullptr || api.nvmlGpmSampleAlloc == nullptr ||
      api.nvmlGpmSampleFree == nullptr || api.nvmlGpmSampleGet == nullptr ||
      api.nvmlGpmMetricsGet == nullptr || (gi && api.nvmlGpmMigSampleGet == nullptr)) {
    return NvmlError(kNvmlNotSupported, "SM activity of " + what + ": " + library_ +
                                            " has no GPM functions (driver too old)");
  }
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  auto supported = gpm_supported_.find(gpu);
  if (supported == gpm_supported_.end()) {
    nvml::nvmlGpmSupport_t support{};
    support.version = nvml::kGpmSupportVersion;
    const int code = api.nvmlGpmQueryDeviceSupport(*device, &support);
    if (code != kNvmlSuccess && code != kNvmlNotSupported) {
      return NvmlError(code, "nvmlGpmQueryDeviceSupport (" + GpuText(gpu) + ")");
    }
    supported =
        gpm_supported_.emplace(gpu, code == kNvmlSuccess && support.isSupportedDevice != 0).first;
  }
  if (!supported->second) {
    return NvmlError(kNvmlNotSupported,
                     "SM activity of " + what + ": the GPU has no GPM (Hopper and later)");
  }

  nvml::nvmlGpmSample_t sample = nullptr;
  int code = api.nvmlGpmSampleAlloc(&sample);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlGpmSampleAlloc (" + what + ")");
  code =
      gi ? api.nvmlGpmMigSampleGet(*device, U(*gi), sample) : api.nvmlGpmSampleGet(*device, sample);
  const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  if (code != kNvmlSuccess) {
    api.nvmlGpmSampleFree(sample);
    return NvmlError(
        code, std::string(gi ? "nvmlGpmMigSampleGet" : "nvmlGpmSampleGet") + " (" + what + ")");
  }
  const std::pair<int, int> key{gpu, gi.value_or(-1)};
  auto kept = gpm_samples_.find(key);
  if (kept == gpm_samples_.end()) {
    gpm_samples_.emplace(key, GpmSample{sample, now});
    return absl::UnavailableError("SM activity of " + what +
                                  ": first GPM sample taken; activity is measured between two "
                                  "samples, from the next call on");
  }
  const GpmSample previous = kept->second;
  kept->second = GpmSample{sample, now};  // the interval of the next call starts here

  nvml::nvmlGpmMetricsGet_t request{};
  request.version = nvml::kGpmMetricsGetVersion;
  const unsigned metric_ids[] = {nvml::kGpmMetricSmUtil, nvml::kGpmMetricSmOccupancy,
                                 nvml::kGpmMetricDramBwUtil};
  request.numMetrics = static_cast<unsigned>(std::size(metric_ids));
  request.sample1 = previous.sample;
  request.sample2 = sample;
  for (unsigned i = 0; i < request.numMetrics; ++i) request.metrics[i].metricId = metric_ids[i];
  code = api.nvmlGpmMetricsGet(&request);
  api.nvmlGpmSampleFree(previous.sample);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlGpmMetricsGet (" + what + ")");
  for (unsigned i = 0; i < request.numMetrics; ++i) {
    const nvml::nvmlGpmMetric_t& metric = request.metrics[i];
    if (metric.nvmlReturn != kNvmlSuccess) {
      return NvmlError(metric.nvmlReturn,
                       "nvmlGpmMetricsGet (" + what + ", GPM metric " + Str(metric_ids[i]) + ")");
    }
  }
  Activity activity;
  activity.sm_active_pct = request.metrics[0].value;
  activity.sm_occupancy_pct = request.metrics[1].value;
  activity.dram_bandwidth_pct = request.metrics[2].value;
  activity.interval_s = std::chrono::duration<double>(now - previous.taken).count();
  return activity;
}

absl::StatusOr<std::vector<XidEvent>> NvmlBackend::TakeXidEvents() {
  const Api& api = *api_;
  if (api.nvmlEventSetCreate == nullptr || api.nvmlDeviceRegisterEvents == nullptr ||
      api.nvmlEventSetWait_v2 == nullptr || api.nvmlEventSetFree == nullptr) {
    return NvmlError(kNvmlNotSupported,
                     "Xid events: " + library_ + " has no nvmlEventSetWait_v2 (driver too old)");
  }
  if (event_set_ == nullptr) {
    unsigned count = 0;
    int code = api.nvmlDeviceGetCount_v2(&count);
    if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetCount_v2");
    nvml::nvmlEventSet_t set = nullptr;
    code = api.nvmlEventSetCreate(&set);
    if (code != kNvmlSuccess) return NvmlError(code, "nvmlEventSetCreate");
    std::vector<std::pair<nvmlDevice_t, int>> registered;
    for (unsigned index = 0; index < count; ++index) {
      const int gpu = I(index);
      absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
      if (device.ok()) {
        code = api.nvmlDeviceRegisterEvents(*device, nvml::kEventTypeXidCriticalError, set);
      } else {
        code = HasNvmlCode(device.status(), kNvmlGpuIsLost) ? static_cast<int>(kNvmlGpuIsLost)
                                                            : static_cast<int>(kNvmlUnknown);
      }
      // A GPU without Xid events, or one that fell off the bus, is left out.
      if (code == kNvmlNotSupported || code == kNvmlGpuIsLost) continue;
      if (code != kNvmlSuccess) {
        api.nvmlEventSetFree(set);
        if (!device.ok()) return device.status();
        return NvmlError(code,
                         "nvmlDeviceRegisterEvents (" + GpuText(gpu) + ", Xid critical errors)");
      }
      registered.emplace_back(*device, gpu);
    }
    event_set_ = set;
    event_gpus_ = std::move(registered);
  }
  std::vector<XidEvent> out;
  // Bounded, in case a library never answers TIMEOUT.
  for (int taken = 0; taken < 100000; ++taken) {
    nvml::nvmlEventData_t data{};
    const int code = api.nvmlEventSetWait_v2(event_set_, &data, 0);
    if (code == kNvmlTimeout) break;
    if (code != kNvmlSuccess) {
      // The events already taken are out of the set: hand them over; a lasting failure shows on
      // the next call.
      if (!out.empty()) break;
      return NvmlError(code, "nvmlEventSetWait_v2 (Xid events)");
    }
    if ((data.eventType & nvml::kEventTypeXidCriticalError) == 0) continue;
    XidEvent event;
    event.gpu = -1;  // not one of the registered handles (should not happen)
    for (const auto& [handle, gpu] : event_gpus_) {
      if (handle == data.device) event.gpu = gpu;
    }
    event.xid = data.eventData;
    if (data.gpuInstanceId != nvml::kInvalidInstanceId) event.gi = I(data.gpuInstanceId);
    if (data.computeInstanceId != nvml::kInvalidInstanceId) event.ci = I(data.computeInstanceId);
    out.push_back(event);
  }
  return out;
}

}  // namespace gpuslice::device
