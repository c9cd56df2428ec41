// Alerts end to end, with the built binary: `gpuslice serve --alert-webhook URL` on loopback and
// `gpuslice agent` on a simulated H100 kept in a state file. A lease lands on the agent's machine;
// then the simulator is made to misbehave (`gpuslice sim xid`, a process filling the slice and
// ending, `gpuslice sim lost`). Each alert reaches the webhook receiver (firing, then resolved),
// GET /v1/alerts (with the lease and tenant; the tenant's user sees it), the audit, and serve's
// /metrics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli/serve_process.h"
#include "cli/webhook_receiver.h"
#include "nlohmann/json.hpp"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif

namespace {

using gpuslice::cli::testing::FirstLine;
using gpuslice::cli::testing::FreshDir;
using gpuslice::cli::testing::GetJson;
using gpuslice::cli::testing::GpusliceProcess;
using gpuslice::cli::testing::HttpGet;
using gpuslice::cli::testing::PickPort;
using gpuslice::cli::testing::ReadFile;
using gpuslice::cli::testing::ServeArgs;
using gpuslice::cli::testing::ServeFixture;
using gpuslice::cli::testing::WaitUntil;
using nlohmann::json;
using ::testing::HasSubstr;

gpuslice::cli::testing::CommandResult Gpuslice(const std::string& args) {
  return gpuslice::cli::testing::RunGpuslice(args, true);
}

// The webhook's receiver, with the alerts it was sent.
class Receiver : public gpuslice::cli::testing::WebhookReceiver {
 public:
  // The first post with this status and alert kind (null json when none).
  json Find(const std::string& status, const std::string& kind) {
    for (const std::string& body : bodies()) {
      const json post = json::parse(body, nullptr, false);
      if (post.is_object() && post["status"] == status && post["alert"]["kind"] == kind) {
        return post;
      }
    }
    return json();
  }
  std::string All() {
    std::string out;
    for (const std::string& body : bodies()) out += body + "\n";
    return out;
  }
};

class AlertsCliTest : public ServeFixture {
 protected:
  void SetUp() override {
    // serve on a simulated A100 (filled by a lease below), with the webhook.
    dir_ = FreshDir("gpuslice_alerts_cli_" +
                    std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    port_ = PickPort(91);
    ASSERT_GT(port_, 0);
    url_ = "http://127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> args = ServeArgs("1xA100-80GB", dir_, port_);
    args.push_back("--alert-webhook");
    args.push_back(receiver_.url());
    server_.Start(args, dir_ + "/serve.log");
    ASSERT_TRUE(server_.WaitHealthy(port_)) << server_.Output();
    admin_token_ = FirstLine(ReadFile(dir_ + "/t"));
    ASSERT_THAT(admin_token_, HasSubstr("gs_"));
    server_env_ = std::make_unique<gpuslice::cli::testing::ScopedEnv>("GPUSLICE_SERVER", url_);
    token_env_ =
        std::make_unique<gpuslice::cli::testing::ScopedEnv>("GPUSLICE_TOKEN", admin_token_);
    ASSERT_NO_FATAL_FAILURE(AddTeamA());
    ASSERT_NO_FATAL_FAILURE(AddUser("agent-r1 --agent --machine r1", &agent_token_));

    // The agent's machine: an H100 in MIG mode without instances.
    state_ = dir_ + "/machine.json";
    ASSERT_EQ(Gpuslice("sim create " + state_ + " 1xH100-80GB").exit_code, 0);
    const std::string config = dir_ + "/mig.yaml";
    {
      std::ofstream out(config);
      out << "version: v1\nmig-configs:\n  on:\n    - devices: all\n      mig-enabled: true\n"
             "      mig-devices: {}\n";
    }
    gpuslice::cli::testing::CommandResult on =
        Gpuslice("apply --sim " + state_ + " -f " + config + " -c on");
    ASSERT_EQ(on.exit_code, 0) << on.output;
    // The A100 is taken whole before r1 exists, so ann's small slice goes to r1.
    token_env_->Set(ann_token_);
    json fill = Json("acquire --profile 7g.80gb --purpose fill --no-wait");
    ASSERT_TRUE(fill.contains("lease")) << fill.dump();
    token_env_->Set(admin_token_);
    agent_.Start({"agent", "--server", url_, "--token", agent_token_, "--host", "r1", "--sim-state",
                  state_, "--interval", "1"},
                 dir_ + "/agent.log");
    ASSERT_TRUE(WaitUntil([&] { return agent_.Output().find("reported") != std::string::npos; },
                          std::chrono::seconds(15)))
        << agent_.Output();
    token_env_->Set(ann_token_);
    json lease = Json("acquire --class small --purpose notebook --no-wait");
    ASSERT_TRUE(lease.contains("lease")) << lease.dump();
    lease_ = lease["lease"]["id"].get<std::int64_t>();
    ASSERT_THAT(lease["lease"]["node"].get<std::string>(), ::testing::StartsWith("r1/"));
    token_env_->Set(admin_token_);
    // Wait until the agent has set it up: its GPU instance.
    ASSERT_TRUE(WaitUntil(
        [&] {
          json leases = Json("leases --all");
          for (const json& l : leases["leases"]) {
            if (l["id"] == lease_ && l.contains("bound") && !l["bound"].empty()) {
              gi_ = l["bound"][0]["gi"].get<int>();
              mig_uuid_ = l["bound"][0]["uuid"].get<std::string>();
              return true;
            }
          }
          return false;
        },
        std::chrono::seconds(20)))
        << agent_.Output();
  }

  void TearDown() override {
    agent_.Kill();
    ServeFixture::TearDown();
  }

  json Alerts(const std::string& token) { return GetJson(port_, "/v1/alerts", token); }
  // Waits (at most 20 s) for the webhook to receive `status` of an alert of `kind`.
  json WaitPost(const std::string& status, const std::string& kind) {
    json found;
    WaitUntil(
        [&] {
          found = receiver_.Find(status, kind);
          return !found.is_null();
        },
        std::chrono::seconds(20));
    EXPECT_FALSE(found.is_null()) << status << " " << kind << "\nreceived:\n"
                                  << receiver_.All() << "\nagent:\n"
                                  << agent_.Output();
    return found;
  }

  Receiver receiver_;
  GpusliceProcess agent_;
  std::string agent_token_;
  std::string state_;
  std::int64_t lease_ = 0;
  int gi_ = -1;
  std::string mig_uuid_;
};

TEST_F(AlertsCliTest, AnXidOnALeasedInstanceReachesTheWebhookTheApiTheAuditAndMetrics) {
  ASSERT_EQ(Gpuslice("sim xid " + state_ + " --gpu 0 48 --gi " + std::to_string(gi_) + " --ci 0")
                .exit_code,
            0);
  const json post = WaitPost("firing", "xid");
  ASSERT_TRUE(post.is_object());
  const json& alert = post["alert"];
  EXPECT_EQ(alert["host"], "r1");
  EXPECT_EQ(alert["severity"], "critical");
  EXPECT_EQ(alert["lease"], lease_);
  EXPECT_EQ(alert["tenant"], "team-a");
  EXPECT_EQ(alert["class"], "small");
  EXPECT_EQ(alert["device"], mig_uuid_);
  EXPECT_THAT(alert["message"].get<std::string>(),
              HasSubstr("Xid 48 on GPU 0 GI " + std::to_string(gi_)));
  // The API: active for the admin, and for ann (her tenant's lease).
  json active = Alerts(admin_token_)["active"];
  ASSERT_EQ(active.size(), 1u) << active.dump();
  EXPECT_EQ(active[0]["kind"], "xid");
  EXPECT_EQ(Alerts(ann_token_)["active"].size(), 1u);
  // The audit.
  json audit = Json("audit");
  int fires = 0;
  for (const json& e : audit["events"]) fires += e["action"] == "alert.fire" ? 1 : 0;
  EXPECT_EQ(fires, 1);
  // serve's /metrics: the machine's active alerts by kind.
  const std::string text = HttpGet(port_, "/metrics", admin_token_);
  EXPECT_THAT(text,
              HasSubstr("gpuslice_alerts{kind=\"xid\",severity=\"critical\",Hostname=\"r1\"} 1"));
}

TEST_F(AlertsCliTest, AProcessFillingItsSliceThenEndingIsMemoryHighThenOutOfMemory) {
  // 9800 of the 1g.10gb's 9984 MiB.
  ASSERT_EQ(Gpuslice("sim process add " + state_ + " --gpu 0 --gi " + std::to_string(gi_) +
                     " --ci 0 --pid 4242 --memory 9800 --name trainer")
                .exit_code,
            0);
  const json high = WaitPost("firing", "memory_high");
  ASSERT_TRUE(high.is_object());
  EXPECT_EQ(high["alert"]["lease"], lease_);
  EXPECT_THAT(high["alert"]["message"].get<std::string>(), HasSubstr("98%"));
  ASSERT_EQ(Gpuslice("sim process remove " + state_ + " 4242").exit_code, 0);
  const json oom = WaitPost("firing", "out_of_memory");
  ASSERT_TRUE(oom.is_object());
  EXPECT_THAT(oom["alert"]["message"].get<std::string>(),
              HasSubstr("process 4242 (trainer) on GPU 0 GI " + std::to_string(gi_) + " ended"));
  EXPECT_TRUE(WaitPost("resolved", "memory_high").is_object());
  json recent = Alerts(admin_token_)["recent"];
  ASSERT_FALSE(recent.empty());
  EXPECT_EQ(recent[0]["kind"], "memory_high");
}

TEST_F(AlertsCliTest, ALostGpuAlertsAndClearsWhenItIsBack) {
  ASSERT_EQ(Gpuslice("sim lost " + state_ + " --gpu 0 on").exit_code, 0);
  const json lost = WaitPost("firing", "gpu_lost");
  ASSERT_TRUE(lost.is_object());
  EXPECT_THAT(lost["alert"]["message"].get<std::string>(), HasSubstr("GPU_IS_LOST"));
  ASSERT_EQ(Gpuslice("sim lost " + state_ + " --gpu 0 off").exit_code, 0);
  EXPECT_TRUE(WaitPost("resolved", "gpu_lost").is_object());
}

}  // namespace
