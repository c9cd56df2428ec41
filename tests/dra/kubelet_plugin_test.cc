// The DRA driver's kubelet side (gpuslice/dra/kubelet_plugin.h) against a stand-in kubelet that
// speaks real gRPC on Unix sockets (dra/kubelet_dra_standin.h): registration, prepare and
// unprepare through v1 and v1beta1, the health streams, kubelet restarts and lost sockets; and our
// .proto files against ../shared/reference/kubernetes-dra.md §1-3.
#include "gpuslice/dra/kubelet_plugin.h"

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "dra/kubelet_dra_standin.h"
#include "dra_health_v1.grpc.pb.h"
#include "dra_health_v1alpha1.grpc.pb.h"
#include "dra_v1.grpc.pb.h"
#include "dra_v1beta1.grpc.pb.h"
#include "pluginregistration.grpc.pb.h"
#include "podresources_v1.pb.h"
#include "temp_dir.h"

namespace gpuslice::dra {
namespace {

namespace standin = gpuslice::dra::kubelet_standin;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kRegSocket[] = "gpu.gpuslice.io-reg.sock";

// A node driver for the tests: one device per claim, unless told to fail, forget or add one.
class FakeHandler final : public ClaimHandler {
 public:
  std::map<std::string, ClaimPrepareResult> Prepare(const std::vector<ClaimRef>& claims) override {
    std::map<std::string, ClaimPrepareResult> out;
    std::function<void()> hook;
    {
      std::lock_guard lock(mu);
      prepare_calls.push_back(claims);
      for (const ClaimRef& claim : claims) {
        if (forget.contains(claim.uid)) continue;
        if (errors.contains(claim.uid)) {
          out[claim.uid].error = errors[claim.uid];
          continue;
        }
        out[claim.uid].devices.push_back(DeviceFor(claim.uid));
      }
      if (!foreign.empty()) out[foreign].devices.push_back(DeviceFor(foreign));
      hook = during_prepare;
    }
    if (hook) hook();
    return out;
  }

  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims) override {
    std::lock_guard lock(mu);
    unprepare_calls.push_back(claims);
    std::map<std::string, std::string> out;
    for (const ClaimRef& claim : claims) {
      if (!forget.contains(claim.uid)) out[claim.uid] = errors.contains(claim.uid) ? "busy" : "";
    }
    if (!foreign.empty()) out[foreign] = "";
    return out;
  }

  std::vector<DeviceHealth> Health() override {
    std::lock_guard lock(mu);
    ++health_calls;
    return health;
  }

  PreparedDevice DeviceFor(const std::string& uid) {
    return PreparedDevice{{"gpu"}, "node-a", "gpu-0", {"gpuslice.io/gpu=" + uid}, share_ids[uid]};
  }
  void SetHealth(std::vector<DeviceHealth> list) {
    std::lock_guard lock(mu);
    health = std::move(list);
  }

  std::mutex mu;
  std::map<std::string, std::string> share_ids;
  std::map<std::string, std::string> errors;
  std::set<std::string> forget;
  std::string foreign;  // a UID answered without being asked
  std::function<void()> during_prepare;
  std::vector<DeviceHealth> health;
  std::vector<std::vector<ClaimRef>> prepare_calls;
  std::vector<std::vector<ClaimRef>> unprepare_calls;
  int health_calls = 0;
};

std::optional<std::uint64_t> Inode(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_ino);
}

class DraKubeletTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = dir_ / "reg";
    plugins_ = dir_ / "plugins";
    std::filesystem::create_directories(registry_);
  }
  void TearDown() override {
    StopRunner();
    kubelet_.reset();
    plugin_.reset();
  }

  KubeletPluginOptions Options() {
    KubeletPluginOptions options;
    options.registry_dir = registry_;
    options.plugin_dir = plugins_ + "/gpu.gpuslice.io";
    options.poll = 20ms;
    options.log = [this](const std::string& line) {
      std::lock_guard lock(log_mu_);
      log_.push_back(line);
    };
    options.on_registered = [this] { ++announced_; };
    return options;
  }
  void StartPlugin(KubeletPluginOptions options) {
    plugin_ = std::make_unique<KubeletPlugin>(handler_, std::move(options));
    ASSERT_TRUE(plugin_->Start().ok());
    runner_ = std::thread([this] { plugin_->Run(stop_); });
  }
  void StopRunner() {
    stop_ = true;
    if (runner_.joinable()) runner_.join();
  }
  void StartKubelet(standin::StandInOptions options = {}) {
    options.registry_dir = registry_;
    kubelet_ = std::make_unique<standin::KubeletDraStandIn>(std::move(options));
  }
  // Both sides saw `count` registrations.
  bool Registered(int count) {
    return standin::WaitUntil([&] {
      return kubelet_->registrations() >= count && plugin_->registrations() >= count &&
             announced_ >= count;
    });
  }
  bool Logged(const std::string& part) {
    std::lock_guard lock(log_mu_);
    for (const std::string& line : log_) {
      if (line.find(part) != std::string::npos) return true;
    }
    return false;
  }
  std::string DraSocket() const { return plugins_ + "/gpu.gpuslice.io/dra.sock"; }
  std::string RegSocket() const { return registry_ + "/" + kRegSocket; }

  TempDir dir_;
  std::string registry_;
  std::string plugins_;
  FakeHandler handler_;
  std::unique_ptr<KubeletPlugin> plugin_;
  std::unique_ptr<standin::KubeletDraStandIn> kubelet_;
  std::atomic<bool> stop_{false};
  std::thread runner_;
  std::atomic<int> announced_{0};
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

const std::vector<standin::StandInClaim> kTwoClaims = {{"team-a", "uid-1", "claim-1"},
                                                       {"team-a", "uid-2", "claim-2"}};

TEST_F(DraKubeletTest, RegistersWithTheInfoKubeletExpects) {
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  const std::optional<standin::SeenPlugin> seen = kubelet_->plugin();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->socket, RegSocket());
  EXPECT_EQ(seen->type, "DRAPlugin");
  EXPECT_EQ(seen->name, "gpu.gpuslice.io");
  EXPECT_EQ(seen->endpoint, DraSocket());
  EXPECT_TRUE(seen->endpoint.starts_with("/"));
  EXPECT_THAT(seen->supported_versions,
              ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                          "v1alpha1.DRAResourceHealth"));
  EXPECT_EQ(seen->dra_service, "v1.DRAPlugin");
  EXPECT_EQ(seen->health_service, "v1.DRAResourceHealth");
  EXPECT_EQ(plugin_->dra_socket_path(), DraSocket());
  EXPECT_EQ(plugin_->registration_socket_path(), RegSocket());
  EXPECT_EQ(plugin_->last_registration_error(), "");
  EXPECT_TRUE(kubelet_->refusals().empty());
}

