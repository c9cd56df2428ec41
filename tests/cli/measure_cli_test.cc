// Black-box tests of `gpuslice measure`: the built binary measures the probe (tests/shim/
// cuda_probe.cc) on the test CUDA library (src/shim/fake_cuda/) through the built interposer:
// peak VRAM, the allocation size histogram, launches and kernel time, the planner's sizing, the
// workloads file accepted by `gpuslice plan`, the command's exit code, and bad usage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/run_gpuslice.h"
#include "nlohmann/json.hpp"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif
#ifndef GPUSLICE_FAKE_CUDA_DIR
#error "GPUSLICE_FAKE_CUDA_DIR must name the directory of the test libcuda.so.1"
#endif
#ifndef GPUSLICE_CUDA_PROBE
#error "GPUSLICE_CUDA_PROBE must name the built cuda_probe"
#endif
#ifndef GPUSLICE_INTERPOSER_PATH
#error "GPUSLICE_INTERPOSER_PATH must name the built libgpuslice-cuda.so"
#endif

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::uint64_t kMib = 1024 * 1024;

class MeasureCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("gpuslice_measure_cli_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The environment of gpuslice (and so of the measured command): the test CUDA library with no
  // context memory of its own, no context reservation counted, an engine file of this test, and
  // the built interposer.
  std::string Env() const {
    return "env LD_LIBRARY_PATH='" + std::string(GPUSLICE_FAKE_CUDA_DIR) +
           "' FAKE_CUDA_CONTEXT_MIB=0 FAKE_CUDA_TOTAL_MIB=16384 FAKE_CUDA_ENGINE='" +
           (dir_ / "engine").string() +
           "' GPUSLICE_CONTEXT_RESERVE_MIB=0 GPUSLICE_LOG=0 GPUSLICE_INTERPOSER='" +
           GPUSLICE_INTERPOSER_PATH + "' ASAN_OPTIONS='" + AsanOptions() +
           "' GPUSLICE_VRAM_LIMIT_MIB=1 GPUSLICE_COMPUTE_SHARE_MILLI=1 ";
  }
  // This process's ASan options (CI's sanitizer run sets some) with the preloaded interposer
  // allowed before libasan, and no leak report from `sh`, which is not built with ASan but gets
  // its runtime through the interposer.
  static std::string AsanOptions() {
    const char* parent = std::getenv("ASAN_OPTIONS");
    return std::string(parent != nullptr && *parent != '\0' ? std::string(parent) + ":" : "") +
           "verify_asan_link_order=0:detect_leaks=0";
  }
  // `gpuslice ARGS` in that environment; `extra_env`: more VAR=VALUE words, overriding those
  // above.
  gpuslice::cli::testing::CommandResult Measure(const std::string& args, bool with_stderr = true,
                                                const std::string& extra_env = "") const {
    return gpuslice::cli::testing::Shell(Env() + extra_env + " '" + GPUSLICE_BINARY + "' " + args +
                                         (with_stderr ? " 2>&1" : " 2>/dev/null"));
  }
  static std::string Probe() { return std::string("'") + GPUSLICE_CUDA_PROBE + "'"; }

  // measure --json prints its object (dump with indent 2: a line "{" first) after whatever the
  // command printed; the probe prints one line of JSON.
  static json Report(const std::string& output) {
    size_t at = 0;
    if (output.rfind("{\n", 0) != 0) {
      at = output.rfind("\n{\n");
      if (at == std::string::npos) {
        ADD_FAILURE() << "no JSON report in: " << output;
        return json::object();
      }
      ++at;
    }
    json report = json::parse(output.substr(at), nullptr, false);
    if (report.is_discarded()) ADD_FAILURE() << "not JSON: " << output.substr(at);
    return report;
  }

  fs::path dir_;
};

