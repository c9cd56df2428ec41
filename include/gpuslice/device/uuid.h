// gpuslice/device/uuid.h — the device UUIDs NVML produces, and nothing else.
//
//   GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx        a GPU (x: a hex digit)
//   MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx        a MIG device (R470 and later)
//   MIG-GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx/G/C a MIG device, older drivers (G, C: 0-99)
//
// Values that machines report are checked with these before they are stored or printed, so a
// UUID can never carry shell or docker syntax. Pure functions.
#pragma once

#include <string_view>

namespace gpuslice::device {

// The 36 characters of a canonical UUID: 8-4-4-4-12 hex digits.
inline bool IsCanonicalUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      return false;
    }
  }
  return true;
}

inline bool IsGpuUuid(std::string_view s) {
  return s.substr(0, 4) == "GPU-" && IsCanonicalUuid(s.substr(4));
}

inline bool IsMigUuid(std::string_view s) {
  if (s.substr(0, 4) != "MIG-") return false;
  s.remove_prefix(4);
  if (IsCanonicalUuid(s)) return true;
  if (s.size() < 40 || !IsGpuUuid(s.substr(0, 40))) return false;
  s.remove_prefix(40);
  // "/G/C"
  for (int part = 0; part < 2; ++part) {
    if (s.empty() || s.front() != '/') return false;
    s.remove_prefix(1);
    std::size_t digits = 0;
    while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
    if (digits == 0 || digits > 2) return false;
    s.remove_prefix(digits);
  }
  return s.empty();
}

// A GPU's or a MIG device's UUID.
inline bool IsDeviceUuid(std::string_view s) { return IsGpuUuid(s) || IsMigUuid(s); }

}  // namespace gpuslice::device
