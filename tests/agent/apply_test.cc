// apply / assert / export on simulated machines: the smallest change, busy instances, pending
// modes, hooks-free flows, and convergence after a failure or a crash at every call of an apply.
#include "gpuslice/agent/apply.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <string>

#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_store.h"

namespace gpuslice::agent {
namespace {

using device::SimBackend;
using device::sim::SimMachine;
using device::sim::SimState;

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

// The GPU instances of a GPU (a failed call fails the test and gives none).
std::vector<device::GpuInstanceInfo> GpuInstances(device::Backend& backend, int gpu) {
  absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis = backend.ListGpuInstances(gpu);
  EXPECT_TRUE(gis.ok()) << gis.status();
  return gis.ok() ? *std::move(gis) : std::vector<device::GpuInstanceInfo>{};
}

// The id of the first compute instance of a GI, or -1.
int FirstCi(device::Backend& backend, int gpu, int gi) {
  absl::StatusOr<std::vector<device::ComputeInstanceInfo>> cis =
      backend.ListComputeInstances(gpu, gi);
  EXPECT_TRUE(cis.ok() && !cis->empty());
  return cis.ok() && !cis->empty() ? cis->front().id : -1;
}

constexpr char kConfigs[] = R"(version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
  balanced:
    - device-filter: ["0x233010DE", "0x233110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
  inference:
    - device-filter: ["0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "1g.10gb": 4
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "7g.40gb": 1
  split:
    - device-filter: ["0x233010DE"]
      devices: [0]
      mig-enabled: true
      mig-devices:
        "1c.3g.40gb": 3
        "3g.40gb": 1
    - device-filter: ["0x233010DE"]
      devices: [1]
      mig-enabled: false
    - device-filter: "0x20B010DE"
      devices: [2]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 4
)";

class ApplyTest : public testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpuslice-apply-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/machine.json";
    absl::StatusOr<SimState> state = device::sim::NewMachine(Catalog(), "2xH100-80GB,A100-40GB");
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE(device::sim::SimStore::Create(path_, *state, false).ok());
    absl::StatusOr<spec::MigConfigFile> file = spec::ParseMigPartedConfig(kConfigs, "test.yaml");
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = *std::move(file);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<SimBackend> Backend() {
    absl::StatusOr<std::unique_ptr<SimBackend>> backend = SimBackend::OpenFile(path_, Catalog());
    EXPECT_TRUE(backend.ok()) << backend.status();
    return *std::move(backend);
  }

  absl::StatusOr<ApplyResult> Apply(const std::string& config, bool force = false,
                                    std::string* log = nullptr) {
    std::unique_ptr<SimBackend> backend = Backend();
    ApplyRequest request;
    request.file = &file_;
    request.file_path = "test.yaml";
    request.config_name = config;
    request.force = force;
    request.journal_path = path_ + ".journal";
    std::string unused;
    std::string& out = log != nullptr ? *log : unused;
    return ApplyConfig(*backend, Catalog(), request,
                       [&](const std::string& line) { out += line + "\n"; });
  }

  std::vector<std::string> Assert(const std::string& config) {
    std::unique_ptr<SimBackend> backend = Backend();
    absl::StatusOr<std::vector<std::string>> differences =
        AssertConfig(*backend, Catalog(), file_, config, false);
    EXPECT_TRUE(differences.ok()) << differences.status();
    return differences.ok() ? *differences : std::vector<std::string>{"assert failed"};
  }

  // (GI id, profile id, start) of every GI, to compare machines before and after.
  std::set<std::tuple<int, int, int, int>> Instances() {
    std::set<std::tuple<int, int, int, int>> out;
    std::unique_ptr<SimBackend> backend = Backend();
    const absl::StatusOr<std::vector<device::GpuInfo>> gpus = backend->ListGpus();
    EXPECT_TRUE(gpus.ok());
    if (!gpus.ok()) return out;
    for (const device::GpuInfo& gpu : *gpus) {
      if (gpu.mig_current != device::MigMode::kEnabled) continue;
      const absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis =
          backend->ListGpuInstances(gpu.index);
      EXPECT_TRUE(gis.ok());
      if (!gis.ok()) continue;
      for (const device::GpuInstanceInfo& gi : *gis)
        out.insert({gpu.index, gi.id, gi.profile_id, gi.start});
    }
    return out;
  }

  void Control(const std::function<int(SimState&, SimMachine&)>& fn) {
    absl::StatusOr<std::unique_ptr<device::sim::SimStore>> store =
        device::sim::SimStore::Open(path_);
    ASSERT_TRUE(store.ok());
    int code = 0;
    ASSERT_TRUE((*store)
                    ->Update([&](SimState& state, const std::function<void()>&) {
                      SimMachine machine(state, Catalog());
                      code = fn(state, machine);
                      return true;
                    })
                    .ok());
    ASSERT_EQ(code, 0);
  }

  std::string dir_;
  std::string path_;
  spec::MigConfigFile file_;
};

TEST_F(ApplyTest, AppliesAndAssertsAndIsIdempotent) {
  EXPECT_FALSE(Assert("balanced").empty());
  std::string log;
  absl::StatusOr<ApplyResult> result = Apply("balanced", false, &log);
  ASSERT_TRUE(result.ok()) << result.status() << log;
  EXPECT_TRUE(result->changed);
  EXPECT_EQ(result->created, 12);
  EXPECT_NE(log.find("MIG configuration applied successfully"), std::string::npos);
  EXPECT_TRUE(Assert("balanced").empty());
  const auto before = Instances();
  result = Apply("balanced");
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->changed);
  EXPECT_EQ(Instances(), before);
}

TEST_F(ApplyTest, ChangingLayoutKeepsTheInstancesThatFit) {
  ASSERT_TRUE(Apply("balanced").ok());
  const auto before = Instances();
  // H100: balanced = 3g@?, 2g, 1g, 1g; inference = 3g + 4x1g: the 3g and the two 1g's can stay.
  absl::StatusOr<ApplyResult> result = Apply("inference");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(Assert("inference").empty());
  const auto after = Instances();
  int kept_on_h100 = 0;
  for (const auto& instance : before) {
    if (std::get<0>(instance) < 2 && after.count(instance) > 0) ++kept_on_h100;
  }
  EXPECT_EQ(kept_on_h100, 2 * 3);  // per H100: the 3g.40gb and both 1g.10gb stay
  EXPECT_EQ(result->plans[0].kept, 3);
  EXPECT_EQ(result->plans[0].destroyed, 1);  // only the 2g.20gb goes
  EXPECT_EQ(result->plans[0].created, 2);
}

TEST_F(ApplyTest, BusyInstanceIsNotDestroyedWithoutForceAndNothingChanges) {
  ASSERT_TRUE(Apply("balanced").ok());
  // Put a process on GPU 0's 2g.20gb, which "inference" must destroy.
  std::unique_ptr<SimBackend> backend = Backend();
  int gi_2g = -1;
  for (const device::GpuInstanceInfo& gi : GpuInstances(*backend, 0)) {
    if (gi.profile_id == 14) gi_2g = gi.id;
  }
  ASSERT_GE(gi_2g, 0);
  const int ci = FirstCi(*backend, 0, gi_2g);
  backend.reset();
  Control([&](SimState&, SimMachine& machine) {
    return machine.AddProcess(0, {4242, "trainer", 3072, gi_2g, ci});
  });
  const auto before = Instances();
  absl::StatusOr<ApplyResult> result = Apply("inference");
  ASSERT_FALSE(result.ok());
  const std::string message(result.status().message());
  EXPECT_NE(message.find("pid 4242 trainer"), std::string::npos) << message;
  EXPECT_NE(message.find("3.00 GiB"), std::string::npos) << message;
  EXPECT_NE(message.find("2g.20gb"), std::string::npos) << message;
  EXPECT_EQ(Instances(), before);  // nothing changed, on any GPU
  // With --force the process is terminated and the apply goes through.
  result = Apply("inference", /*force=*/true);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(Assert("inference").empty());
}

TEST_F(ApplyTest, BusyInstanceThatFitsTheNewLayoutIsKept) {
  ASSERT_TRUE(Apply("balanced").ok());
  std::unique_ptr<SimBackend> backend = Backend();
  int gi_3g = -1;
  for (const device::GpuInstanceInfo& gi : GpuInstances(*backend, 1)) {
    if (gi.profile_id == 9) gi_3g = gi.id;
  }
  const int ci = FirstCi(*backend, 1, gi_3g);
  backend.reset();
  Control([&](SimState&, SimMachine& machine) {
    return machine.AddProcess(1, {777, "server", 1024, gi_3g, ci});
  });
  absl::StatusOr<ApplyResult> result = Apply("inference");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(Assert("inference").empty());
}

TEST_F(ApplyTest, ComputeInstanceSplitsAndModeChanges) {
  ASSERT_TRUE(Apply("balanced").ok());
  absl::StatusOr<ApplyResult> result = Apply("split");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(Assert("split").empty());
  std::unique_ptr<SimBackend> backend = Backend();
  EXPECT_EQ((*backend->ListGpus())[1].mig_current, device::MigMode::kDisabled);
  int split_gis = 0;
  for (const device::GpuInstanceInfo& gi : GpuInstances(*backend, 0)) {
    if (backend->ListComputeInstances(0, gi.id)->size() == 3) ++split_gis;
  }
  EXPECT_EQ(split_gis, 1);
}

TEST_F(ApplyTest, PendingModeReportsWhatHoldsTheGpu) {
  Control(
      [](SimState&, SimMachine& machine) { return machine.AddHolder(2, "nvidia-persistenced"); });
  absl::StatusOr<ApplyResult> result = Apply("balanced");
  ASSERT_FALSE(result.ok());
  const std::string message(result.status().message());
  EXPECT_NE(message.find("pending"), std::string::npos) << message;
  EXPECT_NE(message.find("nvidia-persistenced"), std::string::npos) << message;
  Control([](SimState&, SimMachine& machine) {
    return machine.RemoveHolder(2, "nvidia-persistenced");
  });
  result = Apply("balanced");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(Assert("balanced").empty());
}

TEST_F(ApplyTest, RepairsAGpuInstanceLeftWithoutComputeInstances) {
  ASSERT_TRUE(Apply("balanced").ok());
  // Simulate a crash between creating a GI and its CI: remove one CI behind apply's back.
  Control([](SimState& state, SimMachine&) {
    state.gpus[0].gis[0].cis.clear();
    return 0;
  });
  EXPECT_FALSE(Assert("balanced").empty());
  absl::StatusOr<ApplyResult> result = Apply("balanced");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->plans[0].destroyed, 0);  // kept and completed, not rebuilt
  EXPECT_TRUE(Assert("balanced").empty());
}