TEST_F(DraKubeletTest, PreparesAndUnpreparesThroughV1WithShareIds) {
  handler_.share_ids["uid-1"] = "share-7";
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  const auto prepared = kubelet_->Prepare(kTwoClaims);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->size(), 2u);
  const standin::SeenClaim& first = prepared->at("uid-1");
  EXPECT_EQ(first.error, "");
  ASSERT_EQ(first.devices.size(), 1u);
  EXPECT_THAT(first.devices[0].request_names, ElementsAre("gpu"));
  EXPECT_EQ(first.devices[0].pool_name, "node-a");
  EXPECT_EQ(first.devices[0].device_name, "gpu-0");
  EXPECT_THAT(first.devices[0].cdi_device_ids, ElementsAre("gpuslice.io/gpu=uid-1"));
  EXPECT_EQ(first.devices[0].share_id, std::optional<std::string>("share-7"));
  ASSERT_EQ(prepared->at("uid-2").devices.size(), 1u);
  EXPECT_EQ(prepared->at("uid-2").devices[0].share_id, std::nullopt);
  {
    std::lock_guard lock(handler_.mu);
    ASSERT_EQ(handler_.prepare_calls.size(), 1u);
    EXPECT_EQ(handler_.prepare_calls[0], (std::vector<ClaimRef>{{"team-a", "uid-1", "claim-1"},
                                                                {"team-a", "uid-2", "claim-2"}}));
  }
  const auto unprepared = kubelet_->Unprepare(kTwoClaims);
  ASSERT_TRUE(unprepared.ok()) << unprepared.status();
  EXPECT_EQ(*unprepared, (std::map<std::string, std::string>{{"uid-1", ""}, {"uid-2", ""}}));
  std::lock_guard lock(handler_.mu);
  ASSERT_EQ(handler_.unprepare_calls.size(), 1u);
  EXPECT_EQ(handler_.unprepare_calls[0].size(), 2u);
}

TEST_F(DraKubeletTest, AV1beta1OnlyKubeletPreparesThroughV1beta1WithoutShareIds) {
  handler_.share_ids["uid-1"] = "share-7";
  StartPlugin(Options());
  standin::StandInOptions options;
  options.dra_services = {"v1beta1.DRAPlugin"};
  StartKubelet(options);
  ASSERT_TRUE(Registered(1));
  EXPECT_EQ(kubelet_->plugin()->dra_service, "v1beta1.DRAPlugin");
  const auto prepared = kubelet_->Prepare(kTwoClaims);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->at("uid-1").devices.size(), 1u);
  EXPECT_EQ(prepared->at("uid-1").devices[0].device_name, "gpu-0");
  EXPECT_EQ(prepared->at("uid-1").devices[0].share_id, std::nullopt);
  const auto unprepared = kubelet_->Unprepare(kTwoClaims);
  ASSERT_TRUE(unprepared.ok()) << unprepared.status();
  EXPECT_EQ(unprepared->size(), 2u);
  EXPECT_TRUE(Logged("v1beta1 NodePrepareResources: 2 claims, 0 failed"));
  EXPECT_TRUE(Logged("v1beta1 NodeUnprepareResources: 2 claims, 0 failed"));
}

TEST_F(DraKubeletTest, AnswersOneEntryPerClaimWhateverTheHandlerReturns) {
  handler_.forget = {"uid-2"};
  handler_.foreign = "uid-x";
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  // The stand-in fails the call when an entry is missing or foreign, as kubelet does.
  const auto prepared = kubelet_->Prepare(kTwoClaims);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->at("uid-1").error, "");
  EXPECT_EQ(prepared->at("uid-2").error, kNoAnswerError);
  EXPECT_TRUE(prepared->at("uid-2").devices.empty());
  const auto unprepared = kubelet_->Unprepare(kTwoClaims);
  ASSERT_TRUE(unprepared.ok()) << unprepared.status();
  EXPECT_EQ(unprepared->at("uid-1"), "");
  EXPECT_EQ(unprepared->at("uid-2"), kNoAnswerError);
  // A UID asked twice reaches the handler once and is answered once.
  handler_.foreign.clear();
  const auto twice = kubelet_->Prepare({kTwoClaims[0], kTwoClaims[0]});
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_EQ(twice->size(), 1u);
  std::lock_guard lock(handler_.mu);
  EXPECT_EQ(handler_.prepare_calls.back().size(), 1u);
  EXPECT_TRUE(Logged("dropped 1 answers for claims not asked"));
}

