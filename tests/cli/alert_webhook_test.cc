// serve's alert webhook (gpuslice/server/alert_webhook.h): alerts are posted as JSON to a receiver
// on loopback, in order, from their own thread; a receiver that keeps failing is tried three times
// and counted as failed; URLs that are not http(s)://host[:port][/path] are refused.
#include "gpuslice/server/alert_webhook.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli/webhook_receiver.h"
#include "nlohmann/json.hpp"

namespace gpuslice::cli {
namespace {

using ::testing::HasSubstr;

using Receiver = testing::WebhookReceiver;
using server::AlertWebhook;

metrics::Alert Xid() {
  metrics::Alert a;
  a.key = "xid/MIG-1/48/1";
  a.kind = "xid";
  a.severity = "critical";
  a.host = "node-a";
  a.gpu = 0;
  a.gi = 9;
  a.lease = 12;
  a.tenant = "team-a";
  a.message = "Xid 48 on GPU 0 GI 9";
  a.since = 1000;
  return a;
}

TEST(AlertWebhookTest, PostsFiringAndResolvedInOrder) {
  Receiver receiver(200);
  absl::StatusOr<std::unique_ptr<AlertWebhook>> hook =
      AlertWebhook::Start("http://127.0.0.1:" + std::to_string(receiver.port()) + "/hook");
  ASSERT_TRUE(hook.ok()) << hook.status();
  metrics::Alert alert = Xid();
  (*hook)->Send(alert, true);
  alert.cleared = 1300;
  (*hook)->Send(alert, false);
  ASSERT_TRUE(receiver.WaitFor(2));
  const std::vector<std::string> bodies = receiver.bodies();
  const nlohmann::json first = nlohmann::json::parse(bodies[0]);
  const nlohmann::json second = nlohmann::json::parse(bodies[1]);
  EXPECT_EQ(first["status"], "firing");
  EXPECT_EQ(first["alert"]["message"], "Xid 48 on GPU 0 GI 9");
  EXPECT_EQ(first["alert"]["tenant"], "team-a");
  EXPECT_EQ(first["alert"]["gi"], 9);
  EXPECT_EQ(second["status"], "resolved");
  EXPECT_EQ(second["alert"]["cleared"], 1300);
  for (int i = 0; i < 100 && (*hook)->delivered() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ((*hook)->delivered(), 2);
  EXPECT_EQ((*hook)->failed(), 0);
}

TEST(AlertWebhookTest, AFailingReceiverIsTriedThreeTimesThenCounted) {
  Receiver receiver(500);
  absl::StatusOr<std::unique_ptr<AlertWebhook>> hook =
      AlertWebhook::Start("http://127.0.0.1:" + std::to_string(receiver.port()) + "/hook");
  ASSERT_TRUE(hook.ok()) << hook.status();
  (*hook)->Send(Xid(), true);
  ASSERT_TRUE(receiver.WaitFor(3));
  for (int i = 0; i < 100 && (*hook)->failed() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ((*hook)->failed(), 1);
  EXPECT_EQ((*hook)->delivered(), 0);
  EXPECT_EQ(receiver.bodies().size(), 3u);
}

TEST(AlertWebhookTest, RefusesWhatIsNotAnHttpUrl) {
  for (const std::string url :
       {"", "127.0.0.1:9000", "ftp://host/x", "http://", "http://a b/", "http://host:port/"}) {
    absl::StatusOr<std::unique_ptr<AlertWebhook>> hook = AlertWebhook::Start(url);
    ASSERT_FALSE(hook.ok()) << url;
    EXPECT_THAT(std::string(hook.status().message()), HasSubstr("--alert-webhook")) << url;
  }
  EXPECT_TRUE(AlertWebhook::Start("http://[::1]:9/x").ok());
  EXPECT_TRUE(AlertWebhook::Start("http://hooks.example:8080").ok());
}

}  // namespace
}  // namespace gpuslice::cli