TEST_F(ApplyTest, ExportReappliesAsNoOp) {
  ASSERT_TRUE(Apply("split").ok());
  std::unique_ptr<SimBackend> backend = Backend();
  absl::StatusOr<spec::MigConfigFile> exported =
      ExportConfig(*backend, Catalog(), "current", false);
  ASSERT_TRUE(exported.ok()) << exported.status();
  backend.reset();
  const std::string text = spec::WriteMigPartedConfig(*exported, spec::OutputFormat::kYaml);
  absl::StatusOr<spec::MigConfigFile> reparsed = spec::ParseMigPartedConfig(text, "export.yaml");
  ASSERT_TRUE(reparsed.ok()) << reparsed.status() << "\n" << text;
  file_ = *reparsed;
  const auto before = Instances();
  absl::StatusOr<ApplyResult> result = Apply("current");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->changed) << text;
  EXPECT_EQ(Instances(), before);
}

// Fails (or aborts) the apply at every call index in turn; the next apply must converge with no
// leaked instances, and an interrupted apply must be reported.
class FaultInjectionTest : public ApplyTest, public testing::WithParamInterface<bool> {};

TEST_P(FaultInjectionTest, NextApplyConvergesAfterAFailureAtEveryCall) {
  const bool abort_process = GetParam();
  // Start from "balanced" and apply "split": mode changes, destruction, creation and CI splits.
  ASSERT_TRUE(Apply("balanced").ok());
  const std::string start = path_ + ".start";
  std::filesystem::copy_file(path_, start);
  // Count the calls of a clean apply (a rule that never fires makes the simulator count).
  Control([](SimState& state, SimMachine&) {
    state.calls = 0;
    state.faults.push_back({0, "never-matches", device::kNvmlUnknown, false, 1});
    return 0;
  });
  ASSERT_TRUE(Apply("split").ok());
  std::int64_t total_calls = 0;
  Control([&](SimState& state, SimMachine&) {
    total_calls = state.calls;
    return 0;
  });
  ASSERT_GT(total_calls, 20);
  std::cout << "[ sweep    ] " << (abort_process ? "aborting" : "failing") << " at each of "
            << total_calls << " device calls of the apply\n";
  int interrupted_runs = 0;
  const std::int64_t step = 1;  // every call index, for both failures and aborts
  for (std::int64_t call = 1; call <= total_calls; call += step) {
    SCOPED_TRACE("fault at call " + std::to_string(call));
    std::filesystem::copy_file(start, path_, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::remove(path_ + ".journal");
    Control([&](SimState& state, SimMachine&) {
      state.calls = 0;
      state.faults = {{call, "", device::kNvmlUnknown, abort_process, 1}};
      return 0;
    });
    if (abort_process) {
      const pid_t child = fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        (void)Apply("split");
        _exit(0);  // the fault fired elsewhere (e.g. in a call the apply did not make)
      }
      int wait_status = 0;
      ASSERT_EQ(waitpid(child, &wait_status, 0), child);
      EXPECT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGABRT);
    } else {
      (void)Apply("split");  // may fail: the point is what the next run does
    }
    Control([](SimState& state, SimMachine&) {
      state.faults.clear();
      return 0;
    });
    // The journal says whether the broken apply had begun its steps without finishing them.
    std::string journal_text;
    if (std::ifstream journal(path_ + ".journal"); journal) {
      journal_text.assign(std::istreambuf_iterator<char>(journal),
                          std::istreambuf_iterator<char>());
    }
    const bool interrupted = journal_text.find("\"begin\"") != std::string::npos &&
                             journal_text.find("\"end\"") == std::string::npos;
    std::string log;
    absl::StatusOr<ApplyResult> result = Apply("split", false, &log);
    ASSERT_TRUE(result.ok()) << result.status() << "\n" << log;
    EXPECT_TRUE(Assert("split").empty());  // also: no leaked (unexpected) instances
    EXPECT_EQ(log.find("was interrupted") != std::string::npos, interrupted) << log;
    interrupted_runs += interrupted ? 1 : 0;
  }
  // The sweep must have hit calls inside the steps, not only the reads before them.
  if (abort_process) {
    EXPECT_GT(interrupted_runs, 3);
  }
}

INSTANTIATE_TEST_SUITE_P(FailOrAbort, FaultInjectionTest, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& param) {
                           return param.param ? "Abort" : "Fail";
                         });

}  // namespace
}  // namespace gpuslice::agent
