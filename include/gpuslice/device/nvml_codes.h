// gpuslice/device/nvml_codes.h
//
// NVML return codes (nvml.h `nvmlReturn_t`) and how gpuslice reports them. Every device error
// carries its NVML code in the absl::Status (payload "gpuslice.dev/nvml"), so callers can react to
// IN_USE or INSUFFICIENT_RESOURCES exactly, and users read a clear message with the code's name.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace gpuslice::device {

// Values of nvmlReturn_t.
enum NvmlCode : int {
  kNvmlSuccess = 0,
  kNvmlUninitialized = 1,
  kNvmlInvalidArgument = 2,
  kNvmlNotSupported = 3,
  kNvmlNoPermission = 4,
  kNvmlAlreadyInitialized = 5,
  kNvmlNotFound = 6,
  kNvmlInsufficientSize = 7,
  kNvmlInsufficientPower = 8,
  kNvmlDriverNotLoaded = 9,
  kNvmlTimeout = 10,
  kNvmlIrqIssue = 11,
  kNvmlLibraryNotFound = 12,
  kNvmlFunctionNotFound = 13,
  kNvmlCorruptedInforom = 14,
  kNvmlGpuIsLost = 15,
  kNvmlResetRequired = 16,
  kNvmlOperatingSystem = 17,
  kNvmlLibRmVersionMismatch = 18,
  kNvmlInUse = 19,
  kNvmlMemory = 20,
  kNvmlNoData = 21,
  kNvmlVgpuEccNotSupported = 22,
  kNvmlInsufficientResources = 23,
  kNvmlFreqNotSupported = 24,
  kNvmlArgumentVersionMismatch = 25,
  kNvmlDeprecated = 26,
  kNvmlNotReady = 27,
  kNvmlGpuNotFound = 28,
  kNvmlInvalidState = 29,
  kNvmlResetTypeNotSupported = 30,
  kNvmlUnknown = 999,
};

// "NVML_ERROR_IN_USE"; "NVML_ERROR_<n>" for codes this table does not know.
std::string NvmlCodeName(int code);
// A sentence for users, e.g. "in use by another client (a process or an instance holds it)".
std::string NvmlCodeMessage(int code);
// Parses "IN_USE", "NVML_ERROR_IN_USE", "in-use" or "19".
std::optional<int> ParseNvmlCode(std::string_view text);

// The absl::Status for a failed device call: "<what>: <message> (NVML_ERROR_X)" with the code as
// payload and a matching absl code. REQUIRES: code != kNvmlSuccess.
absl::Status NvmlError(int code, std::string_view what);
// The NVML code carried by `status`, or nullopt (ok status, or not a device error).
std::optional<int> NvmlCodeOf(const absl::Status& status);
// True if `status` carries exactly this NVML code.
bool HasNvmlCode(const absl::Status& status, int code);

}  // namespace gpuslice::device