TEST_F(MeasureCliTest, AllocationsPeakAndHistogram) {
  // The limits in the environment (GPUSLICE_VRAM_LIMIT_MIB=1 above) are removed from the
  // measured command's: with them, the 100 MiB allocations would be refused.
  const auto run =
      Measure("measure --json -- " + Probe() + " alloc --path alloc --mib 100 --count 5", false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const json report = Report(run.output);
  ASSERT_TRUE(report.is_object()) << run.output;
  EXPECT_EQ(report["measured"], true);
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_EQ(report["peak_bytes"].get<std::uint64_t>(), 500 * kMib) << run.output;
  EXPECT_EQ(report["context_reserve_bytes"].get<std::uint64_t>(), 0U);
  EXPECT_EQ(report["allocations"].get<std::uint64_t>(), 5U);
  EXPECT_EQ(report["refused"].get<std::uint64_t>(), 0U);
  ASSERT_EQ(report["size_histogram"].size(), 1U) << report.dump();
  EXPECT_EQ(report["size_histogram"][0]["min_bytes"].get<std::uint64_t>(), 64 * kMib);
  EXPECT_EQ(report["size_histogram"][0]["max_bytes"].get<std::uint64_t>(), 128 * kMib);
  EXPECT_EQ(report["size_histogram"][0]["count"].get<std::uint64_t>(), 5U);
  EXPECT_EQ(report["largest_bucket"]["label"], "64-128 MiB");
  EXPECT_EQ(report["launches"].get<std::uint64_t>(), 0U);
  EXPECT_GE(report["processes_seen"].get<std::uint64_t>(), 1U);
  EXPECT_EQ(report["workload"]["name"], "cuda_probe");
  EXPECT_EQ(report["workload"]["peak_memory_gib"].get<double>(), 0.5);
  EXPECT_EQ(report["workload"]["headroom"].get<double>(), 0.15);
  // One line per catalog model; 0.5 GiB + 15% is the smallest profile everywhere.
  bool h100 = false;
  for (const json& fit : report["sizing"]) {
    if (fit["model"] == "H100-80GB") {
      h100 = true;
      EXPECT_EQ(fit["instance"], "1g.10gb");
      EXPECT_EQ(fit["explanation"], "0.5 GiB peak + 15% = 0.57 GiB -> 1g.10gb on H100-80GB");
    }
    if (fit["mig"] == false) {
      EXPECT_EQ(fit["instance"], "whole GPU") << fit.dump();
    }
  }
  EXPECT_TRUE(h100) << report["sizing"].dump();

  // The same as text.
  const auto text = Measure("measure -- " + Probe() + " alloc --path alloc --mib 100 --count 5");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("peak VRAM     500.0 MiB"));
  EXPECT_THAT(text.output, HasSubstr("counting 0.0 MiB for the last CUDA context"));
  EXPECT_THAT(text.output, HasSubstr("allocations   5, most in 64-128 MiB (5)"));
  EXPECT_THAT(text.output, HasSubstr("-> 1g.10gb on H100-80GB"));
}

TEST_F(MeasureCliTest, PeakCountsTheContextReservation) {
  // Each context is counted as GPUSLICE_CONTEXT_RESERVE_MIB (the driver's own memory), so the
  // peak is what a slice's cap must hold.
  const auto run =
      Measure("measure --json -- " + Probe() + " alloc --path alloc --mib 100 --count 5", false,
              "GPUSLICE_CONTEXT_RESERVE_MIB=64");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const json report = Report(run.output);
  EXPECT_EQ(report["context_reserve_bytes"].get<std::uint64_t>(), 64 * kMib);
  EXPECT_EQ(report["peak_bytes"].get<std::uint64_t>(), 564 * kMib) << run.output;
  EXPECT_EQ(report["allocations"].get<std::uint64_t>(), 5U);
  // 564 MiB + 15% = 648.6 MiB: a cap of 649 MiB.
  EXPECT_EQ(report["software_slice_vram_mib"].get<std::int64_t>(), 649);
}

