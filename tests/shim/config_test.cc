// The interposer's settings (src/shim/config.h): environment over file over defaults, and a
// setting that cannot be read is an error, never silently dropped.
#include "config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace gpuslice::shim {
namespace {

std::map<std::string, std::string> g_env;

const char* Lookup(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

Config Load(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  return LoadConfig(&Lookup);
}

TEST(ShimConfigTest, NothingSetIsInert) {
  const Config config = Load({});
  EXPECT_TRUE(config.error.empty());
  EXPECT_FALSE(config.Active());
  EXPECT_EQ(config.cap_bytes, 0u);
  EXPECT_EQ(config.share_milli, 0);
  EXPECT_EQ(config.context_reserve_bytes, 320ull << 20);
  EXPECT_FALSE(config.context_reserve_set) << "contexts are measured; 320 MiB is the fallback";
  EXPECT_EQ(config.shm_dir, "/dev/shm/gpuslice");
  EXPECT_EQ(config.slice_id.rfind("pid-", 0), 0u);
}

TEST(ShimConfigTest, AContextReserveSetExplicitlyIsWhatContextsCount) {
  const Config config = Load({{"GPUSLICE_CONTEXT_RESERVE_MIB", "518"}});
  EXPECT_TRUE(config.error.empty()) << config.error;
  EXPECT_EQ(config.context_reserve_bytes, 518ull << 20);
  EXPECT_TRUE(config.context_reserve_set);
}

TEST(ShimConfigTest, LeaseLimitsFromTheEnvironment) {
  const Config config = Load({{"GPUSLICE_VRAM_LIMIT_MIB", "8192"},
                              {"GPUSLICE_COMPUTE_SHARE_MILLI", "250"},
                              {"GPUSLICE_LEASE", "17"},
                              {"GPUSLICE_SHARE_POLICY", "borrow"}});
  EXPECT_TRUE(config.error.empty()) << config.error;
  EXPECT_TRUE(config.Enforcing());
  EXPECT_EQ(config.cap_bytes, 8192ull << 20);
  EXPECT_EQ(config.share_milli, 250);
  EXPECT_EQ(config.policy, SharePolicy::kBorrowIdle);
  EXPECT_EQ(config.slice_id, "lease-17");
}

TEST(ShimConfigTest, AWholeGpuShareIsNoLimit) {
  const Config config = Load({{"GPUSLICE_COMPUTE_SHARE_MILLI", "1000"}});
  EXPECT_TRUE(config.error.empty());
  EXPECT_EQ(config.share_milli, 0);
  EXPECT_FALSE(config.Active());
}

TEST(ShimConfigTest, UnreadableSettingsAreErrors) {
  EXPECT_NE(Load({{"GPUSLICE_VRAM_LIMIT_MIB", "8G"}}).error.find("GPUSLICE_VRAM_LIMIT_MIB=8G"),
            std::string::npos);
  EXPECT_FALSE(Load({{"GPUSLICE_VRAM_LIMIT_MIB", "0"}}).error.empty());
  EXPECT_FALSE(Load({{"GPUSLICE_COMPUTE_SHARE_MILLI", "1500"}}).error.empty());
  EXPECT_FALSE(Load({{"GPUSLICE_SHARE_POLICY", "fair"}}).error.empty());
  EXPECT_FALSE(Load({{"GPUSLICE_MODE", "off"}}).error.empty());
  EXPECT_FALSE(Load({{"GPUSLICE_LIMITS_FILE", "/nonexistent/limits"}}).error.empty());
}

TEST(ShimConfigTest, ModesAndPassthrough) {
  EXPECT_EQ(Load({{"GPUSLICE_MODE", "measure"}}).mode, Mode::kMeasure);
  EXPECT_TRUE(Load({{"GPUSLICE_MODE", "measure"}}).Active());
  const Config passthrough =
      Load({{"GPUSLICE_VRAM_LIMIT_MIB", "100"}, {"GPUSLICE_PASSTHROUGH", "1"}});
  EXPECT_EQ(passthrough.mode, Mode::kPassthrough);
  EXPECT_FALSE(passthrough.Active());
}

TEST(ShimConfigTest, FileUnderTheEnvironment) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("gpuslice-limits-" + std::to_string(getpid()));
  {
    std::ofstream file(path);
    file << "# written by the agent\n"
         << "vram_limit_mib = 2048\n"
         << "compute_share_milli=100\n"
         << "slice=team a/1\n"
         << "context_reserve_mib=0\n";
  }
  Config config = Load({{"GPUSLICE_LIMITS_FILE", path.string()}});
  EXPECT_TRUE(config.error.empty()) << config.error;
  EXPECT_EQ(config.cap_bytes, 2048ull << 20);
  EXPECT_EQ(config.share_milli, 100);
  EXPECT_EQ(config.slice_id, "team_a_1");
  EXPECT_EQ(config.context_reserve_bytes, 0u);
  EXPECT_TRUE(config.context_reserve_set) << "set in the file: it wins over measuring";
  config = Load({{"GPUSLICE_LIMITS_FILE", path.string()}, {"GPUSLICE_VRAM_LIMIT_MIB", "512"}});
  EXPECT_EQ(config.cap_bytes, 512ull << 20);
  {
    std::ofstream file(path);
    file << "vram_limit_mib 2048\n";
  }
  EXPECT_NE(Load({{"GPUSLICE_LIMITS_FILE", path.string()}}).error.find("line 1"),
            std::string::npos);
  std::filesystem::remove(path);
}

TEST(ShimConfigTest, SliceIdsAreSafeFileNames) {
  EXPECT_EQ(SanitizeSliceId("lease-12"), "lease-12");
  EXPECT_EQ(SanitizeSliceId("../../etc/passwd"), ".._.._etc_passwd");
  EXPECT_EQ(SanitizeSliceId(std::string(100, 'a')).size(), 63u);
}

}  // namespace
}  // namespace gpuslice::shim