TEST_F(DraKubeletTest, IncompleteClaimReferencesGetPerClaimErrors) {
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  const auto prepared = kubelet_->Prepare(
      {{"team-a", "uid-1", "claim-1"}, {"", "uid-2", "claim-2"}, {"team-a", "uid-3", ""}});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->at("uid-1").error, "");
  EXPECT_THAT(prepared->at("uid-2").error, HasSubstr("incomplete claim reference"));
  EXPECT_THAT(prepared->at("uid-3").error, HasSubstr("incomplete claim reference"));
  {
    std::lock_guard lock(handler_.mu);
    ASSERT_EQ(handler_.prepare_calls.size(), 1u);
    EXPECT_EQ(handler_.prepare_calls[0], (std::vector<ClaimRef>{{"team-a", "uid-1", "claim-1"}}));
  }
  // Without a UID the entry's key is empty; the handler is not called at all.
  const auto unprepared = kubelet_->Unprepare({{"team-a", "", "claim-4"}});
  ASSERT_TRUE(unprepared.ok()) << unprepared.status();
  EXPECT_THAT(unprepared->at(""), HasSubstr("incomplete claim reference"));
  std::lock_guard lock(handler_.mu);
  EXPECT_TRUE(handler_.unprepare_calls.empty());
}

TEST_F(DraKubeletTest, HandlerErrorsReachKubeletPerClaim) {
  handler_.errors["uid-2"] = "claim is not allocated to this node";
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  const auto prepared = kubelet_->Prepare(kTwoClaims);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->at("uid-1").devices.size(), 1u);
  EXPECT_EQ(prepared->at("uid-2").error, "claim is not allocated to this node");
  EXPECT_TRUE(prepared->at("uid-2").devices.empty());
  const auto unprepared = kubelet_->Unprepare(kTwoClaims);
  ASSERT_TRUE(unprepared.ok()) << unprepared.status();
  EXPECT_EQ(unprepared->at("uid-2"), "busy");
}

// The handler is entered by two calls at once (the plugin holds no lock around it), and may call
// the plugin back.
TEST_F(DraKubeletTest, ConcurrentCallsReachTheHandlerTogether) {
  std::mutex gate_mu;
  std::condition_variable gate;
  int entered = 0;
  std::atomic<int> met{0};
  handler_.during_prepare = [&] {
    plugin_->HealthChanged();
    (void)plugin_->registrations();
    std::unique_lock lock(gate_mu);
    ++entered;
    gate.notify_all();
    if (gate.wait_for(lock, 20s, [&] { return entered >= 2; })) ++met;
  };
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  absl::StatusOr<std::map<std::string, standin::SeenClaim>> first, second;
  std::thread other([&] { first = kubelet_->Prepare({kTwoClaims[0]}); });
  second = kubelet_->Prepare({kTwoClaims[1]});
  other.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(met.load(), 2);
}

TEST_F(DraKubeletTest, HealthStreamSendsTheListAtOnceAndOnEveryChange) {
  const std::int64_t start = static_cast<std::int64_t>(std::time(nullptr));
  handler_.SetHealth({{"node-a", "gpu-0", HealthStatus::kHealthy, "ok"},
                      {"node-a", "gpu-1", HealthStatus::kUnhealthy, "XID 79"}});
  KubeletPluginOptions options = Options();
  options.health_resend = std::chrono::hours(1);  // only HealthChanged sends again here
  StartPlugin(options);
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  ASSERT_TRUE(standin::WaitUntil([&] { return kubelet_->health().size() == 2; }));
  const std::vector<standin::SeenHealth> first = kubelet_->health();
  EXPECT_EQ(first[0].pool_name, "node-a");
  EXPECT_EQ(first[0].device_name, "gpu-0");
  EXPECT_EQ(first[0].health, 1);
  EXPECT_EQ(first[0].message, "ok");
  EXPECT_GE(first[0].last_updated_time, start);
  EXPECT_EQ(first[0].health_check_timeout_seconds, 0);
  EXPECT_EQ(first[1].health, 2);
  EXPECT_EQ(first[1].message, "XID 79");
  const int messages = kubelet_->health_messages();

  handler_.SetHealth({{"node-a", "gpu-0", HealthStatus::kUnknown, ""}});
  plugin_->HealthChanged();
  ASSERT_TRUE(standin::WaitUntil([&] { return kubelet_->health().size() == 1; }));
  EXPECT_EQ(kubelet_->health()[0].health, 0);
  EXPECT_GT(kubelet_->health_messages(), messages);
}