TEST_F(MeasureCliTest, HeadroomAndKindChangeTheSizing) {
  // 20 x 100 MiB = 1.95 GiB, 2.0 rounded up; + 400% = 10 GiB: more than H100-80GB's 1g.10gb
  // (9.75 GiB) and A100-40GB's 2g.10gb.
  const auto run = Measure("measure --json --headroom 400 --kind batch -- " + Probe() +
                               " alloc --path alloc --mib 100 --count 20",
                           false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const json report = Report(run.output);
  EXPECT_EQ(report["workload"]["kind"], "batch");
  EXPECT_EQ(report["workload"]["peak_memory_gib"].get<double>(), 2.0);
  EXPECT_EQ(report["workload"]["headroom"].get<double>(), 4.0);
  for (const json& fit : report["sizing"]) {
    if (fit["model"] == "H100-80GB") {
      EXPECT_EQ(fit["instance"], "1g.20gb") << fit.dump();
    }
    if (fit["model"] == "A100-40GB") {
      EXPECT_EQ(fit["instance"], "3g.20gb") << fit.dump();
    }
  }
}

TEST_F(MeasureCliTest, LaunchesAndKernelTime) {
  // The fake's work kernel takes 1 ns per iteration: 1 ms kernels for half a second or more.
  const auto run = Measure(
      "measure --json -- " + Probe() + " launch --kernel work --arg 1000000 --seconds 1", false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const json report = Report(run.output);
  EXPECT_GT(report["launches"].get<std::uint64_t>(), 0U) << report.dump();
  EXPECT_GT(report["kernel_ns"].get<std::uint64_t>(), 0U) << report.dump();
  EXPECT_GT(report["kernel_share_of_wall"].get<double>(), 0.0);
  EXPECT_LE(report["kernel_share_of_wall"].get<double>(), 1.05);

  const auto text =
      Measure("measure -- " + Probe() + " launch --kernel work --arg 1000000 --seconds 1");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("of the run's wall time"));
  EXPECT_THAT(text.output, Not(HasSubstr("launches      0\n")));
}

TEST_F(MeasureCliTest, WorkloadOutIsAcceptedByPlan) {
  const std::string out = (dir_ / "workloads.yaml").string();
  const auto run = Measure("measure --name probe-alloc --kind notebook --workload-out '" + out +
                           "' -- " + Probe() + " alloc --path alloc --mib 100 --count 5");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("name: \"probe-alloc\""));
  EXPECT_THAT(text.str(), HasSubstr("kind: notebook"));
  EXPECT_THAT(text.str(), HasSubstr("peak_memory_gib: 0.5"));
  EXPECT_THAT(text.str(), HasSubstr("measured: true"));
  const std::string fleet = std::string(GPUSLICE_SOURCE_DIR) + "/examples/plan/fleet.yaml";
  const auto plan = gpuslice::cli::testing::RunGpuslice("plan -w '" + out + "' -f '" + fleet + "'");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("probe-alloc"));

  // --headroom is written as the file's policy, so that plan sizes as measure did.
  const auto with_headroom = Measure("measure --headroom 50 --workload-out '" + out + "' -- " +
                                     Probe() + " alloc --path alloc --mib 100 --count 1");
  ASSERT_EQ(with_headroom.exit_code, 0) << with_headroom.output;
  const auto plan2 =
      gpuslice::cli::testing::RunGpuslice("plan -w '" + out + "' -f '" + fleet + "'");
  EXPECT_EQ(plan2.exit_code, 0) << plan2.output;
  EXPECT_THAT(plan2.output, HasSubstr("cuda_probe"));
}

