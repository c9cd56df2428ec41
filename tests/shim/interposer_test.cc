// The interposer (libgpuslice-cuda.so, docs/SHIM.md) preloaded into tests/shim/cuda_probe over the
// test CUDA library: the VRAM cap on every allocation path, reached through cuGetProcAddress and
// through dlsym; what cuMemGetInfo answers; contexts counted as measured through NVML, and the
// configured reservation where they cannot be or it is set; passthrough and measure modes;
// one slice shared by two processes and two independent slices; a killed process's memory given
// back; refusing CUDA when the accounting cannot be opened. Each test has its own accounting
// directory. Compute shares are in throttle_test.cc.
#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gpuslice/shim/slices.h"
#include "shim/shim_process.h"

namespace gpuslice::shim::testing {
namespace {

constexpr long long kCapMiB = 1024;
constexpr long long kCap = kCapMiB * static_cast<long long>(kMiB);
constexpr long long kContextMiB = 518;

long long Mib(long long n) { return n * static_cast<long long>(kMiB); }

// How many times `text` occurs in `in`.
int Occurrences(const std::string& in, const std::string& text) {
  int n = 0;
  for (std::size_t at = in.find(text); at != std::string::npos; at = in.find(text, at + 1)) ++n;
  return n;
}

// The bytes the test CUDA library really reserves for one chunk of `path` of `mib` MiB as the
// probe asks for it (cuda_probe.cc), which is what the interposer must count: pitch*height (rows
// of 1000 bytes padded to a 1024-byte pitch), an array's memory requirement (its size rounded up
// to 2 MiB), a VMM handle of the size rounded up to 2 MiB.
long long ReservedBytes(const std::string& path, long long mib) {
  const long long bytes = mib * static_cast<long long>(kMiB);
  const long long two_mib = 2 * static_cast<long long>(kMiB);
  auto round_up = [](long long value, long long multiple) {
    return (value + multiple - 1) / multiple * multiple;
  };
  if (path == "pitch") return 1024 * ((bytes + 999) / 1000);
  if (path == "array" || path == "array3d" || path == "vmm") return round_up(bytes, two_mib);
  if (path == "mipmap") {
    const double base = static_cast<double>(bytes) / (1.0 + 0.25 + 0.0625 + 0.015625);
    long long side = std::llround(std::sqrt(base / 4.0));
    if (side < 16) side = 16;
    long long sum = 0;
    for (int level = 0; level < 4; ++level) {
      const long long w = (side >> level) > 0 ? (side >> level) : 1;
      sum += w * w * 4;
    }
    return round_up(sum, two_mib);
  }
  return bytes;
}

// A test's accounting directory and the environment of probes run in it.
class CudaInterposerTest : public ::testing::Test {
 protected:
  std::string ShmDir() const { return dir_ / "shm"; }

  // The probe with the interposer, in slice `slice`, the context reserve 0 unless `settings`
  // says otherwise, on one fake device of 16 GiB.
  std::map<std::string, std::string> Env(const std::map<std::string, std::string>& settings = {},
                                         const std::string& slice = "test") const {
    std::map<std::string, std::string> all{{"GPUSLICE_SHM_DIR", ShmDir()},
                                           {"GPUSLICE_SLICE", slice},
                                           {"GPUSLICE_CONTEXT_RESERVE_MIB", "0"},
                                           {"FAKE_CUDA_TOTAL_MIB", "16384"}};
    for (const auto& [key, value] : settings) all[key] = value;
    return ProbeEnv(true, all);
  }
  std::map<std::string, std::string> Capped(const std::string& slice = "test") const {
    return Env({{"GPUSLICE_VRAM_LIMIT_MIB", std::to_string(kCapMiB)}}, slice);
  }

