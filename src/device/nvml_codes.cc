#include "gpuslice/device/nvml_codes.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "absl/strings/cord.h"

namespace gpuslice::device {
namespace {

constexpr char kPayloadKey[] = "gpuslice.dev/nvml";

struct CodeText {
  int code;
  std::string_view name;     // without the NVML_ERROR_ prefix
  std::string_view message;  // for users
};

constexpr CodeText kCodes[] = {
    {kNvmlSuccess, "SUCCESS", "success"},
    {kNvmlUninitialized, "UNINITIALIZED", "NVML was not initialised"},
    {kNvmlInvalidArgument, "INVALID_ARGUMENT",
     "invalid argument (e.g. a placement the profile does not allow)"},
    {kNvmlNotSupported, "NOT_SUPPORTED", "not supported by this GPU or in its current MIG mode"},
    {kNvmlNoPermission, "NO_PERMISSION",
     "permission denied (MIG changes need root or the mig/config capability)"},
    {kNvmlAlreadyInitialized, "ALREADY_INITIALIZED", "already initialised"},
    {kNvmlNotFound, "NOT_FOUND", "not found"},
    {kNvmlInsufficientSize, "INSUFFICIENT_SIZE", "buffer too small"},
    {kNvmlInsufficientPower, "INSUFFICIENT_POWER", "insufficient external power"},
    {kNvmlDriverNotLoaded, "DRIVER_NOT_LOADED", "the NVIDIA kernel driver is not loaded"},
    {kNvmlTimeout, "TIMEOUT", "timed out"},
    {kNvmlIrqIssue, "IRQ_ISSUE", "interrupt problem with the GPU"},
    {kNvmlLibraryNotFound, "LIBRARY_NOT_FOUND", "libnvidia-ml.so.1 not found"},
    {kNvmlFunctionNotFound, "FUNCTION_NOT_FOUND",
     "function missing from this NVML (driver too old)"},
    {kNvmlCorruptedInforom, "CORRUPTED_INFOROM", "the GPU's infoROM is corrupted"},
    {kNvmlGpuIsLost, "GPU_IS_LOST", "the GPU fell off the bus or is otherwise inaccessible"},
    {kNvmlResetRequired, "RESET_REQUIRED", "a GPU reset (or a reboot) is required"},
    {kNvmlOperatingSystem, "OPERATING_SYSTEM", "the operating system blocked the request"},
    {kNvmlLibRmVersionMismatch, "LIB_RM_VERSION_MISMATCH",
     "NVML and the kernel driver versions differ"},
    {kNvmlInUse, "IN_USE",
     "in use by another client (processes, compute instances or daemons hold it)"},
    {kNvmlMemory, "MEMORY", "out of memory"},
    {kNvmlNoData, "NO_DATA", "no data"},
    {kNvmlVgpuEccNotSupported, "VGPU_ECC_NOT_SUPPORTED", "ECC not supported with vGPU"},
    {kNvmlInsufficientResources, "INSUFFICIENT_RESOURCES",
     "insufficient resources (no free placement, or an instance cap reached)"},
    {kNvmlFreqNotSupported, "FREQ_NOT_SUPPORTED", "frequency not supported"},
    {kNvmlArgumentVersionMismatch, "ARGUMENT_VERSION_MISMATCH",
     "struct version not supported by this driver"},
    {kNvmlDeprecated, "DEPRECATED", "deprecated"},
    {kNvmlNotReady, "NOT_READY", "not ready"},
    {kNvmlGpuNotFound, "GPU_NOT_FOUND", "GPU not found"},
    {kNvmlInvalidState, "INVALID_STATE", "invalid state"},
    {kNvmlResetTypeNotSupported, "RESET_TYPE_NOT_SUPPORTED", "reset type not supported"},
    {kNvmlUnknown, "UNKNOWN", "unknown error"},
};

const CodeText* Find(int code) {
  for (const CodeText& entry : kCodes) {
    if (entry.code == code) return &entry;
  }
  return nullptr;
}

absl::StatusCode AbslCodeFor(int code) {
  switch (code) {
    case kNvmlInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case kNvmlNotSupported:
    case kNvmlFunctionNotFound:
      return absl::StatusCode::kUnimplemented;
    case kNvmlNoPermission:
      return absl::StatusCode::kPermissionDenied;
    case kNvmlNotFound:
    case kNvmlGpuNotFound:
    case kNvmlLibraryNotFound:
      return absl::StatusCode::kNotFound;
    case kNvmlInUse:
    case kNvmlInvalidState:
    case kNvmlResetRequired:
      return absl::StatusCode::kFailedPrecondition;
    case kNvmlInsufficientResources:
    case kNvmlMemory:
      return absl::StatusCode::kResourceExhausted;
    case kNvmlTimeout:
      return absl::StatusCode::kDeadlineExceeded;
    case kNvmlDriverNotLoaded:
    case kNvmlUninitialized:
    case kNvmlGpuIsLost:
    case kNvmlNotReady:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

std::string NvmlCodeName(int code) {
  const CodeText* entry = Find(code);
  if (entry == nullptr) return "NVML_ERROR_" + std::to_string(code);
  if (code == kNvmlSuccess) return "NVML_SUCCESS";
  return "NVML_ERROR_" + std::string(entry->name);
}

std::string NvmlCodeMessage(int code) {
  const CodeText* entry = Find(code);
  return entry == nullptr ? "NVML error " + std::to_string(code) : std::string(entry->message);
}

std::optional<int> ParseNvmlCode(std::string_view text) {
  std::string upper;
  for (char c : text) {
    upper.push_back(c == '-' ? '_'
                             : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  std::string_view name = upper;
  if (name.starts_with("NVML_ERROR_")) name.remove_prefix(11);
  if (name.starts_with("NVML_")) name.remove_prefix(5);
  for (const CodeText& entry : kCodes) {
    if (entry.name == name) return entry.code;
  }
  int value = 0;
  auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), value);
  if (error == std::errc() && end == name.data() + name.size()) return value;
  return std::nullopt;
}

absl::Status NvmlError(int code, std::string_view what) {
  absl::Status status(AbslCodeFor(code), std::string(what) + ": " + NvmlCodeMessage(code) + " (" +
                                             NvmlCodeName(code) + ")");
  status.SetPayload(kPayloadKey, absl::Cord(std::to_string(code)));
  return status;
}

std::optional<int> NvmlCodeOf(const absl::Status& status) {
  if (status.ok()) return std::nullopt;
  auto payload = status.GetPayload(kPayloadKey);
  if (!payload) return std::nullopt;
  const std::string text(*payload);
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc()) return std::nullopt;
  return value;
}

bool HasNvmlCode(const absl::Status& status, int code) {
  std::optional<int> carried = NvmlCodeOf(status);
  return carried.has_value() && *carried == code;
}

}  // namespace gpuslice::device