TEST_F(MeasureCliTest, ExitCodeOfACommandWithoutCuda) {
  const auto run = Measure("measure -- sh -c 'exit 3'");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_THAT(run.output, HasSubstr("did not use CUDA through the driver API; nothing measured"));
  const auto json_run = Measure("measure --json -- sh -c 'exit 0'", false);
  EXPECT_EQ(json_run.exit_code, 0) << json_run.output;
  EXPECT_EQ(Report(json_run.output)["measured"], false);
  // Killed by a signal: 128 + signal.
  EXPECT_EQ(Measure("measure -- sh -c 'kill -TERM $$'").exit_code, 128 + 15);
  // A command that is not there.
  EXPECT_EQ(Measure("measure -- /nonexistent/gpuslice-no-such-command").exit_code, 127);
  // The accounting directory is removed afterwards.
  const auto probe = Measure("measure -- " + Probe() + " alloc --path alloc --mib 1 --count 1");
  EXPECT_EQ(probe.exit_code, 0) << probe.output;
}

TEST_F(MeasureCliTest, ForwardsSigtermAndStillReports) {
  // gpuslice measure is sent SIGTERM while the probe holds 10 MiB: the probe gets it, and what
  // was measured until then is reported; the exit code is the probe's, 128 + SIGTERM. The signal
  // goes once the probe says it holds the memory (a fixed second was too short under ASan on a
  // busy machine: the probe had not started using CUDA yet).
  const std::string out = (dir_ / "out").string();
  const auto run = gpuslice::cli::testing::Shell(
      Env() + " '" + GPUSLICE_BINARY + "' measure -- " + Probe() + " hold --mib 10 --ms 30000 >'" +
      out + "' 2>&1 & pid=$!; for i in $(seq 300); do grep -q allocated '" + out +
      "' && break; sleep 0.1; done; kill -TERM $pid; wait $pid; echo \"rc=$?\"; cat '" + out + "'");
  EXPECT_THAT(run.output, HasSubstr("rc=143")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("exit code 143")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("peak VRAM     10.0 MiB")) << run.output;
}

TEST_F(MeasureCliTest, EnvironmentOfTheMeasuredCommand) {
  const auto run = Measure(
      "measure --keep -- sh -c 'echo \"mode=$GPUSLICE_MODE slice=$GPUSLICE_SLICE "
      "dir=$GPUSLICE_SHM_DIR cap=${GPUSLICE_VRAM_LIMIT_MIB-unset} "
      "share=${GPUSLICE_COMPUTE_SHARE_MILLI-unset} preload=$LD_PRELOAD\"'");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("mode=measure slice=measure-"));
  EXPECT_THAT(run.output, HasSubstr("cap=unset share=unset"));
  EXPECT_THAT(run.output, HasSubstr(std::string("preload=") + GPUSLICE_INTERPOSER_PATH));
  EXPECT_THAT(run.output, HasSubstr("kept the slice's accounting in "));
  // --keep leaves the directory; without it, it is gone.
  const size_t at = run.output.find("dir=");
  ASSERT_NE(at, std::string::npos);
  const std::string dir = run.output.substr(at + 4, run.output.find(' ', at) - at - 4);
  EXPECT_TRUE(fs::is_directory(dir)) << dir;
  fs::remove_all(dir);

  const auto gone = Measure("measure -- sh -c 'echo \"dir=$GPUSLICE_SHM_DIR \"'");
  const size_t at2 = gone.output.find("dir=");
  ASSERT_NE(at2, std::string::npos);
  const std::string dir2 = gone.output.substr(at2 + 4, gone.output.find(' ', at2) - at2 - 4);
  EXPECT_FALSE(fs::exists(dir2)) << dir2;
}

TEST_F(MeasureCliTest, BadUsage) {
  EXPECT_EQ(Measure("measure").exit_code, 2);
  EXPECT_EQ(Measure("measure --").exit_code, 2);
  const auto kind = Measure("measure --kind training -- true");
  EXPECT_EQ(kind.exit_code, 2);
  EXPECT_THAT(kind.output, HasSubstr("inference, notebook, batch or fine-tune"));
  const auto name = Measure("measure --name 'a b' -- true");
  EXPECT_EQ(name.exit_code, 2);
  EXPECT_EQ(Measure("measure --headroom -5 -- true").exit_code, 2);
}

}  // namespace