TEST_F(DraKubeletTest, HealthIsResentWithoutChanges) {
  handler_.SetHealth({{"node-a", "gpu-0", HealthStatus::kHealthy, ""}});
  KubeletPluginOptions options = Options();
  options.health_resend = 30ms;
  StartPlugin(options);
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  ASSERT_TRUE(standin::WaitUntil([&] { return kubelet_->health_messages() >= 5; }));
  EXPECT_EQ(kubelet_->health().size(), 1u);
}

TEST_F(DraKubeletTest, AV1alpha1HealthKubeletGetsTheV1alpha1Stream) {
  handler_.SetHealth({{"node-a", "gpu-0", HealthStatus::kUnhealthy, "hot"}});
  StartPlugin(Options());
  standin::StandInOptions options;
  options.health_services = {"v1alpha1.DRAResourceHealth"};
  StartKubelet(options);
  ASSERT_TRUE(Registered(1));
  EXPECT_EQ(kubelet_->plugin()->health_service, "v1alpha1.DRAResourceHealth");
  ASSERT_TRUE(standin::WaitUntil([&] { return kubelet_->health().size() == 1; }));
  EXPECT_EQ(kubelet_->health()[0].health, 2);
  EXPECT_EQ(kubelet_->health()[0].message, "hot");
  EXPECT_TRUE(Logged("v1alpha1 health stream opened"));
  EXPECT_FALSE(Logged("v1 health stream opened"));
}

TEST_F(DraKubeletTest, LongHealthMessagesAreCutAsKubeletCutsThem) {
  std::string accented;
  for (int i = 0; i < 600; ++i) accented += "\xC3\xA9";  // 'é', two bytes
  handler_.SetHealth({{"node-a", "gpu-0", HealthStatus::kUnhealthy, std::string(2000, 'x')},
                      {"node-a", "gpu-1", HealthStatus::kUnhealthy, std::string(1024, 'y')},
                      {"node-a", "gpu-2", HealthStatus::kUnhealthy, accented}});
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  ASSERT_TRUE(standin::WaitUntil([&] { return kubelet_->health().size() == 3; }));
  const std::vector<standin::SeenHealth> seen = kubelet_->health();
  EXPECT_EQ(seen[0].message, std::string(1021, 'x') + "...");
  EXPECT_EQ(seen[1].message, std::string(1024, 'y'));
  // Cut at a character boundary: 510 whole characters, then "...".
  EXPECT_EQ(seen[2].message, accented.substr(0, 1020) + "...");
}

TEST_F(DraKubeletTest, AKubeletRestartRegistersThePluginAgain) {
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  const auto dra_inode = Inode(DraSocket());
  const auto reg_inode = Inode(RegSocket());
  kubelet_->Restart();
  ASSERT_TRUE(Registered(2));
  EXPECT_EQ(announced_.load(), 2);
  // Nothing was served again: kubelet found the sockets that were there.
  EXPECT_EQ(Inode(DraSocket()), dra_inode);
  EXPECT_EQ(Inode(RegSocket()), reg_inode);
  const auto prepared = kubelet_->Prepare(kTwoClaims);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
}

TEST_F(DraKubeletTest, ADeletedRegistrationSocketIsCreatedAgain) {
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  kubelet_->DeleteSocketFile(kRegSocket);
  ASSERT_TRUE(Registered(2));
  EXPECT_TRUE(Inode(RegSocket()).has_value());
  EXPECT_TRUE(Logged("is gone or replaced"));
  const auto prepared = kubelet_->Prepare(kTwoClaims);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
}

