// Test helpers for the HTTP/JSON API tests that run a real alloc::Service on an SQLite file in a
// scratch directory, served by api::ApiServer on a free loopback port (port 0):
//   * Reply / CallRaw: one HTTP call with an optional bearer token and body; the status, the raw
//     text and the parsed JSON (discarded when the body is not JSON);
//   * Count: how many audit events have an action;
//   * ApiFixture: a gtest fixture base whose Open() opens the service on the same store file
//     (new or not: call Stop() then Open() to restart it) over a given inventory, and Start()
//     also makes the first admin, the tenant team-a with its user ann and an agent user.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <csignal>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "alloc/alloc_test_util.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/api/server.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/store/database.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api::testing {

// The server closes a connection right after an early error answer (a body over the limit is
// refused before it is read); the client's write then fails with EPIPE, which must not kill the
// test process. Done once, before main, in every test binary that includes this header.
inline const bool kSigpipeIgnored = (std::signal(SIGPIPE, SIG_IGN), true);

struct Reply {
  int status = 0;  // 0: no answer
  nlohmann::json body;
  std::string text;
};

inline Reply CallRaw(int port, const std::string& method, const std::string& path,
                     const std::string& token, const std::optional<std::string>& body) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(10);
  client.set_read_timeout(30);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  const std::string payload = body.value_or("");
  httplib::Result result = method == "GET"      ? client.Get(path, headers)
                           : method == "DELETE" ? client.Delete(path, headers)
                           : method == "PUT"
                               ? client.Put(path, headers, payload, "application/json")
                               : client.Post(path, headers, payload, "application/json");
  Reply reply;
  if (!result) return reply;
  reply.status = result->status;
  reply.text = result->body;
  reply.body = nlohmann::json::parse(result->body, nullptr, false);
  return reply;
}

inline int Count(const nlohmann::json& events, const std::string& action) {
  int n = 0;
  for (const nlohmann::json& e : events) {
    if (e.value("action", "") == action) ++n;
  }
  return n;
}

class ApiFixture : public ::testing::Test {
 protected:
  void TearDown() override { Stop(); }

  void Stop() {
    if (server_ != nullptr) server_->Stop();
    server_.reset();
    service_.reset();
  }

  // Opens the service on DIR/api.db (new or not) over `inventory` and serves it on a free port.
  void Open(place::Cluster inventory) {
    absl::StatusOr<std::unique_ptr<store::Database>> db =
        store::OpenSqlite(dir_.path() + "/api.db");
    ASSERT_TRUE(db.ok()) << db.status();
    alloc::ServiceOptions options;
    options.clock = clock_.Function();
    absl::StatusOr<std::unique_ptr<alloc::Service>> service =
        alloc::Service::Open(*std::move(db), std::move(inventory), std::move(options));
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    ServerOptions server_options;
    server_options.port = 0;
    server_options.metrics = metrics_;
    server_options.auth_clock_s = clock_.Function();  // failed-authentication windows too
    server_ = std::make_unique<ApiServer>(*service_, server_options);
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }

  // Open(), then the admin root (admin_), tenant team-a with its user ann (tenant_) and the agent
  // user agent-r1 (agent_), bound to machine r1.
  void Start(place::Cluster inventory) {
    ASSERT_NO_FATAL_FAILURE(Open(std::move(inventory)));
    absl::StatusOr<std::optional<std::string>> token = service_->BootstrapAdmin("root");
    ASSERT_TRUE(token.ok()) << token.status();
    ASSERT_TRUE(token->has_value());
    admin_ = **token;
    Reply put = Call("PUT", "/v1/tenants/team-a", admin_, nlohmann::json::object());
    ASSERT_EQ(put.status, 200) << put.text;
    tenant_ = User("ann", "team-a", "tenant");
    agent_ = User("agent-r1", "", "agent", "r1");
    ASSERT_FALSE(tenant_.empty());
    ASSERT_FALSE(agent_.empty());
  }

  // A new user's token ("" when refused).
  std::string User(const std::string& name, const std::string& tenant, const std::string& role,
                   const std::string& machine = "") {
    nlohmann::json body = {{"name", name}, {"role", role}};
    if (!tenant.empty()) body["tenant"] = tenant;
    if (!machine.empty()) body["machine"] = machine;
    Reply created = Call("POST", "/v1/users", admin_, body);
    EXPECT_EQ(created.status, 201) << created.text;
    if (created.status != 201) return "";
    return created.body["token"].get<std::string>();
  }

  Reply Call(const std::string& method, const std::string& path, const std::string& token,
             const std::optional<nlohmann::json>& body = std::nullopt) {
    return CallRaw(server_->port(), method, path, token,
                   body.has_value() ? std::optional<std::string>(body->dump()) : std::nullopt);
  }
  Reply CallText(const std::string& method, const std::string& path, const std::string& token,
                 const std::string& text) {
    return CallRaw(server_->port(), method, path, token, text);
  }

  // GET path (as the admin unless `token` is given), expecting 200; its `key` (an empty array
  // when missing).
  nlohmann::json Get(const std::string& path, const std::string& key,
                     const std::string& token = "") {
    Reply reply = Call("GET", path, token.empty() ? admin_ : token);
    EXPECT_EQ(reply.status, 200) << path << ": " << reply.text;
    if (reply.status != 200 || !reply.body.is_object() || !reply.body.contains(key)) {
      return nlohmann::json::array();
    }
    return reply.body[key];
  }
  nlohmann::json Audit() { return Get("/v1/audit?limit=100000", "events"); }

  alloc::testing::ScratchDir dir_;
  alloc::testing::FakeClock clock_;
  std::unique_ptr<alloc::Service> service_;
  std::unique_ptr<ApiServer> server_;
  // GET /metrics's families, when set before Open().
  std::function<absl::StatusOr<std::vector<metrics::Family>>()> metrics_;
  std::string admin_;
  std::string tenant_;
  std::string agent_;
};

}  // namespace gpuslice::api::testing
