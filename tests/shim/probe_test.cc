// tests/shim/cuda_probe against the test CUDA library, without the interposer: each command and
// each allocation path through cuGetProcAddress and through dlsym. These are the baselines the
// interposer's tests compare against (the timed ones are in throttle_test.cc).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shim/shim_process.h"

namespace gpuslice::shim::testing {
namespace {

// The bytes the test CUDA library reserves for one chunk of `path` of `mib` MiB as the probe asks
// for it (see cuda_probe.cc), from the library's rules: pitch = width rounded up to 512, arrays
// rounded up to 2 MiB, VMM handles a multiple of 2 MiB.
std::uint64_t ReservedBytes(const std::string& path, std::uint64_t mib) {
  const std::uint64_t bytes = mib * kMiB;
  auto round_up = [](std::uint64_t value, std::uint64_t multiple) {
    return (value + multiple - 1) / multiple * multiple;
  };
  if (path == "pitch") return 1024 * ((bytes + 999) / 1000);
  if (path == "array" || path == "array3d" || path == "vmm") return round_up(bytes, 2 * kMiB);
  if (path == "mipmap") {
    // A square float base of side s with 4 levels, s chosen by the probe; recompute it the same
    // way: the requirement is the sum rounded up to 2 MiB.
    const double base = static_cast<double>(bytes) / (1.0 + 0.25 + 0.0625 + 0.015625);
    auto side = static_cast<std::uint64_t>(std::llround(std::sqrt(base / 4.0)));
    side = std::max<std::uint64_t>(side, 16);
    std::uint64_t sum = 0;
    for (int level = 0; level < 4; ++level) {
      const std::uint64_t w = std::max<std::uint64_t>(side >> level, 1);
      sum += w * w * 4;
    }
    return round_up(sum, 2 * kMiB);
  }
  return bytes;
}

std::map<std::string, std::string> Fake(std::map<std::string, std::string> settings = {}) {
  return ProbeEnv(false, settings);
}

TEST(CudaProbeTest, InfoThroughEitherLookup) {
  for (const char* via : {"getproc", "dlsym"}) {
    SCOPED_TRACE(via);
    const Outcome run = RunProbe({"--via", via, "info"}, Fake());
    ASSERT_EQ(run.exit_code, 0) << run.Describe();
    const nlohmann::json json = run.Json();
    EXPECT_EQ(Field(json, "driver_version"), 12040);
    EXPECT_EQ(Field(json, "devices"), 1);
    EXPECT_EQ(Field(json, "total"), 16384LL * static_cast<long long>(kMiB));
    EXPECT_EQ(Field(json, "free"), Field(json, "total"));
  }
  const Outcome two = RunProbe({"info"}, Fake({{"FAKE_CUDA_DEVICES", "2"},
                                               {"FAKE_CUDA_TOTAL_MIB", "2048"},
                                               {"FAKE_CUDA_CONTEXT_MIB", "300"}}));
  ASSERT_EQ(two.exit_code, 0) << two.Describe();
  EXPECT_EQ(Field(two.Json(), "devices"), 2);
  EXPECT_EQ(Field(two.Json(), "total"), 2048LL * static_cast<long long>(kMiB));
  EXPECT_EQ(Field(two.Json(), "free"), 1748LL * static_cast<long long>(kMiB))
      << "the primary context counts FAKE_CUDA_CONTEXT_MIB";
}

TEST(CudaProbeTest, EveryAllocationPathFillsTheDeviceByTheRules) {
  const auto total = static_cast<long long>(1024 * kMiB);
  for (const char* via : {"getproc", "dlsym"}) {
    for (const char* path :
         {"alloc", "pitch", "managed", "async", "pool", "array", "array3d", "mipmap", "vmm"}) {
      SCOPED_TRACE(std::string(via) + " " + path);
      const Outcome run = RunProbe({"--via", via, "alloc", "--path", path, "--mib", "100"},
                                   Fake({{"FAKE_CUDA_TOTAL_MIB", "1024"}}));
      ASSERT_EQ(run.exit_code, 0) << run.Describe();
      const nlohmann::json json = run.Json();
      const auto reserved = static_cast<long long>(ReservedBytes(path, 100));
      const long long fit = total / reserved;
      EXPECT_EQ(Field(json, "allocated"), fit);
      EXPECT_EQ(Field(json, "failed_with"), 2);
      EXPECT_EQ(Field(json, "total"), total);
      EXPECT_EQ(Field(json, "free"), total - fit * reserved);
      EXPECT_EQ(Field(json, "device_peak_bytes"), fit * reserved);
      EXPECT_EQ(Field(json, "free_after"), total);
      EXPECT_EQ(Field(json, "free_errors"), 0);
      if (std::string(path) != "alloc" && std::string(path) != "managed" &&
          std::string(path) != "async" && std::string(path) != "pool") {
        EXPECT_EQ(Field(json, "reserved_bytes"), reserved);
      }
    }
  }
  // Per-thread default stream variants, and a fixed count.
  const Outcome ptsz = RunProbe(
      {"--ptsz", "alloc", "--path", "async", "--mib", "100", "--count", "3", "--hold-ms", "10"},
      Fake({{"FAKE_CUDA_TOTAL_MIB", "1024"}}));
  ASSERT_EQ(ptsz.exit_code, 0) << ptsz.Describe();
  EXPECT_EQ(Field(ptsz.Json(), "allocated"), 3);
  EXPECT_EQ(Field(ptsz.Json(), "failed_with"), 0);
  EXPECT_EQ(Field(ptsz.Json(), "free"), total - 300LL * static_cast<long long>(kMiB));
}

// Sizes whose 2 MiB rounding changes how many fit: 93 MiB arrays take 94 MiB each, so 10 fit in
// 1024 MiB, not 11.
TEST(CudaProbeTest, ArrayRequirementsAreRoundedUp) {
  for (const char* path : {"array", "array3d", "mipmap"}) {
    SCOPED_TRACE(path);
    const Outcome run =
        RunProbe({"alloc", "--path", path, "--mib", "93"}, Fake({{"FAKE_CUDA_TOTAL_MIB", "1024"}}));
    ASSERT_EQ(run.exit_code, 0) << run.Describe();
    EXPECT_EQ(Field(run.Json(), "allocated"),
              1024 / static_cast<long long>(ReservedBytes(path, 93) / kMiB));
    EXPECT_EQ(Field(run.Json(), "allocated"), 10);
  }
}

TEST(CudaProbeTest, CrashDiesWithItsMemory) {
  const Outcome run = RunProbe({"crash", "--mib", "100"}, Fake());
  EXPECT_EQ(run.signal, 9) << run.Describe();
  EXPECT_EQ(Field(run.Json(), "allocated_bytes"), static_cast<long long>(100 * kMiB));
}

TEST(CudaProbeTest, HoldReportsAtOnceAndHolds) {
  auto child = StartProbe({"hold", "--mib", "100", "--ms", "700"}, Fake());
  ASSERT_TRUE(child->started());
  const std::uint64_t start = MonotonicNs();
  const std::string line = child->ReadLine(20000);
  const nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
  EXPECT_EQ(Field(json, "allocated"), 1) << line;
  EXPECT_EQ(Field(json, "failed_with"), 0) << line;
  const Outcome run = child->Wait(20000);
  EXPECT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_GE(MonotonicNs() - start, 700'000'000u);
  const Outcome refused =
      RunProbe({"hold", "--mib", "2000", "--ms", "0"}, Fake({{"FAKE_CUDA_TOTAL_MIB", "1024"}}));
  EXPECT_EQ(refused.exit_code, 0) << refused.Describe();
  EXPECT_EQ(Field(refused.Json(), "allocated"), 0);
  EXPECT_EQ(Field(refused.Json(), "failed_with"), 2);
}

TEST(CudaProbeTest, Benchmarks) {
  const Outcome alloc = RunProbe({"bench-alloc", "--pairs", "500"}, Fake());
  ASSERT_EQ(alloc.exit_code, 0) << alloc.Describe();
  EXPECT_EQ(Field(alloc.Json(), "pairs"), 500);
  EXPECT_GT(alloc.Json()["ns_per_pair"].get<double>(), 0) << alloc.out;
  const Outcome launch = RunProbe({"--ptsz", "bench-launch", "--launches", "2000"}, Fake());
  ASSERT_EQ(launch.exit_code, 0) << launch.Describe();
  EXPECT_EQ(Field(launch.Json(), "launches"), 2000);
  EXPECT_GT(launch.Json()["launches_per_s"].get<double>(), 0) << launch.out;
}

TEST(CudaProbeTest, BadUsageExitsTwoWithAJsonError) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"nonsense"},
      {"alloc", "--path", "nowhere", "--mib", "1"},
      {"alloc", "--path", "alloc"},
      {"alloc", "--path", "alloc", "--mib", "-1"},
      {"launch", "--kernel", "sleep", "--arg", "1"},
      {"launch", "--kernel", "dance", "--arg", "1", "--seconds", "1"},
      {"--via", "carrier-pigeon", "info"},
      {"hold", "--mib", "1"},
      {"info", "extra"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const std::string& arg : args) joined += arg + " ";
    SCOPED_TRACE(joined);
    const Outcome run = RunProbe(args, Fake());
    EXPECT_EQ(run.exit_code, 2) << run.Describe();
    EXPECT_EQ(run.Json().value("error", ""), "usage") << run.out;
  }
}

TEST(CudaProbeTest, NoDriverIsAnError) {
  if (void* real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); real != nullptr) {
    GTEST_SKIP() << "a libcuda.so.1 is loaded here";
  }
  TempDir empty;
  auto env = Fake();
  env["LD_LIBRARY_PATH"] = empty.path();
  const Outcome run = RunProbe({"info"}, env);
  if (run.exit_code == 0) GTEST_SKIP() << "this machine has a libcuda.so.1 of its own";
  EXPECT_EQ(run.exit_code, 1) << run.Describe();
  EXPECT_EQ(run.Json().value("error", ""), "dlopen") << run.out;
}

}  // namespace
}  // namespace gpuslice::shim::testing