TEST_F(DraKubeletTest, ADeletedDraSocketIsServedAgainAndRegistered) {
  handler_.SetHealth({{"node-a", "gpu-0", HealthStatus::kHealthy, ""}});
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  std::filesystem::remove(DraSocket());
  ASSERT_TRUE(Registered(2));
  EXPECT_TRUE(Inode(DraSocket()).has_value());
  const auto prepared = kubelet_->Prepare(kTwoClaims);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(standin::WaitUntil([&] { return kubelet_->health().size() == 1; }));
}

TEST_F(DraKubeletTest, ARefusedRegistrationIsTriedAgainOnANewSocket) {
  StartKubelet();
  kubelet_->SetRefusal("test kubelet refuses");
  StartPlugin(Options());
  ASSERT_TRUE(standin::WaitUntil([&] { return kubelet_->refusals().size() >= 2; }));
  EXPECT_EQ(plugin_->last_registration_error(), "test kubelet refuses");
  EXPECT_TRUE(Logged("re-creating"));
  const int before = plugin_->registrations();
  kubelet_->SetRefusal("");
  ASSERT_TRUE(standin::WaitUntil([&] { return plugin_->registrations() > before; }));
  EXPECT_EQ(plugin_->last_registration_error(), "");
  ASSERT_TRUE(standin::WaitUntil([&] { return announced_ == plugin_->registrations(); }));
}

TEST_F(DraKubeletTest, StopEndsStreamsAndRemovesTheSockets) {
  handler_.SetHealth({{"node-a", "gpu-0", HealthStatus::kHealthy, ""}});
  StartPlugin(Options());
  StartKubelet();
  ASSERT_TRUE(Registered(1));
  ASSERT_TRUE(standin::WaitUntil([&] { return kubelet_->health_messages() >= 1; }));
  kubelet_->SetWatching(false);  // the stream must end from the plugin's side
  StopRunner();
  plugin_->Stop();
  EXPECT_FALSE(std::filesystem::exists(DraSocket()));
  EXPECT_FALSE(std::filesystem::exists(RegSocket()));
  ASSERT_TRUE(standin::WaitUntil([&] { return !kubelet_->health_ends().empty(); }));
  EXPECT_EQ(kubelet_->health_ends()[0], "OK");
  EXPECT_TRUE(kubelet_->health().empty());
  // A stopped plugin serves nothing again.
  EXPECT_FALSE(plugin_->Poll().ok());
  EXPECT_FALSE(std::filesystem::exists(RegSocket()));
  kubelet_->SetWatching(true);
  ASSERT_TRUE(standin::WaitUntil([&] { return !kubelet_->plugin().has_value(); }));
}

TEST_F(DraKubeletTest, StartReplacesStaleFilesAndRefusesBadSettings) {
  {
    std::ofstream stale(RegSocket());
    stale << "left over";
  }
  KubeletPlugin plugin(handler_, Options());
  ASSERT_TRUE(plugin.Start().ok());
  EXPECT_TRUE(Inode(RegSocket()).has_value());
  EXPECT_FALSE(plugin.Start().ok());  // already started
  plugin.Stop();

  KubeletPluginOptions long_dir = Options();
  long_dir.plugin_dir = dir_ / std::string(100, 'p');
  const absl::Status too_long = KubeletPlugin(handler_, long_dir).Start();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("108"));

  KubeletPluginOptions no_registry = Options();
  no_registry.registry_dir = dir_ / "missing";
  const absl::Status missing = KubeletPlugin(handler_, no_registry).Start();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.message(), HasSubstr(dir_ / "missing"));

  KubeletPluginOptions no_name = Options();
  no_name.driver_name = "";
  EXPECT_EQ(KubeletPlugin(handler_, no_name).Start().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DraKubeletOptionsTest, DefaultsAreKubeletsPaths) {
  const KubeletPluginOptions options;
  EXPECT_EQ(options.driver_name, "gpu.gpuslice.io");
  EXPECT_EQ(options.registry_dir, "/var/lib/kubelet/plugins_registry");
  EXPECT_EQ(options.plugin_dir, "");
  EXPECT_EQ(options.health_resend, std::chrono::seconds(10));
}