  // Contexts measured, under the defaults: no GPUSLICE_CONTEXT_RESERVE_MIB, NVML from the test
  // CUDA library, whose contexts take 518 MiB each (what one took on an H200; the configured
  // default is 320 MiB), and a cap of `cap_mib`.
  std::map<std::string, std::string> Measured(
      long long cap_mib, const std::map<std::string, std::string>& settings = {}) const {
    std::map<std::string, std::string> env =
        Env({{"GPUSLICE_VRAM_LIMIT_MIB", std::to_string(cap_mib)},
             {"GPUSLICE_REAL_NVML", std::string(GPUSLICE_FAKE_CUDA_DIR) + "/libcuda.so.1"},
             {"FAKE_CUDA_CONTEXT_MIB", std::to_string(kContextMiB)}});
    env.erase("GPUSLICE_CONTEXT_RESERVE_MIB");
    for (const auto& [key, value] : settings) env[key] = value;
    return env;
  }

  absl::StatusOr<SliceSnapshot> Slice(const std::string& id = "test") const {
    return ReadSlice(SlicePath(ShmDir(), id));
  }

  TempDir dir_;
};

// The first stderr line names the interposer and the limits in force.
void ExpectStartLine(const Outcome& run, const std::string& must_contain) {
  const std::string first = run.err.substr(0, run.err.find('\n'));
  // "gpuslice-cuda:" or "gpuslice-cuda[<pid>]:"
  std::size_t at = std::string_view("gpuslice-cuda").size();
  bool prefix = first.rfind("gpuslice-cuda", 0) == 0;
  if (prefix && at < first.size() && first[at] == '[') {
    const std::size_t close = first.find(']', at);
    prefix = close != std::string::npos && close > at + 1 &&
             first.find_first_not_of("0123456789", at + 1) == close;
    at = close + 1;
  }
  prefix = prefix && at < first.size() && first[at] == ':';
  EXPECT_TRUE(prefix) << "start line: " << first;
  EXPECT_NE(first.find(must_contain), std::string::npos) << "start line: " << first;
}

// --- the cap on every path ---

struct CapCase {
  std::string via;
  std::string path;
  bool ptsz;
};

void PrintTo(const CapCase& c, std::ostream* os) {
  *os << "--via " << c.via << (c.ptsz ? " --ptsz" : "") << " --path " << c.path;
}

class CudaInterposerCapTest : public CudaInterposerTest,
                              public ::testing::WithParamInterface<CapCase> {};

// The section names of an ELF64 shared object (empty when it cannot be read as one).
std::vector<std::string> ElfSections(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> names;
  if (bytes.size() < sizeof(Elf64_Ehdr) || bytes.compare(0, 4,
                                                         "\x7f"
                                                         "ELF") != 0)
    return names;
  Elf64_Ehdr header;
  std::memcpy(&header, bytes.data(), sizeof header);
  auto section = [&](size_t i) {
    Elf64_Shdr s;
    std::memcpy(&s, bytes.data() + header.e_shoff + i * header.e_shentsize, sizeof s);
    return s;
  };
  if (header.e_shoff + size_t{header.e_shnum} * header.e_shentsize > bytes.size()) return names;
  const Elf64_Shdr strings = section(header.e_shstrndx);
  for (size_t i = 0; i < header.e_shnum; ++i) {
    const size_t at = strings.sh_offset + section(i).sh_name;
    if (at < bytes.size()) names.emplace_back(bytes.c_str() + at);
  }
  return names;
}

// The hooks are extern "C" entry points of the application's CUDA calls: the library is built
// without exceptions, so nothing can unwind through them (a throw ends the process instead).
TEST(CudaInterposerBuild, TheLibraryHasNoExceptionTables) {
  const std::vector<std::string> sections = ElfSections(GPUSLICE_INTERPOSER);
  ASSERT_FALSE(sections.empty()) << GPUSLICE_INTERPOSER;
  EXPECT_NE(std::find(sections.begin(), sections.end(), ".text"), sections.end());
  EXPECT_EQ(std::find(sections.begin(), sections.end(), ".gcc_except_table"), sections.end());
}

TEST_P(CudaInterposerCapTest, ExactlyWhatFitsIsAllocatedAndTheNextIsRefused) {
  const CapCase& c = GetParam();
  std::vector<std::string> args{"--via", c.via, "alloc", "--path", c.path, "--mib", "100"};
  if (c.ptsz) args.insert(args.begin(), "--ptsz");
  const Outcome run = RunProbe(args, Capped());
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  const nlohmann::json json = run.Json();
  const long long reserved = ReservedBytes(c.path, 100);
  const long long fit = kCap / reserved;
  EXPECT_EQ(Field(json, "allocated"), fit) << run.Describe();
  EXPECT_EQ(Field(json, "failed_with"), 2) << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_LE(Field(json, "device_peak_bytes"), kCap) << "nothing beyond the cap was allocated";
  EXPECT_EQ(Field(json, "device_peak_bytes"), fit * reserved);
  EXPECT_EQ(Field(json, "total"), kCap) << "cuMemGetInfo's total is the cap";
  EXPECT_EQ(Field(json, "free"), kCap - fit * reserved);
  EXPECT_EQ(Field(json, "free_after"), kCap);
  EXPECT_EQ(Field(json, "free_errors"), 0);
  ExpectStartLine(run, "1024");

  const absl::StatusOr<SliceSnapshot> slice = Slice();
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->cap_bytes, static_cast<std::uint64_t>(kCap));
  EXPECT_EQ(slice->used_bytes, 0u) << "everything was freed";
  EXPECT_EQ(slice->peak_bytes, static_cast<std::uint64_t>(fit * reserved));
  EXPECT_EQ(slice->allocations, static_cast<std::uint64_t>(fit));
  EXPECT_EQ(slice->refused, 1u);
}

std::vector<CapCase> CapCases() {
  std::vector<CapCase> cases;
  for (const char* via : {"getproc", "dlsym"}) {
    for (const char* path :
         {"alloc", "pitch", "managed", "async", "pool", "array", "array3d", "mipmap", "vmm"}) {
      cases.push_back({via, path, false});
    }
    cases.push_back({via, "async", true});
    cases.push_back({via, "pool", true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllPaths, CudaInterposerCapTest, ::testing::ValuesIn(CapCases()),
                         [](const ::testing::TestParamInfo<CapCase>& param_info) {
                           return param_info.param.via + "_" + param_info.param.path +
                                  (param_info.param.ptsz ? "_ptsz" : "");
                         });

// 93 MiB arrays take 94 MiB each (their memory requirement): 10 fit in 1024 MiB, where counting
// the 93 MiB asked for would let 11 through.
TEST_F(CudaInterposerTest, ArraysCountTheirMemoryRequirement) {
  for (const char* path : {"array", "array3d", "mipmap"}) {
    SCOPED_TRACE(path);
    const Outcome run = RunProbe({"alloc", "--path", path, "--mib", "93"}, Capped(path));
    ASSERT_EQ(run.exit_code, 0) << run.Describe();
    EXPECT_EQ(Field(run.Json(), "allocated"), 10);
    EXPECT_LE(Field(run.Json(), "device_peak_bytes"), kCap);
    EXPECT_EQ(Field(run.Json(), "free"), kCap - 10 * ReservedBytes(path, 93));
  }
}

// Without the interposer the same probe goes past 1024 MiB: the cap tests can fail.
TEST_F(CudaInterposerTest, WithoutTheInterposerTheProbeGoesBeyondTheCap) {
  auto env = Capped();
  env.erase("LD_PRELOAD");
  const Outcome run = RunProbe({"alloc", "--path", "alloc", "--mib", "100", "--count", "20"}, env);
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_EQ(Field(run.Json(), "allocated"), 20);
  EXPECT_EQ(Field(run.Json(), "device_peak_bytes"), 2000LL * static_cast<long long>(kMiB));
  EXPECT_EQ(Field(run.Json(), "total"), 16384LL * static_cast<long long>(kMiB));
}

TEST_F(CudaInterposerTest, ContextReserveIsCountedPerContext) {
  const Outcome info = RunProbe(
      {"info"}, Env({{"GPUSLICE_VRAM_LIMIT_MIB", "1024"}, {"GPUSLICE_CONTEXT_RESERVE_MIB", "24"}}));
  ASSERT_EQ(info.exit_code, 0) << info.Describe();
  EXPECT_EQ(Field(info.Json(), "total"), kCap);
  EXPECT_EQ(Field(info.Json(), "free"), 1000LL * static_cast<long long>(kMiB));
  ExpectStartLine(info, "24");
  // 1000 MiB of room: ten 100 MiB chunks fit exactly, the eleventh does not.
  const Outcome alloc =
      RunProbe({"alloc", "--path", "alloc", "--mib", "100"},
               Env({{"GPUSLICE_VRAM_LIMIT_MIB", "1024"}, {"GPUSLICE_CONTEXT_RESERVE_MIB", "24"}}));
  ASSERT_EQ(alloc.exit_code, 0) << alloc.Describe();
  EXPECT_EQ(Field(alloc.Json(), "allocated"), 10);
  EXPECT_EQ(Field(alloc.Json(), "failed_with"), 2);
  EXPECT_EQ(Field(alloc.Json(), "free"), 0);
  EXPECT_EQ(Field(alloc.Json(), "free_after"), 1000LL * static_cast<long long>(kMiB));
}

// A context is counted before it is made, like an allocation: one that does not fit is refused.
TEST_F(CudaInterposerTest, AContextBeyondTheCapIsRefused) {
  const Outcome run = RunProbe(
      {"info"}, Env({{"GPUSLICE_VRAM_LIMIT_MIB", "16"}, {"GPUSLICE_CONTEXT_RESERVE_MIB", "320"}}));
  EXPECT_EQ(run.exit_code, 1) << run.Describe();
  EXPECT_EQ(run.Json().value("error", ""), "cuDevicePrimaryCtxRetain") << run.out;
  EXPECT_EQ(run.Json().value("code", 0), 2) << "CUDA_ERROR_OUT_OF_MEMORY";
}

// --- contexts counted as measured (defaults: GPUSLICE_CONTEXT_RESERVE_MIB not set) ---

TEST_F(CudaInterposerTest, AContextCountsWhatItWasMeasuredToTake) {
  const Outcome run = RunProbe({"info"}, Measured(kCapMiB));
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_EQ(Field(run.Json(), "total"), kCap);
  EXPECT_EQ(Field(run.Json(), "free"), kCap - Mib(kContextMiB))
      << "the primary context counts its 518 MiB, not the configured 320";
  ExpectStartLine(run, "measured when it is made");
  EXPECT_EQ(Occurrences(run.err, "a CUDA context took 518 MiB"), 1) << run.err;
  const absl::StatusOr<SliceSnapshot> slice = Slice();
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->peak_bytes, static_cast<std::uint64_t>(Mib(kContextMiB)))
      << "counted first as 320 MiB, then corrected up to 518, never more";
  EXPECT_EQ(slice->context_reserve_bytes, static_cast<std::uint64_t>(Mib(kContextMiB)));
  EXPECT_EQ(slice->refused, 0u);
}

// 518 + 506 = 1024 MiB: an allocation of 506 MiB fits exactly, one of 507 passes the cap by 1 MiB
// and is refused. Counting the default 320 MiB instead, 507 MiB would be let through and the
// device would hold 1025 MiB under a 1024 MiB cap.
TEST_F(CudaInterposerTest, TheCapIsExactWithAMeasuredContext) {
  const Outcome fits = RunProbe({"alloc", "--path", "alloc", "--mib", "506"}, Measured(kCapMiB));
  ASSERT_EQ(fits.exit_code, 0) << fits.Describe();
  EXPECT_EQ(Field(fits.Json(), "allocated"), 1) << fits.Describe();
  EXPECT_EQ(Field(fits.Json(), "failed_with"), 2) << "the second 506 MiB is refused";
  EXPECT_EQ(Field(fits.Json(), "device_peak_bytes"), kCap)
      << "the device held the context and the allocation: exactly the cap";
  EXPECT_EQ(Field(fits.Json(), "free"), 0);

  const Outcome over = RunProbe({"alloc", "--path", "alloc", "--mib", "507"}, Measured(kCapMiB));
  ASSERT_EQ(over.exit_code, 0) << over.Describe();
  EXPECT_EQ(Field(over.Json(), "allocated"), 0) << over.Describe();
  EXPECT_EQ(Field(over.Json(), "failed_with"), 2) << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_EQ(Field(over.Json(), "device_peak_bytes"), Mib(kContextMiB)) << "only the context";
  EXPECT_EQ(Field(over.Json(), "free"), kCap - Mib(kContextMiB));
}

// A cap of 400 MiB holds the 320 MiB counted before the primary context is made, not the 518 MiB
// it is measured to take once made: it is released again (the device holds nothing) and refused.
TEST_F(CudaInterposerTest, APrimaryContextBeyondTheCapIsReleasedAndRefused) {
  const Outcome run = RunProbe({"info"}, Measured(400));
  EXPECT_EQ(run.exit_code, 1) << run.Describe();
  EXPECT_EQ(run.Json().value("error", ""), "cuDevicePrimaryCtxRetain") << run.out;
  EXPECT_EQ(run.Json().value("code", 0), 2) << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_EQ(Field(run.Json(), "device_used_bytes"), 0) << "the context did not stay";
  EXPECT_NE(run.err.find("refused a CUDA context: it took 518 MiB"), std::string::npos) << run.err;
  const absl::StatusOr<SliceSnapshot> slice = Slice();
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->refused, 1u);
  EXPECT_LE(slice->peak_bytes, 400u * kMiB) << "the cap was never passed, even while measuring";
}

// The primary context (518 MiB) fits under 1024 MiB; a second one does not, and is destroyed.
TEST_F(CudaInterposerTest, ACreatedContextBeyondTheCapIsDestroyedAndRefused) {
  const Outcome run = RunProbe({"context"}, Measured(kCapMiB));
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  const nlohmann::json json = run.Json();
  EXPECT_EQ(Field(json, "created"), 0) << run.Describe();
  EXPECT_EQ(Field(json, "failed_with"), 2) << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_EQ(Field(json, "device_used_after"), Mib(kContextMiB)) << "only the primary context";
  EXPECT_EQ(Field(json, "free_after"), kCap - Mib(kContextMiB)) << "nothing of it counted";
}

TEST_F(CudaInterposerTest, DestroyingAContextGivesItsMeasuredCostBack) {
  const Outcome run = RunProbe({"context"}, Measured(2048));
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  const nlohmann::json json = run.Json();
  EXPECT_EQ(Field(json, "created"), 1) << run.Describe();
  EXPECT_EQ(Field(json, "free_before"), Mib(2048 - kContextMiB));
  EXPECT_EQ(Field(json, "free_with"), Mib(2048 - 2 * kContextMiB));
  EXPECT_EQ(Field(json, "device_used_with"), Mib(2 * kContextMiB));
  EXPECT_EQ(Field(json, "free_after"), Mib(2048 - kContextMiB)) << "518 MiB given back";
  EXPECT_EQ(Field(json, "device_used_after"), Mib(kContextMiB));
  EXPECT_EQ(Occurrences(run.err, "a CUDA context took 518 MiB"), 1) << "said once: " << run.err;
}

// Without NVML each context counts the configured reservation, and the log says so once.
TEST_F(CudaInterposerTest, WithoutNvmlTheConfiguredReservationIsCounted) {
  const std::string missing = dir_ / "no-such-libnvidia-ml.so.1";
  const Outcome run = RunProbe({"context"}, Measured(2048, {{"GPUSLICE_REAL_NVML", missing}}));
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  const nlohmann::json json = run.Json();
  EXPECT_EQ(Field(json, "created"), 1) << run.Describe();
  EXPECT_EQ(Field(json, "free_before"), Mib(2048 - 320));
  EXPECT_EQ(Field(json, "free_with"), Mib(2048 - 2 * 320));
  EXPECT_EQ(Field(json, "free_after"), Mib(2048 - 320));
  EXPECT_EQ(Occurrences(run.err, "cannot measure what a CUDA context takes"), 1) << run.err;
  EXPECT_NE(run.err.find(missing), std::string::npos) << "says why: " << run.err;
  EXPECT_NE(run.err.find("configured 320 MiB"), std::string::npos) << run.err;
}

// A figure that cannot be a context's is not believed: free memory that did not drop (a context
// of 0 MiB), or a drop beyond 8 GiB (another process's allocations on a real GPU).
TEST_F(CudaInterposerTest, AnImplausibleMeasurementCountsTheConfiguredReservation) {
  for (const auto& [context_mib, why] : std::map<std::string, std::string>{
           {"0", "free memory did not drop"}, {"9000", "more than a context takes"}}) {
    SCOPED_TRACE(context_mib);
    const Outcome run =
        RunProbe({"info"}, Measured(kCapMiB, {{"FAKE_CUDA_CONTEXT_MIB", context_mib}}));
    ASSERT_EQ(run.exit_code, 0) << run.Describe();
    EXPECT_EQ(Field(run.Json(), "free"), kCap - Mib(320));
    EXPECT_NE(run.err.find(why), std::string::npos) << run.err;
  }
}

// Set explicitly, the reservation is what a context counts, measured or not.
TEST_F(CudaInterposerTest, AnExplicitReservationWinsOverMeasuring) {
  const Outcome run =
      RunProbe({"info"}, Measured(kCapMiB, {{"GPUSLICE_CONTEXT_RESERVE_MIB", "24"}}));
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_EQ(Field(run.Json(), "free"), kCap - Mib(24));
  ExpectStartLine(run, "each CUDA context counted as 24 MiB");
  EXPECT_EQ(run.err.find("a CUDA context took"), std::string::npos) << run.err;
}

// --- modes ---

TEST_F(CudaInterposerTest, PassthroughTouchesNothing) {
  const Outcome run = RunProbe({"alloc", "--path", "alloc", "--mib", "100", "--count", "20"},
                               Env({{"GPUSLICE_VRAM_LIMIT_MIB", "1024"},
                                    {"GPUSLICE_COMPUTE_SHARE_MILLI", "250"},
                                    {"GPUSLICE_MODE", "passthrough"}}));
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_EQ(Field(run.Json(), "allocated"), 20);
  EXPECT_EQ(Field(run.Json(), "failed_with"), 0);
  EXPECT_EQ(Field(run.Json(), "total"), 16384LL * static_cast<long long>(kMiB))
      << "the device's own figures";
  EXPECT_FALSE(Slice().ok()) << "no accounting file in passthrough";
}

TEST_F(CudaInterposerTest, MeasureRefusesNothingAndCountsEverything) {
  const Outcome run =
      RunProbe({"alloc", "--path", "alloc", "--mib", "100", "--count", "20"},
               Env({{"GPUSLICE_VRAM_LIMIT_MIB", "1024"}, {"GPUSLICE_MODE", "measure"}}));
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  EXPECT_EQ(Field(run.Json(), "allocated"), 20);
  EXPECT_EQ(Field(run.Json(), "failed_with"), 0);
  EXPECT_EQ(Field(run.Json(), "device_peak_bytes"), 2000LL * static_cast<long long>(kMiB));
  const absl::StatusOr<SliceSnapshot> slice = Slice();
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->mode, SliceMode::kMeasure);
  EXPECT_EQ(slice->allocations, 20u);
  EXPECT_EQ(slice->refused, 0u);
  EXPECT_EQ(slice->peak_bytes, 2000u * kMiB);
  EXPECT_EQ(slice->used_bytes, 0u);
}

// --- sharing ---

TEST_F(CudaInterposerTest, TwoProcessesOfOneSliceShareItsCap) {
  auto first = StartProbe({"hold", "--mib", "600", "--ms", "4000"}, Capped("shared"));
  ASSERT_TRUE(first->started());
  const std::string line = first->ReadLine(30000);
  ASSERT_EQ(Field(nlohmann::json::parse(line, nullptr, false), "allocated"), 1) << line;

  const Outcome second = RunProbe({"hold", "--mib", "600", "--ms", "0"}, Capped("shared"));
  EXPECT_EQ(second.exit_code, 0) << second.Describe();
  EXPECT_EQ(Field(second.Json(), "allocated"), 0) << "600 + 600 MiB > 1024 MiB in one slice";
  EXPECT_EQ(Field(second.Json(), "failed_with"), 2);
  const Outcome info = RunProbe({"info"}, Capped("shared"));
  ASSERT_EQ(info.exit_code, 0) << info.Describe();
  EXPECT_EQ(Field(info.Json(), "free"), 424LL * static_cast<long long>(kMiB))
      << "cuMemGetInfo counts the other process's 600 MiB";

  // Another slice is not affected.
  const Outcome other = RunProbe({"hold", "--mib", "600", "--ms", "0"}, Capped("other"));
  EXPECT_EQ(other.exit_code, 0) << other.Describe();
  EXPECT_EQ(Field(other.Json(), "allocated"), 1) << "slices are independent";

  const Outcome done = first->Wait(30000);
  EXPECT_EQ(done.exit_code, 0) << done.Describe();
  const Outcome after = RunProbe({"hold", "--mib", "600", "--ms", "0"}, Capped("shared"));
  EXPECT_EQ(Field(after.Json(), "allocated"), 1) << "the first process gave its memory back";
}

TEST_F(CudaInterposerTest, AKilledProcessIsUncounted) {
  const Outcome crash = RunProbe({"crash", "--mib", "800"}, Capped());
  ASSERT_EQ(crash.signal, 9) << crash.Describe();
  EXPECT_EQ(Field(crash.Json(), "allocated_bytes"), 800LL * static_cast<long long>(kMiB));
  const absl::StatusOr<SliceSnapshot> before = Slice();
  ASSERT_TRUE(before.ok()) << before.status();
  bool dead_slot = false;
  for (const SliceProcess& process : before->processes) {
    dead_slot = dead_slot || (!process.alive && process.used_bytes == 800u * kMiB);
  }
  EXPECT_TRUE(dead_slot) << "the killed process's slot, still holding 800 MiB, until reclaimed";

  const Outcome again =
      RunProbe({"alloc", "--path", "alloc", "--mib", "800", "--count", "1"}, Capped());
  ASSERT_EQ(again.exit_code, 0) << again.Describe();
  EXPECT_EQ(Field(again.Json(), "allocated"), 1) << "the dead process's 800 MiB were given back";
  EXPECT_EQ(Field(again.Json(), "failed_with"), 0);
  const absl::StatusOr<SliceSnapshot> after = Slice();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->reclaimed_processes, 1u);
  EXPECT_EQ(after->reclaimed_bytes, 800u * kMiB);
  EXPECT_EQ(after->used_bytes, 0u);
}

// --- failing closed ---

TEST_F(CudaInterposerTest, UnusableAccountingRefusesCuda) {
  const std::string file = dir_ / "a-file";
  std::ofstream(file) << "not a directory\n";
  for (const char* via : {"getproc", "dlsym"}) {
    SCOPED_TRACE(via);
    auto env = Capped();
    env["GPUSLICE_SHM_DIR"] = file + "/shm";
    const Outcome run = RunProbe({"--via", via, "info"}, env);
    EXPECT_EQ(run.exit_code, 1) << run.Describe();
    EXPECT_EQ(run.Json().value("error", ""), "cuInit") << run.out;
    EXPECT_EQ(run.Json().value("code", 0), 3) << "CUDA_ERROR_NOT_INITIALIZED";
    EXPECT_NE(run.err.find("gpuslice-cuda"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find(file + "/shm"), std::string::npos) << "says why: " << run.err;
  }
}

}  // namespace
}  // namespace gpuslice::shim::testing
