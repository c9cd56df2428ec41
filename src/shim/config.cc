#include "config.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace gpuslice::shim {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  std::size_t start = 0;
  while (start < s.size() && (s[start] == ' ' || s[start] == '\t')) ++start;
  return s.substr(start);
}

// key=value lines; '#' starts a comment. Returns false (and says why) when the file cannot be read.
bool ReadLimitsFile(const char* path, std::map<std::string, std::string>* out, std::string* error) {
  FILE* file = std::fopen(path, "re");
  if (file == nullptr) {
    *error = std::string("GPUSLICE_LIMITS_FILE ") + path + ": " + std::strerror(errno);
    return false;
  }
  char line[512];
  int number = 0;
  while (std::fgets(line, sizeof line, file) != nullptr) {
    ++number;
    std::string text = line;
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (const std::size_t hash = text.find('#'); hash != std::string::npos) text.resize(hash);
    text = Trim(text);
    if (text.empty()) continue;
    const std::size_t eq = text.find('=');
    if (eq == std::string::npos) {
      *error = std::string("GPUSLICE_LIMITS_FILE ") + path + " line " + std::to_string(number) +
               ": expected key=value";
      std::fclose(file);
      return false;
    }
    (*out)[Trim(text.substr(0, eq))] = Trim(text.substr(eq + 1));
  }
  std::fclose(file);
  return true;
}

bool ParseWhole(const std::string& text, long long low, long long high, long long* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0' || parsed < low || parsed > high) return false;
  *value = parsed;
  return true;
}

}  // namespace

std::string SanitizeSliceId(std::string_view id) {
  std::string out;
  for (const char c : id) {
    if (out.size() + 1 >= static_cast<std::size_t>(kSliceIdSize)) break;
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
    out.push_back(keep ? c : '_');
  }
  return out;
}

Config LoadConfig(EnvLookup lookup) {
  Config config;
  std::map<std::string, std::string> file;
  if (const char* path = lookup("GPUSLICE_LIMITS_FILE"); path != nullptr && *path != '\0') {
    if (!ReadLimitsFile(path, &file, &config.error)) return config;
  }
  // The environment wins over the file.
  auto get = [&](const char* env, const char* key) -> std::string {
    if (const char* value = lookup(env); value != nullptr && *value != '\0') return value;
    if (key != nullptr) {
      if (auto it = file.find(key); it != file.end()) return it->second;
    }
    return "";
  };
  auto fail = [&](const char* env, const std::string& value, const char* why) {
    if (config.error.empty()) config.error = std::string(env) + "=" + value + ": " + why;
  };

  const std::string mode = get("GPUSLICE_MODE", "mode");
  if (mode.empty() || mode == "enforce") {
    config.mode = Mode::kEnforce;
  } else if (mode == "measure") {
    config.mode = Mode::kMeasure;
  } else if (mode == "passthrough") {
    config.mode = Mode::kPassthrough;
  } else {
    fail("GPUSLICE_MODE", mode, "expected enforce, measure or passthrough");
  }
  if (const std::string pass = get("GPUSLICE_PASSTHROUGH", nullptr); pass == "1") {
    config.mode = Mode::kPassthrough;
  }

  long long value = 0;
  if (const std::string cap = get("GPUSLICE_VRAM_LIMIT_MIB", "vram_limit_mib"); !cap.empty()) {
    if (ParseWhole(cap, 1, 1LL << 30, &value)) {
      config.cap_bytes = static_cast<std::uint64_t>(value) << 20;
    } else {
      fail("GPUSLICE_VRAM_LIMIT_MIB", cap, "expected a whole number of MiB, at least 1");
    }
  }
  if (const std::string share = get("GPUSLICE_COMPUTE_SHARE_MILLI", "compute_share_milli");
      !share.empty()) {
    if (ParseWhole(share, 1, 1000, &value)) {
      config.share_milli = value >= 1000 ? 0 : static_cast<int>(value);
    } else {
      fail("GPUSLICE_COMPUTE_SHARE_MILLI", share, "expected 1 to 1000 (thousandths of the GPU)");
    }
  }
  if (const std::string policy = get("GPUSLICE_SHARE_POLICY", "share_policy"); !policy.empty()) {
    if (policy == "strict") {
      config.policy = SharePolicy::kStrict;
    } else if (policy == "borrow") {
      config.policy = SharePolicy::kBorrowIdle;
    } else {
      fail("GPUSLICE_SHARE_POLICY", policy, "expected strict or borrow");
    }
  }
  if (const std::string reserve = get("GPUSLICE_CONTEXT_RESERVE_MIB", "context_reserve_mib");
      !reserve.empty()) {
    if (ParseWhole(reserve, 0, 1LL << 20, &value)) {
      config.context_reserve_bytes = static_cast<std::uint64_t>(value) << 20;
      config.context_reserve_set = true;
    } else {
      fail("GPUSLICE_CONTEXT_RESERVE_MIB", reserve, "expected a whole number of MiB");
    }
  }
  if (const std::string log = get("GPUSLICE_LOG", nullptr); !log.empty()) {
    if (ParseWhole(log, 0, 2, &value)) {
      config.log_level = static_cast<int>(value);
    } else {
      fail("GPUSLICE_LOG", log, "expected 0, 1 or 2");
    }
  }
  if (std::string dir = get("GPUSLICE_SHM_DIR", "shm_dir"); !dir.empty()) config.shm_dir = dir;
  if (std::string lib = get("GPUSLICE_REAL_LIBCUDA", nullptr); !lib.empty()) {
    config.real_libcuda = lib;
  }
  if (std::string lib = get("GPUSLICE_REAL_NVML", nullptr); !lib.empty()) config.real_nvml = lib;

  std::string slice = get("GPUSLICE_SLICE", "slice");
  if (slice.empty()) {
    const std::string lease = get("GPUSLICE_LEASE", nullptr);
    slice = lease.empty() ? "pid-" + std::to_string(getpid()) : "lease-" + lease;
  }
  config.slice_id = SanitizeSliceId(slice);
  return config;
}

}  // namespace gpuslice::shim