// Our .proto files against the reference's message tables (§1.2, §2.2, §3.2): every message,
// field and enum value listed exists with the same number, type and cardinality, and no other.
const std::string kReference = std::string(GPUSLICE_SHARED_DIR) + "/reference/kubernetes-dra.md";

struct WireRow {
  std::string message, field, type, number, label;
};

// The cells of a Markdown table line, trimmed and without surrounding backticks.
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells = absl::StrSplit(line, '|');
  if (cells.size() < 2) return {};
  cells.erase(cells.begin());
  cells.pop_back();
  for (std::string& cell : cells) {
    cell = std::string(absl::StripAsciiWhitespace(cell));
    if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') {
      cell = cell.substr(1, cell.size() - 2);
    }
  }
  return cells;
}

// The rows of the table headed "Message ..." in the section whose heading starts with `heading`;
// a blank message cell continues the message above.
std::vector<WireRow> MessageTable(const std::string& heading) {
  std::ifstream in(kReference);
  std::string line, message;
  bool in_section = false, in_table = false, wanted = false;
  std::vector<WireRow> rows;
  while (std::getline(in, line)) {
    if (line.starts_with("#")) {
      if (in_section) break;
      in_section = line.starts_with(heading);
      continue;
    }
    if (!in_section) continue;
    if (!line.starts_with("|")) {
      if (wanted && in_table) break;
      in_table = false;
      continue;
    }
    const std::vector<std::string> cells = Cells(line);
    if (!in_table) {  // the header row
      in_table = true;
      wanted = cells.size() == 5 && cells[0].starts_with("Message");
      continue;
    }
    if (!wanted || cells.size() != 5 || cells[0].starts_with("---")) continue;
    if (!cells[0].empty()) message = cells[0];
    rows.push_back(WireRow{message, cells[1], cells[2], cells[3], cells[4]});
  }
  return rows;
}

void CheckType(const google::protobuf::FieldDescriptor& field, const std::string& type) {
  using google::protobuf::FieldDescriptor;
  if (type.starts_with("map<")) {
    ASSERT_TRUE(field.is_map()) << field.full_name();
    const std::string value = type.substr(type.find(',') + 1, type.size() - type.find(',') - 2);
    EXPECT_EQ(field.message_type()->map_value()->message_type()->name(),
              absl::StripAsciiWhitespace(value))
        << field.full_name();
  } else if (type == "string" || type == "bool" || type == "int64") {
    EXPECT_STREQ(field.type_name(), type.c_str()) << field.full_name();
  } else if (field.type() == FieldDescriptor::TYPE_ENUM) {
    EXPECT_EQ(field.enum_type()->name(), type) << field.full_name();
  } else {
    ASSERT_EQ(field.type(), FieldDescriptor::TYPE_MESSAGE) << field.full_name();
    EXPECT_EQ(field.message_type()->name(), type) << field.full_name();
  }
}

void CheckLabel(const google::protobuf::FieldDescriptor& field, const std::string& label) {
  const bool repeated = label.starts_with("repeated");
  const bool optional = label.starts_with("optional") || label.starts_with("`optional`");
  EXPECT_EQ(field.is_repeated() && !field.is_map(), repeated) << field.full_name();
  EXPECT_EQ(field.has_optional_keyword(), optional) << field.full_name();
}

// Checks `rows` against the messages of `package`, leaving out fields named in `absent`
// ("Message.field").
void CheckPackage(const std::vector<WireRow>& rows, const std::string& package,
                  const std::set<std::string>& absent = {}) {
  const google::protobuf::DescriptorPool& pool =
      *google::protobuf::DescriptorPool::generated_pool();
  std::map<std::string, int> fields;  // message -> rows checked
  for (const WireRow& row : rows) {
    if (row.message.starts_with("enum ")) {
      const auto* type = pool.FindEnumTypeByName(package + "." + row.message.substr(5));
      ASSERT_NE(type, nullptr) << package << " " << row.message;
      const auto* value = type->FindValueByName(row.field);
      ASSERT_NE(value, nullptr) << package << " " << row.message << " " << row.field;
      EXPECT_EQ(value->number(), std::stoi(row.number)) << value->full_name();
      continue;
    }
    const auto* message = pool.FindMessageTypeByName(package + "." + row.message);
    ASSERT_NE(message, nullptr) << package << "." << row.message;
    fields[row.message] += 0;
    if (row.field.starts_with("\u2014")) continue;  // "— (empty)"
    if (absent.contains(row.message + "." + row.field)) {
      EXPECT_EQ(message->FindFieldByName(row.field), nullptr) << package << "." << row.field;
      continue;
    }
    const auto* field = message->FindFieldByName(row.field);
    ASSERT_NE(field, nullptr) << message->full_name() << "." << row.field;
    EXPECT_EQ(field->number(), std::stoi(row.number)) << field->full_name();
    CheckType(*field, row.type);
    CheckLabel(*field, row.label);
    ++fields[row.message];
  }
  for (const auto& [name, count] : fields) {
    EXPECT_EQ(pool.FindMessageTypeByName(package + "." + name)->field_count(), count)
        << package << "." << name << " has fields the reference does not list";
  }
}

TEST(DraProtoTest, MessagesMatchTheReferenceTables) {
  // Referenced here so that every generated file is linked in.
  ASSERT_NE(::pluginregistration::PluginInfo::descriptor(), nullptr);
  ASSERT_NE(::k8s::io::kubelet::pkg::apis::dra::v1::Device::descriptor(), nullptr);
  ASSERT_NE(::k8s::io::kubelet::pkg::apis::dra::v1beta1::Device::descriptor(), nullptr);
  ASSERT_NE(::v1::DeviceHealth::descriptor(), nullptr);
  ASSERT_NE(::v1alpha1::DeviceHealth::descriptor(), nullptr);

  const std::vector<WireRow> registration = MessageTable("### 1.2 ");
  ASSERT_EQ(registration.size(), 8u);
  CheckPackage(registration, "pluginregistration");
  const std::vector<WireRow> dra = MessageTable("### 2.2 ");
  ASSERT_EQ(dra.size(), 15u);
  CheckPackage(dra, "k8s.io.kubelet.pkg.apis.dra.v1");
  CheckPackage(dra, "k8s.io.kubelet.pkg.apis.dra.v1beta1", {"Device.share_id"});
  const std::vector<WireRow> health = MessageTable("### 3.2 ");
  ASSERT_EQ(health.size(), 12u);
  CheckPackage(health, "v1");
  CheckPackage(health, "v1alpha1");
}

TEST(DraProtoTest, ServiceNamesAreTheOnesKubeletCalls) {
  EXPECT_STREQ(::pluginregistration::Registration::service_full_name(),
               "pluginregistration.Registration");
  EXPECT_STREQ(::k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin::service_full_name(),
               "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin");
  EXPECT_STREQ(::k8s::io::kubelet::pkg::apis::dra::v1beta1::DRAPlugin::service_full_name(),
               "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin");
  EXPECT_STREQ(::v1::DRAResourceHealth::service_full_name(), "v1.DRAResourceHealth");
  EXPECT_STREQ(::v1alpha1::DRAResourceHealth::service_full_name(), "v1alpha1.DRAResourceHealth");
  // Pod-resources shares the package v1: both files load into one descriptor pool.
  EXPECT_EQ(::v1::DeviceHealth::descriptor()->file()->name(), "dra_health_v1.proto");
  EXPECT_EQ(::v1::ListPodResourcesRequest::descriptor()->file()->name(), "podresources_v1.proto");
}

}  // namespace
}  // namespace gpuslice::dra
