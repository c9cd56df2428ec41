// The HTTP/JSON API (gpuslice/api/server.h) end to end: an ApiServer on a free loopback port over a
// Service on an SQLite file per test with a clock the test moves, driven with httplib::Client.
// Health without a token, 401 without or with a wrong token, 403 for tenants on admin endpoints,
// the lease lifecycle (grant, queue, refuse, release hands the slot to the queue, renew, cancel,
// audit), tenant isolation, bad input that changes nothing, tokens that never leak into the audit
// or errors, many concurrent HTTP clients, and stopping.
#include "gpuslice/api/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/alloc_test_util.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/store/database.h"
#include "nlohmann/json.hpp"
#include "place/place_test_util.h"

namespace gpuslice::api {
namespace {

using alloc::testing::FakeClock;
using alloc::testing::MigA100;
using alloc::testing::Overcommit;
using alloc::testing::ScratchDir;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// What one HTTP call answered. `status` is 0 when there was no answer (`error` says why).
struct Reply {
  int status = 0;
  json body;
  std::string text;
  std::string content_type;
  std::string error;
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Calls `method path` on 127.0.0.1:port with `headers` and, for POST/PUT/DELETE, `body`.
Reply CallRaw(int port, const std::string& method, const std::string& path,
              const httplib::Headers& headers, const std::optional<std::string>& body) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(10);
  client.set_read_timeout(60);
  client.set_write_timeout(60);
  const std::string payload = body.value_or("");
  if (method != "GET" && method != "DELETE" && method != "PUT" && method != "POST") {
    ADD_FAILURE() << "unknown method " << method;
    return {};
  }
  httplib::Result result =
      method == "GET" ? client.Get(path, headers)
      : method == "DELETE"
          ? (body.has_value() ? client.Delete(path, headers, payload, "application/json")
                              : client.Delete(path, headers))
      : method == "PUT" ? client.Put(path, headers, payload, "application/json")
                        : client.Post(path, headers, payload, "application/json");
  Reply reply;
  if (!result) {
    reply.error = httplib::to_string(result.error());
    return reply;
  }
  reply.status = result->status;
  reply.text = result->body;
  reply.content_type = result->get_header_value("Content-Type");
  reply.body = json::parse(result->body, nullptr, false);
  return reply;
}

httplib::Headers Bearer(const std::string& token) {
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  return headers;
}

// An error reply: a JSON object with a non-empty string "error".
bool IsError(const Reply& reply) {
  return reply.body.is_object() && reply.body.contains("error") &&
         reply.body["error"].is_string() && !reply.body["error"].get<std::string>().empty();
}

int Count(const json& events, const std::string& action) {
  int n = 0;
  for (const json& e : events) {
    if (e["action"] == action) ++n;
  }
  return n;
}

class ApiTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
  }

  std::string DbPath() const { return dir_.path() + "/api.db"; }

  // Opens the service on `nodes`, makes the first admin and starts the server on a free port.
  void Start(std::vector<place::NodeSpec> nodes = {MigA100("n1", 2)}) {
    nodes_ = std::move(nodes);
    absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenSqlite(DbPath());
    ASSERT_TRUE(db.ok()) << db.status();
    alloc::ServiceOptions options;
    options.clock = clock_.Function();
    absl::StatusOr<std::unique_ptr<alloc::Service>> service = alloc::Service::Open(
        *std::move(db), place::testing::MakeCluster(nodes_), std::move(options));
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    absl::StatusOr<std::optional<std::string>> token = service_->BootstrapAdmin("root");
    ASSERT_TRUE(token.ok()) << token.status();
    ASSERT_TRUE(token->has_value());
    admin_token_ = **token;
    absl::StatusOr<alloc::Caller> admin = service_->Authenticate(admin_token_);
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *admin;
    ServerOptions server_options;
    server_options.port = 0;
    server_options.auth_clock_s = clock_.Function();
    server_ = std::make_unique<ApiServer>(*service_, server_options);
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_GT(server_->port(), 0);
  }

  Reply Call(const std::string& method, const std::string& path, const std::string& token,
             const std::optional<std::string>& body = std::nullopt) {
    return CallRaw(server_->port(), method, path, Bearer(token), body);
  }
  Reply Call(const std::string& method, const std::string& path, const std::string& token,
             const json& body) {
    return Call(method, path, token, std::optional<std::string>(body.dump()));
  }

  // PUT /v1/tenants/NAME and POST /v1/users as the admin; returns the user's token.
  std::string AddTenant(const std::string& tenant, const std::string& user,
                        const json& spec = json::object()) {
    Reply put = Call("PUT", "/v1/tenants/" + tenant, admin_token_, spec);
    EXPECT_EQ(put.status, 200) << put.text;
    return AddUser(tenant, user);
  }
  std::string AddUser(const std::string& tenant, const std::string& user) {
    Reply created = Call("POST", "/v1/users", admin_token_,
                         json{{"name", user}, {"tenant", tenant}, {"role", "tenant"}});
    EXPECT_EQ(created.status, 201) << created.text;
    if (created.status != 201 || !created.body.contains("token")) return "";
    EXPECT_EQ(created.body["name"], user);
    EXPECT_EQ(created.body["tenant"], tenant);
    EXPECT_EQ(created.body["role"], "tenant");
    return created.body["token"].get<std::string>();
  }

  Reply Acquire(const std::string& token, const json& body) {
    return Call("POST", "/v1/leases", token, body);
  }
  json Small(const std::string& purpose, bool wait = true) {
    return json{{"class", "small"}, {"purpose", purpose}, {"wait", wait}};
  }

  json Get(const std::string& path, const std::string& token, const std::string& key) {
    Reply reply = Call("GET", path, token);
    EXPECT_EQ(reply.status, 200) << path << ": " << reply.text;
    if (reply.status != 200 || !reply.body.is_object() || !reply.body.contains(key)) {
      return json::array();
    }
    return reply.body[key];
  }
  json Leases(const std::string& token, bool all = false) {
    return Get(all ? "/v1/leases?all=true" : "/v1/leases", token, "leases");
  }
  json Queue(const std::string& token) { return Get("/v1/queue", token, "queue"); }
  json Audit(const std::string& token, const std::string& query = "") {
    return Get("/v1/audit?limit=100000" + query, token, "events");
  }

  // Everything a request could change, as the admin sees it through the API.
  json Snapshot() {
    return json{{"active", Leases(admin_token_)},
                {"all", Leases(admin_token_, true)},
                {"queue", Queue(admin_token_)},
                {"tenants", Get("/v1/tenants", admin_token_, "tenants")},
                {"classes", Get("/v1/classes", admin_token_, "classes")},
                {"audit", WithoutFailedAuthentications(Audit(admin_token_))}};
  }

  // The audit less `auth.fail` and `auth.limit`, which refused requests add by design.
  static json WithoutFailedAuthentications(const json& events) {
    json kept = json::array();
    for (const json& e : events) {
      if (e.value("action", "").rfind("auth.", 0) != 0) kept.push_back(e);
    }
    return kept;
  }

  // Expects Snapshot() to equal `before`; names only the parts that changed.
  void ExpectUnchanged(const json& before, const std::string& what = "") {
    const json now = Snapshot();
    for (const auto& [key, value] : before.items()) {
      if (now[key] != value) {
        ADD_FAILURE() << what << (what.empty() ? "" : ": ") << key
                      << " changed\nbefore: " << value.dump().substr(0, 1500)
                      << "\nafter:  " << now[key].dump().substr(0, 1500);
      }
    }
  }

  ScratchDir dir_;
  FakeClock clock_;
  std::vector<place::NodeSpec> nodes_;
  std::unique_ptr<alloc::Service> service_;
  std::unique_ptr<ApiServer> server_;
  alloc::Caller admin_;
  std::string admin_token_;
};

TEST_F(ApiTest, HealthNeedsNoTokenAndCountsGpus) {
  Start({MigA100("n1", 2), MigA100("n2", 1)});
  for (const std::string& token : {std::string(), std::string("not-a-token"), admin_token_}) {
    Reply reply = Call("GET", "/v1/health", token);
    ASSERT_EQ(reply.status, 200) << reply.text;
    ASSERT_TRUE(reply.body.is_object()) << reply.text;
    EXPECT_EQ(reply.body["status"], "ok");
    EXPECT_EQ(reply.body["store"], "sqlite");
    EXPECT_EQ(reply.body["gpus"], 3);
  }
}

TEST_F(ApiTest, EveryOtherEndpointNeedsAValidToken) {
  Start();
  const std::string tenant_token = AddTenant("team-a", "ann");
  Reply granted = Acquire(tenant_token, Small("p"));
  ASSERT_EQ(granted.status, 201) << granted.text;
  const std::string id = std::to_string(granted.body["lease"]["id"].get<std::int64_t>());
  const json before = Snapshot();

  struct Endpoint {
    std::string method, path;
    std::optional<std::string> body;
  };
  const std::vector<Endpoint> endpoints = {
      {"GET", "/v1/inventory", std::nullopt},
      {"GET", "/v1/classes", std::nullopt},
      {"PUT", "/v1/classes/x", R"({"full": true})"},
      {"DELETE", "/v1/classes/small", std::nullopt},
      {"GET", "/v1/tenants", std::nullopt},
      {"PUT", "/v1/tenants/x", "{}"},
      {"DELETE", "/v1/tenants/team-a", std::nullopt},
      {"POST", "/v1/users", R"({"name": "eve", "role": "admin"})"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": "p"})"},
      {"GET", "/v1/leases", std::nullopt},
      {"GET", "/v1/leases?all=true", std::nullopt},
      {"GET", "/v1/leases/" + id, std::nullopt},
      {"POST", "/v1/leases/" + id + "/renew", R"({"ttl_s": 60})"},
      {"DELETE", "/v1/leases/" + id, std::nullopt},
      {"GET", "/v1/queue", std::nullopt},
      {"DELETE", "/v1/queue/1", std::nullopt},
      {"GET", "/v1/audit", std::nullopt},
  };
  std::vector<std::pair<std::string, httplib::Headers>> bad_credentials;
  bad_credentials.emplace_back("no header", httplib::Headers{});
  bad_credentials.emplace_back("wrong token", Bearer("gs_0123456789abcdef"));
  bad_credentials.emplace_back("empty bearer", httplib::Headers{{"Authorization", "Bearer "}});
  bad_credentials.emplace_back("token with a suffix", Bearer(admin_token_ + "x"));
  bad_credentials.emplace_back("not bearer",
                               httplib::Headers{{"Authorization", "Basic " + admin_token_}});
  bad_credentials.emplace_back("bare token", httplib::Headers{{"Authorization", admin_token_}});
  for (const Endpoint& endpoint : endpoints) {
    // Two of the six count as failed authentications: a minute later the source starts afresh,
    // below the limit of ten (tests/api/tokens_api_test.cc tests the limit).
    clock_.Advance(60);
    for (const auto& [what, headers] : bad_credentials) {
      Reply reply =
          CallRaw(server_->port(), endpoint.method, endpoint.path, headers, endpoint.body);
      EXPECT_EQ(reply.status, 401)
          << endpoint.method << " " << endpoint.path << " with " << what << ": " << reply.text;
      EXPECT_TRUE(IsError(reply)) << endpoint.method << " " << endpoint.path << ": " << reply.text;
      EXPECT_THAT(reply.text, Not(HasSubstr(admin_token_)));
    }
  }
  ExpectUnchanged(before);
  // Every wrong or extended bearer token was audited (no header, an empty bearer, which arrives
  // as "Bearer" with its space trimmed, Basic and a bare token are not tries of a token).
  int failures = 0;
  for (const json& e : Audit(admin_token_)) failures += e["action"] == "auth.fail" ? 1 : 0;
  EXPECT_EQ(failures, 2 * static_cast<int>(endpoints.size()));
}

TEST_F(ApiTest, TenantTokenIsForbiddenOnAdminEndpoints) {
  Start();
  const std::string tenant_token = AddTenant("team-a", "ann");
  const json before = Snapshot();
  struct Case {
    std::string method, path;
    std::optional<std::string> body;
  };
  for (const Case& c : std::vector<Case>{
           {"PUT", "/v1/tenants/x", "{}"},
           {"PUT", "/v1/tenants/team-a", R"({"max_slices": {"small": 100}})"},
           {"DELETE", "/v1/tenants/team-a", std::nullopt},
           {"PUT", "/v1/classes/x", R"({"full": true})"},
           {"DELETE", "/v1/classes/small", std::nullopt},
           {"POST", "/v1/users", R"({"name": "eve", "tenant": "team-a"})"},
           {"POST", "/v1/users", R"({"name": "eve", "role": "admin"})"},
       }) {
    Reply reply = Call(c.method, c.path, tenant_token, c.body);
    EXPECT_EQ(reply.status, 403) << c.method << " " << c.path << ": " << reply.text;
    EXPECT_TRUE(IsError(reply)) << reply.text;
  }
  ExpectUnchanged(before);
  // The same calls work for the admin.
  EXPECT_EQ(Call("PUT", "/v1/tenants/x", admin_token_, json::object()).status, 200);
  EXPECT_EQ(Call("PUT", "/v1/classes/x", admin_token_, json{{"full", true}}).status, 200);
  // Admins hold no leases.
  Reply admin_acquire = Acquire(admin_token_, Small("p"));
  EXPECT_EQ(admin_acquire.status, 403) << admin_acquire.text;
  // A tenant sees only itself among the tenants, and may read the classes and inventory.
  json tenants = Get("/v1/tenants", tenant_token, "tenants");
  ASSERT_EQ(tenants.size(), 1u) << tenants.dump();
  EXPECT_EQ(tenants[0]["name"], "team-a");
  EXPECT_FALSE(Get("/v1/classes", tenant_token, "classes").empty());
  EXPECT_EQ(Get("/v1/inventory", tenant_token, "nodes").size(), 1u);
}

TEST_F(ApiTest, LeaseLifecycleGrantQueueRefuseReleaseRenewCancelAudit) {
  Start({MigA100("n1", 1)});
  const std::string token = AddTenant("team-a", "ann");
  ASSERT_FALSE(token.empty());

  Reply first = Acquire(token, Small("p"));
  ASSERT_EQ(first.status, 201) << first.text;
  EXPECT_EQ(first.body["outcome"], "granted");
  const json lease = first.body["lease"];
  const std::int64_t first_id = lease["id"].get<std::int64_t>();
  EXPECT_GT(first_id, 0);
  EXPECT_EQ(lease["tenant"], "team-a");
  EXPECT_EQ(lease["user"], "ann");
  EXPECT_EQ(lease["class"], "small");
  EXPECT_EQ(lease["purpose"], "p");
  EXPECT_EQ(lease["node"], "n1");
  EXPECT_EQ(lease["state"], "active");
  ASSERT_EQ(lease["devices"].size(), 1u) << lease.dump();
  EXPECT_THAT(lease["devices"][0].get<std::string>(), HasSubstr("MIG"));
  EXPECT_GT(lease["memory_gib"].get<double>(), 0);
  EXPECT_EQ(lease["granted_at"], clock_.now());
  EXPECT_GT(lease["expires_at"].get<std::int64_t>(), clock_.now());

  // GET /v1/leases/{id} answers the same lease.
  Reply got = Call("GET", "/v1/leases/" + std::to_string(first_id), token);
  ASSERT_EQ(got.status, 200) << got.text;
  EXPECT_EQ(got.body, lease);

  // Fill the GPU; the next request is queued with its position.
  int granted = 1;
  Reply queued;
  for (int i = 0; i < 20; ++i) {
    queued = Acquire(token, Small(absl::StrCat("fill ", i)));
    if (queued.status != 201) break;
    ++granted;
  }
  ASSERT_EQ(queued.status, 202) << queued.text;
  EXPECT_EQ(granted, 7);  // 1g.10gb slices of one A100-80GB
  EXPECT_EQ(queued.body["outcome"], "queued");
  EXPECT_EQ(queued.body["queued"]["position"], 1);
  EXPECT_EQ(queued.body["queued"]["tenant"], "team-a");
  EXPECT_EQ(queued.body["queued"]["class"], "small");
  EXPECT_TRUE(queued.body["reason"].is_string());
  const std::int64_t queue_id = queued.body["queued"]["id"].get<std::int64_t>();
  const std::string queued_purpose = queued.body["queued"]["purpose"].get<std::string>();
  Reply second = Acquire(token, Small("second in line"));
  ASSERT_EQ(second.status, 202) << second.text;
  EXPECT_EQ(second.body["queued"]["position"], 2);
  const std::int64_t second_queue_id = second.body["queued"]["id"].get<std::int64_t>();

  // Without waiting: refused with a reason.
  Reply refused = Acquire(token, Small("no wait", /*wait=*/false));
  ASSERT_EQ(refused.status, 409) << refused.text;
  EXPECT_EQ(refused.body["outcome"], "refused");
  EXPECT_TRUE(IsError(refused)) << refused.text;

  json queue = Queue(token);
  ASSERT_EQ(queue.size(), 2u) << queue.dump();
  EXPECT_EQ(queue[0]["id"], queue_id);
  EXPECT_EQ(queue[1]["id"], second_queue_id);

  // Cancel the second queued request.
  Reply cancelled = Call("DELETE", "/v1/queue/" + std::to_string(second_queue_id), token);
  ASSERT_EQ(cancelled.status, 200) << cancelled.text;
  EXPECT_EQ(cancelled.body["cancelled"], second_queue_id);
  EXPECT_EQ(Queue(token).size(), 1u);
  EXPECT_EQ(Call("DELETE", "/v1/queue/" + std::to_string(second_queue_id), token).status, 404);

  // Releasing the first lease hands its slot to the queued request.
  clock_.Advance(5);
  Reply released = Call("DELETE", "/v1/leases/" + std::to_string(first_id), token);
  ASSERT_EQ(released.status, 200) << released.text;
  EXPECT_EQ(released.body["released"], first_id);
  EXPECT_TRUE(Queue(token).empty());
  json active = Leases(token);
  EXPECT_EQ(active.size(), 7u);
  std::int64_t from_queue = 0;
  for (const json& l : active) {
    EXPECT_NE(l["id"], first_id);
    if (l["purpose"] == queued_purpose) from_queue = l["id"].get<std::int64_t>();
  }
  EXPECT_GT(from_queue, 0) << "the queued request did not become a lease: " << active.dump();
  Reply old = Call("GET", "/v1/leases/" + std::to_string(first_id), token);
  ASSERT_EQ(old.status, 200) << old.text;
  EXPECT_EQ(old.body["state"], "released");
  EXPECT_EQ(old.body["ended_at"], clock_.now());
  EXPECT_EQ(Call("DELETE", "/v1/leases/" + std::to_string(first_id), token).status, 404);
  // History has every lease.
  EXPECT_EQ(Leases(token, /*all=*/true).size(), 8u);

  // Renew: expires_at moves to now + ttl_s.
  clock_.Advance(100);
  Reply before_renew = Call("GET", "/v1/leases/" + std::to_string(from_queue), token);
  ASSERT_EQ(before_renew.status, 200);
  Reply renewed = Call("POST", "/v1/leases/" + std::to_string(from_queue) + "/renew", token,
                       json{{"ttl_s", 60}});
  ASSERT_EQ(renewed.status, 200) << renewed.text;
  EXPECT_EQ(renewed.body["expires_at"], clock_.now() + 60);
  EXPECT_NE(renewed.body["expires_at"], before_renew.body["expires_at"]);
  EXPECT_EQ(renewed.body["id"], from_queue);
  Reply after_renew = Call("GET", "/v1/leases/" + std::to_string(from_queue), token);
  EXPECT_EQ(after_renew.body["expires_at"], clock_.now() + 60);
  // An empty body renews for the class's maximum.
  Reply renew_default =
      Call("POST", "/v1/leases/" + std::to_string(from_queue) + "/renew", token, std::nullopt);
  ASSERT_EQ(renew_default.status, 200) << renew_default.text;
  EXPECT_EQ(renew_default.body["expires_at"], clock_.now() + 8 * 3600);

  // The audit has grant, queue, refuse, cancel, release and renew, with the purposes.
  json events = Audit(token);
  EXPECT_EQ(Count(events, "grant"), 8);
  EXPECT_EQ(Count(events, "queue"), 2);
  EXPECT_EQ(Count(events, "refuse"), 1);
  EXPECT_EQ(Count(events, "cancel"), 1);
  EXPECT_EQ(Count(events, "release"), 1);
  EXPECT_EQ(Count(events, "renew"), 2);
  bool grant_with_purpose = false;
  bool release_with_purpose = false;
  bool queue_with_purpose = false;
  for (const json& e : events) {
    EXPECT_EQ(e["tenant"], "team-a") << e.dump();
    EXPECT_TRUE(e["detail"].is_object()) << e.dump();
    if (e["action"] == "grant" && e["purpose"] == "p" &&
        e["subject"] == absl::StrCat("lease ", first_id)) {
      grant_with_purpose = true;
    }
    if (e["action"] == "release" && e["purpose"] == "p" && e["actor"] == "ann") {
      release_with_purpose = true;
    }
    if (e["action"] == "queue" && e["purpose"] == queued_purpose) queue_with_purpose = true;
  }
  EXPECT_TRUE(grant_with_purpose) << events.dump();
  EXPECT_TRUE(release_with_purpose) << events.dump();
  EXPECT_TRUE(queue_with_purpose) << events.dump();
  // since= filters by time.
  json recent = Audit(token, absl::StrCat("&since=", clock_.now()));
  EXPECT_EQ(Count(recent, "renew"), 2);
  EXPECT_EQ(Count(recent, "grant"), 0);
  Reply one = Call("GET", "/v1/audit?limit=1", token);
  ASSERT_EQ(one.status, 200);
  EXPECT_EQ(one.body["events"].size(), 1u);
}

TEST_F(ApiTest, TenantsSeeAndChangeOnlyTheirOwn) {
  Start({MigA100("n1", 1)});
  const std::string a = AddTenant("team-a", "ann");
  const std::string b = AddTenant("team-b", "bob");
  Reply granted = Acquire(a, Small("a's work"));
  ASSERT_EQ(granted.status, 201) << granted.text;
  const std::string id = std::to_string(granted.body["lease"]["id"].get<std::int64_t>());
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Acquire(a, Small("fill")).status, 201);
  Reply queued = Acquire(a, Small("a waits"));
  ASSERT_EQ(queued.status, 202) << queued.text;
  const std::string queue_id = std::to_string(queued.body["queued"]["id"].get<std::int64_t>());
  const json before = Snapshot();

  Reply get = Call("GET", "/v1/leases/" + id, b);
  EXPECT_EQ(get.status, 404) << get.text;
  EXPECT_THAT(get.text, Not(HasSubstr("a's work")));
  EXPECT_EQ(Call("DELETE", "/v1/leases/" + id, b).status, 404);
  EXPECT_EQ(Call("POST", "/v1/leases/" + id + "/renew", b, json{{"ttl_s", 60}}).status, 404);
  EXPECT_EQ(Call("DELETE", "/v1/queue/" + queue_id, b).status, 404);
  Reply audit = Call("GET", "/v1/audit?tenant=team-a", b);
  EXPECT_EQ(audit.status, 403) << audit.text;
  EXPECT_TRUE(IsError(audit));
  EXPECT_TRUE(Leases(b).empty());
  EXPECT_TRUE(Leases(b, /*all=*/true).empty());
  EXPECT_TRUE(Queue(b).empty());
  for (const json& e : Audit(b)) EXPECT_EQ(e["tenant"], "team-b") << e.dump();
  json tenants = Get("/v1/tenants", b, "tenants");
  ASSERT_EQ(tenants.size(), 1u);
  EXPECT_EQ(tenants[0]["name"], "team-b");
  ExpectUnchanged(before);

  // team-a still owns and can use its lease; its own audit filter is allowed.
  EXPECT_EQ(Call("GET", "/v1/leases/" + id, a).status, 200);
  EXPECT_EQ(Call("GET", "/v1/audit?tenant=team-a", a).status, 200);
  EXPECT_EQ(Leases(a).size(), 7u);
  EXPECT_EQ(Call("DELETE", "/v1/leases/" + id, a).status, 200);
}

TEST_F(ApiTest, BadInputIsRefusedAndChangesNothing) {
  Start({MigA100("n1", 1)});
  const std::string token = AddTenant("team-a", "ann");
  Reply granted = Acquire(token, Small("held"));
  ASSERT_EQ(granted.status, 201) << granted.text;
  const std::string id = std::to_string(granted.body["lease"]["id"].get<std::int64_t>());

  struct Case {
    std::string method, path;
    std::optional<std::string> body;
    int status;             // expected
    std::string error_has;  // a substring of the error, if not empty
    bool admin = false;     // as the admin instead of the tenant
  };
  const std::string big(70 * 1024, 'x');
  const std::string long_purpose(2000, 'y');
  const std::vector<Case> cases = {
      // Acquire.
      {"POST", "/v1/leases", "{", 400, "JSON"},
      {"POST", "/v1/leases", "not json at all", 400, "JSON"},
      {"POST", "/v1/leases", R"([{"class": "small", "purpose": "p"}])", 400, "object"},
      {"POST", "/v1/leases", R"("small")", 400, "object"},
      {"POST", "/v1/leases", "42", 400, "object"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": "p", "colour": "red"})", 400,
       "colour"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": 5})", 400, "purpose"},
      {"POST", "/v1/leases", R"({"class": 5, "purpose": "p"})", 400, "class"},
      {"POST", "/v1/leases", R"({"class": ["small"], "purpose": "p"})", 400, "class"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": "p", "wait": "no"})", 400, "wait"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": "p", "wait": 0})", 400, "wait"},
      {"POST", "/v1/leases", R"({"share_milli": 5000, "purpose": "p"})", 400, "share_milli"},
      {"POST", "/v1/leases", R"({"share_milli": 3000000000, "purpose": "p"})", 400, "share_milli"},
      {"POST", "/v1/leases", R"({"share_milli": 18446744073709551615, "purpose": "p"})", 400, ""},
      {"POST", "/v1/leases", R"({"share_milli": 1.5, "purpose": "p"})", 400, "share_milli"},
      {"POST", "/v1/leases", R"({"share_milli": -1, "purpose": "p"})", 400, ""},
      {"POST", "/v1/leases", R"({"vram_mib": -5, "purpose": "p"})", 400, ""},
      {"POST", "/v1/leases", R"({"vram_mib": 1e30, "purpose": "p"})", 400, "vram_mib"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": "p", "ttl_s": -1})", 400, "ttl_s"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": "p", "ttl_s": 1.5})", 400, "ttl_s"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": "p", "ttl_s": "60"})", 400, "ttl_s"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": "p", "ttl_s": 99999999999})", 400,
       "ttl_s"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": "p", "ttl_s": 9223372036854775808})",
       400, ""},
      {"POST", "/v1/leases", R"({"class": "small"})", 400, "purpose"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": ""})", 400, "purpose"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": null})", 400, "purpose"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": ")" + long_purpose + R"("})", 400,
       "purpose"},
      {"POST", "/v1/leases", "", 400, "purpose"},
      {"POST", "/v1/leases", R"({"purpose": "p"})", 400, ""},
      {"POST", "/v1/leases", R"({"class": "small", "profile": "1g.10gb", "purpose": "p"})", 400,
       ""},
      {"POST", "/v1/leases", R"({"class": "no-such-class", "purpose": "p"})", 404, "class"},
      {"POST", "/v1/leases", R"({"class": "small", "purpose": ")" + big + R"("})", 413, ""},
      // Renew.
      {"POST", "/v1/leases/" + id + "/renew", R"({"ttl_s": -1})", 400, "ttl_s"},
      {"POST", "/v1/leases/" + id + "/renew", R"({"ttl_s": "60"})", 400, "ttl_s"},
      {"POST", "/v1/leases/" + id + "/renew", R"({"ttl_s": 99999999})", 400, "ttl_s"},
      {"POST", "/v1/leases/" + id + "/renew", R"({"ttl": 60})", 400, "ttl"},
      {"POST", "/v1/leases/" + id + "/renew", "[60]", 400, "object"},
      {"POST", "/v1/leases/" + id + "/renew", "{", 400, "JSON"},
      {"POST", "/v1/leases/" + id + "/renew", R"({"ttl_s": 60, "pad": ")" + big + R"("})", 413, ""},
      // Lease and queue ids in the path.
      {"GET", "/v1/leases/abc", std::nullopt, 404, ""},
      {"GET", "/v1/leases/-1", std::nullopt, 404, ""},
      {"GET", "/v1/leases/1.5", std::nullopt, 404, ""},
      {"GET", "/v1/leases/0", std::nullopt, 400, "id"},
      {"GET", "/v1/leases/99999999999999999999999", std::nullopt, 400, "id"},
      {"GET", "/v1/leases/424242", std::nullopt, 404, ""},
      {"DELETE", "/v1/leases/abc", std::nullopt, 404, ""},
      {"DELETE", "/v1/leases/0", std::nullopt, 400, "id"},
      {"DELETE", "/v1/leases/424242", std::nullopt, 404, ""},
      {"POST", "/v1/leases/abc/renew", R"({"ttl_s": 60})", 404, ""},
      {"POST", "/v1/leases/0/renew", R"({"ttl_s": 60})", 400, "id"},
      {"DELETE", "/v1/queue/abc", std::nullopt, 404, ""},
      {"DELETE", "/v1/queue/0", std::nullopt, 400, "id"},
      {"DELETE", "/v1/queue/424242", std::nullopt, 404, ""},
      // Unknown endpoints and methods.
      {"GET", "/v1/nope", std::nullopt, 404, "endpoint"},
      {"GET", "/", std::nullopt, 404, "endpoint"},
      {"GET", "/v2/leases", std::nullopt, 404, "endpoint"},
      // A path served for other methods: 405 with Allow.
      {"POST", "/v1/health", "{}", 405, "method not allowed"},
      {"PUT", "/v1/leases", "{}", 405, "method not allowed"},
      // Audit queries.
      {"GET", "/v1/audit?limit=abc", std::nullopt, 400, "limit"},
      {"GET", "/v1/audit?limit=0", std::nullopt, 400, "limit"},
      {"GET", "/v1/audit?limit=1000000", std::nullopt, 400, "limit"},
      {"GET", "/v1/audit?since=yesterday", std::nullopt, 400, "since"},
      // Admin endpoints with bad bodies.
      {"PUT", "/v1/tenants/x", R"({"priority": "high"})", 400, "priority", true},
      {"PUT", "/v1/tenants/x", R"({"priority": 5000})", 400, "priority", true},
      {"PUT", "/v1/tenants/x", R"({"max_gib": -1})", 400, "max_gib", true},
      {"PUT", "/v1/tenants/x", R"({"max_gib": "lots"})", 400, "max_gib", true},
      {"PUT", "/v1/tenants/x", R"({"max_slices": {"small": -1}})", 400, "max_slices", true},
      {"PUT", "/v1/tenants/x", R"({"max_slices": {"small": "1"}})", 400, "max_slices", true},
      {"PUT", "/v1/tenants/x", R"({"max_slices": {"no-such-class": 1}})", 400, "max_slices", true},
      {"PUT", "/v1/tenants/x", R"({"max_slices": [1]})", 400, "max_slices", true},
      {"PUT", "/v1/tenants/x", R"({"quota": 1})", 400, "quota", true},
      {"PUT", "/v1/tenants/x", "[]", 400, "object", true},
      {"PUT", "/v1/tenants/bad%20name", "{}", 404, "", true},
      {"PUT", "/v1/classes/x", R"({"share_milli": 5000})", 400, "share_milli", true},
      {"PUT", "/v1/classes/x", R"({"mig": {"A100-80GB": 5}})", 400, "mig", true},
      {"PUT", "/v1/classes/x", R"({"mig": {"A100-80GB": "9g.99gb"}})", 400, "mig", true},
      {"PUT", "/v1/classes/x", R"({"mig": {"no-such-gpu": "1g.10gb"}})", 400, "mig", true},
      {"PUT", "/v1/classes/x", "{}", 400, "", true},
      {"PUT", "/v1/classes/x", R"({"full": true, "share_milli": 100})", 400, "", true},
      {"PUT", "/v1/classes/x", R"({"full": true, "max_lease_s": 0})", 400, "max_lease_s", true},
      {"PUT", "/v1/classes/x", R"({"full": true, "idle_timeout_s": -5})", 400, "idle_timeout_s",
       true},
      {"PUT", "/v1/classes/x", R"({"full": "yes"})", 400, "full", true},
      {"PUT", "/v1/classes/x", R"({"full": true, "colour": "red"})", 400, "colour", true},
      {"POST", "/v1/users", R"({"name": "u1", "tenant": "team-a", "role": "root"})", 400, "role",
       true},
      {"POST", "/v1/users", R"({"name": "bad name!", "tenant": "team-a"})", 400, "name", true},
      {"POST", "/v1/users", R"({"name": "u2", "tenant": "no-such-tenant"})", 404, "tenant", true},
      {"POST", "/v1/users", R"({"name": 5, "tenant": "team-a"})", 400, "name", true},
      {"POST", "/v1/users", R"({"name": "u3", "tenant": "team-a", "token": "mine"})", 400, "token",
       true},
      {"POST", "/v1/users", R"({"name": "ann", "tenant": "team-a"})", 409, "exists", true},
      {"POST", "/v1/users", R"({"name": "u4", "tenant": "team-a", "role": "admin"})", 400, "",
       true},
      {"POST", "/v1/users", "{}", 400, "", true},
      {"DELETE", "/v1/tenants/no-such-tenant", std::nullopt, 404, "", true},
      {"DELETE", "/v1/tenants/team-a", std::nullopt, 409, "lease", true},
      {"DELETE", "/v1/classes/no-such-class", std::nullopt, 404, "", true},
      {"DELETE", "/v1/classes/small", std::nullopt, 409, "lease", true},
  };
  const json before = Snapshot();
  ASSERT_EQ(before["active"].size(), 1u);
  for (const Case& c : cases) {
    const std::string what =
        absl::StrCat(c.method, " ", c.path, " ", c.body.value_or("").substr(0, 120));
    Reply reply = Call(c.method, c.path, c.admin ? admin_token_ : token, c.body);
    EXPECT_EQ(reply.status, c.status) << what << ": " << reply.text.substr(0, 300);
    EXPECT_TRUE(IsError(reply)) << what << ": " << reply.text.substr(0, 300);
    EXPECT_EQ(reply.content_type, "application/json") << what;
    if (!c.error_has.empty() && IsError(reply)) {
      EXPECT_THAT(reply.body["error"].get<std::string>(), HasSubstr(c.error_has)) << what;
    }
    ExpectUnchanged(before, what);
  }
  // The lease held all along is untouched.
  Reply held = Call("GET", "/v1/leases/" + id, token);
  ASSERT_EQ(held.status, 200);
  EXPECT_EQ(held.body, before["active"][0]);
}

// A valid acquire body padded with JSON whitespace to exactly `size` bytes.
std::string PaddedAcquire(const std::string& purpose, size_t size) {
  std::string body = json{{"class", "small"}, {"purpose", purpose}}.dump();
  if (body.size() < size) body.append(size - body.size(), ' ');
  return body;
}

TEST_F(ApiTest, BodiesUpTo64KiBAreReadAndLargerOnesAre413) {
  Start({MigA100("n1", 1)});
  const std::string token = AddTenant("team-a", "ann");
  Reply at_limit =
      Call("POST", "/v1/leases", token, std::optional<std::string>(PaddedAcquire("edge", 65536)));
  EXPECT_EQ(at_limit.status, 201) << at_limit.text;
  const json before = Snapshot();
  Reply over =
      Call("POST", "/v1/leases", token, std::optional<std::string>(PaddedAcquire("over", 65537)));
  EXPECT_EQ(over.status, 413) << over.text;
  EXPECT_TRUE(IsError(over)) << over.text;
  Reply much_over = Call("POST", "/v1/leases", token,
                         std::optional<std::string>(PaddedAcquire("much over", 4 << 20)));
  EXPECT_EQ(much_over.status, 413) << much_over.text;
  ExpectUnchanged(before);
  // The server still answers.
  EXPECT_EQ(Call("GET", "/v1/health", "").status, 200);
}

// Regression (the 64 KiB body limit once did not apply to chunked request bodies: cpp-httplib
// 0.11.4 checks set_payload_max_length against Content-Length only). Input: POST /v1/leases with
// Transfer-Encoding: chunked and a valid acquire body padded with spaces to 256 KiB. Now chunked
// bodies are refused before they are read (411), and nothing changes.
TEST_F(ApiTest, ChunkedBodiesOver64KiBAreRefused) {
  Start({MigA100("n1", 1)});
  const std::string token = AddTenant("team-a", "ann");
  const json before = Snapshot();
  const std::string body = PaddedAcquire("chunked", 256 * 1024);
  httplib::Client client("127.0.0.1", server_->port());
  client.set_read_timeout(60);
  httplib::Result result = client.Post(
      "/v1/leases", Bearer(token),
      [&body](size_t offset, httplib::DataSink& sink) {
        const size_t n = std::min<size_t>(8192, body.size() - offset);
        sink.write(body.data() + offset, n);
        if (offset + n == body.size()) sink.done();
        return true;
      },
      "application/json");
  if (result) {
    EXPECT_EQ(result->status, 411) << result->body;
  }
  ExpectUnchanged(before);
}

// Regression (the 64 KiB body limit once applied to the compressed size only, so a few KiB of
// gzip could make the server inflate and parse gigabytes). Input: POST /v1/leases with
// Content-Encoding: gzip whose body inflates to 1 MiB. Now compressed bodies are refused before
// they are read (415), and nothing changes.
TEST_F(ApiTest, CompressedBodiesOver64KiBAreRefused) {
  Start({MigA100("n1", 1)});
  const std::string token = AddTenant("team-a", "ann");
  const json before = Snapshot();
  httplib::Client client("127.0.0.1", server_->port());
  client.set_read_timeout(60);
  client.set_compress(true);
  httplib::Result result =
      client.Post("/v1/leases", Bearer(token), PaddedAcquire("gzip", 1 << 20), "application/json");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 415) << result->body;
  ExpectUnchanged(before);
}

// A lease past its end (before the next sweep) cannot be renewed.
TEST_F(ApiTest, AnExpiredLeaseCannotBeRenewed) {
  Start({MigA100("n1", 1)});
  const std::string token = AddTenant("team-a", "ann");
  Reply granted = Acquire(token, json{{"class", "small"}, {"purpose", "p"}, {"ttl_s", 30}});
  ASSERT_EQ(granted.status, 201) << granted.text;
  EXPECT_EQ(granted.body["lease"]["expires_at"], clock_.now() + 30);
  const std::string id = std::to_string(granted.body["lease"]["id"].get<std::int64_t>());
  clock_.Advance(31);
  Reply renewed = Call("POST", "/v1/leases/" + id + "/renew", token, json{{"ttl_s", 60}});
  EXPECT_EQ(renewed.status, 409) << renewed.text;
  EXPECT_TRUE(IsError(renewed));
  // The sweep ends it; then it is gone from the active list and cannot be released.
  ASSERT_TRUE(service_->Tick().ok());
  EXPECT_TRUE(Leases(token).empty());
  Reply ended = Call("GET", "/v1/leases/" + id, token);
  EXPECT_EQ(ended.body["state"], "expired") << ended.text;
  EXPECT_EQ(Call("DELETE", "/v1/leases/" + id, token).status, 404);
  EXPECT_EQ(Count(Audit(token), "expire"), 1);
}

// Deleting a tenant revokes its users' tokens and cancels its queued requests.
TEST_F(ApiTest, DeletingATenantRevokesItsTokensAndCancelsItsQueue) {
  Start({MigA100("n1", 1)});
  const std::string a = AddTenant("team-a", "ann");
  const std::string c = AddTenant("team-c", "cat");
  for (int i = 0; i < 7; ++i) ASSERT_EQ(Acquire(a, Small("fill")).status, 201);
  Reply queued = Acquire(c, Small("c waits"));
  ASSERT_EQ(queued.status, 202) << queued.text;
  ASSERT_EQ(Queue(admin_token_).size(), 1u);
  Reply deleted = Call("DELETE", "/v1/tenants/team-c", admin_token_);
  ASSERT_EQ(deleted.status, 200) << deleted.text;
  EXPECT_TRUE(Queue(admin_token_).empty());
  Reply revoked = Call("GET", "/v1/leases", c);
  EXPECT_EQ(revoked.status, 401) << revoked.text;
  EXPECT_EQ(Call("DELETE", "/v1/tenants/team-c", admin_token_).status, 404);
  // Its slot is not handed to anyone when capacity frees.
  Reply released = Call("DELETE", "/v1/leases/1", a);
  ASSERT_EQ(released.status, 200) << released.text;
  EXPECT_EQ(Leases(admin_token_).size(), 6u);
  json events = Audit(admin_token_);
  EXPECT_EQ(Count(events, "tenant.delete"), 1);
  EXPECT_EQ(Count(events, "grant"), 7);
}

// A refusal (well-formed, but not allowed) is audited by design and adds no lease; a 400 adds
// nothing at all.
TEST_F(ApiTest, RefusalsAreAuditedButAddNoLease) {
  Start({MigA100("n1", 1)});
  const std::string token = AddTenant("team-a", "ann", json{{"max_slices", {{"small", 1}}}});
  ASSERT_EQ(Acquire(token, Small("one")).status, 201);
  const json before = Snapshot();
  const int audit_before = static_cast<int>(before["audit"].size());

  Reply over_quota = Acquire(token, Small("two"));
  EXPECT_EQ(over_quota.status, 409) << over_quota.text;
  EXPECT_EQ(over_quota.body["outcome"], "refused");
  EXPECT_THAT(over_quota.text, HasSubstr("over quota"));
  // Longer than the class's maximum lease (8 h) but within 30 days: refused, not a 400.
  Reply too_long = Call("POST", "/v1/leases", token,
                        json{{"class", "medium"}, {"purpose", "long"}, {"ttl_s", 100000}});
  EXPECT_EQ(too_long.status, 409) << too_long.text;
  // A full GPU for a tenant that may not take one.
  Reply full = Call("POST", "/v1/leases", token, json{{"class", "full"}, {"purpose", "f"}});
  EXPECT_EQ(full.status, 409) << full.text;

  const json after = Snapshot();
  EXPECT_EQ(after["active"], before["active"]);
  EXPECT_EQ(after["all"], before["all"]);
  EXPECT_EQ(after["queue"], before["queue"]);
  ASSERT_EQ(after["audit"].size(), static_cast<size_t>(audit_before + 3));
  for (size_t i = static_cast<size_t>(audit_before); i < after["audit"].size(); ++i) {
    EXPECT_EQ(after["audit"][i]["action"], "refuse") << after["audit"][i].dump();
    EXPECT_EQ(after["audit"][i]["tenant"], "team-a");
    EXPECT_EQ(after["audit"][i]["actor"], "ann");
  }
  EXPECT_EQ(after["audit"][static_cast<size_t>(audit_before)]["purpose"], "two");
}

TEST_F(ApiTest, TokensNeverAppearInTheAuditOrInErrors) {
  Start({MigA100("n1", 1)});
  std::vector<std::string> tokens = {admin_token_};
  tokens.push_back(AddTenant("team-a", "ann", json{{"max_slices", {{"small", 1}}}}));
  tokens.push_back(AddTenant("team-b", "bob"));
  Reply admin_user =
      Call("POST", "/v1/users", admin_token_, json{{"name", "ops"}, {"role", "admin"}});
  ASSERT_EQ(admin_user.status, 201) << admin_user.text;
  tokens.push_back(admin_user.body["token"].get<std::string>());
  for (const std::string& t : tokens) ASSERT_THAT(t, HasSubstr("gs_"));
  const std::string ann = tokens[1];
  const std::string bob = tokens[2];

  std::vector<Reply> replies;
  Reply granted = Acquire(ann, Small("p"));
  ASSERT_EQ(granted.status, 201);
  const std::string id = std::to_string(granted.body["lease"]["id"].get<std::int64_t>());
  replies.push_back(granted);
  replies.push_back(Acquire(ann, Small("over quota")));
  replies.push_back(Call("DELETE", "/v1/leases/" + id, bob));
  replies.push_back(Call("GET", "/v1/audit?tenant=team-a", bob));
  replies.push_back(Call("PUT", "/v1/tenants/x", ann, json::object()));
  replies.push_back(
      Call("POST", "/v1/users", admin_token_, json{{"name", "ann"}, {"tenant", "team-a"}}));
  replies.push_back(Call("POST", "/v1/leases", ann, std::optional<std::string>("{")));
  replies.push_back(Call("POST", "/v1/leases", ann + "x", Small("p")));
  replies.push_back(Call("GET", "/v1/leases", bob + bob));
  replies.push_back(Call("GET", "/v1/nope", admin_token_));
  replies.push_back(Call("POST", "/v1/leases/" + id + "/renew", ann, json{{"ttl_s", 60}}));
  replies.push_back(Call("DELETE", "/v1/leases/" + id, ann));
  replies.push_back(Call("PUT", "/v1/classes/c1", admin_token_, json{{"full", true}}));
  replies.push_back(Call("PUT", "/v1/tenants/team-c", admin_token_, json::object()));
  replies.push_back(Call("DELETE", "/v1/tenants/team-c", admin_token_));

  const std::string audit = Call("GET", "/v1/audit?limit=100000", admin_token_).text;
  ASSERT_THAT(audit, HasSubstr("user.create"));
  const std::string tenants = Call("GET", "/v1/tenants", admin_token_).text;
  const std::string db = ReadBytes(DbPath()) + ReadBytes(DbPath() + "-wal");
  ASSERT_FALSE(db.empty());
  for (const std::string& t : tokens) {
    const std::string secret = t.substr(3);  // without the "gs_" prefix
    EXPECT_THAT(audit, Not(HasSubstr(secret)));
    EXPECT_THAT(tenants, Not(HasSubstr(secret)));
    EXPECT_EQ(db.find(secret), std::string::npos) << "a token is stored in clear";
    EXPECT_NE(db.find(alloc::HashToken(t)), std::string::npos) << "the token's hash is not stored";
    for (const Reply& r : replies) EXPECT_THAT(r.text, Not(HasSubstr(secret)));
  }
}

// 16 threads x 30 acquire/release cycles over HTTP, for two tenants whose quotas together exceed
// the GPU, so requests are granted, queued (then cancelled, or granted while waiting) and refused.
// While they run, the active leases never overcommit the GPU nor exceed a quota; at the end
// nothing is active or queued, every lease was released, and grants equal releases.
TEST_F(ApiTest, ConcurrentClientsKeepPlacementsQuotasAndCounts) {
  Start({MigA100("n1", 1)});  // seven 1g.10gb slices
  constexpr int kThreads = 16;
  constexpr int kCycles = 30;
  constexpr int kQuota = 5;
  const std::vector<std::string> tenants = {"team-x", "team-y"};
  for (const std::string& t : tenants) {
    ASSERT_EQ(
        Call("PUT", "/v1/tenants/" + t, admin_token_, json{{"max_slices", {{"small", kQuota}}}})
            .status,
        200);
  }
  std::vector<std::string> tokens;
  for (int i = 0; i < kThreads; ++i) {
    tokens.push_back(AddUser(tenants[static_cast<size_t>(i % 2)], absl::StrCat("user-", i)));
    ASSERT_FALSE(tokens.back().empty());
  }

  std::atomic<int> granted{0};
  std::atomic<int> queued{0};
  std::atomic<int> granted_while_queued{0};
  std::atomic<int> refused{0};
  std::atomic<int> unexpected{0};
  std::atomic<int> checks{0};
  std::atomic<bool> done{false};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  auto fail = [&](const std::string& what) {
    ++unexpected;
    std::lock_guard<std::mutex> lock(failures_mutex);
    if (failures.size() < 20) failures.push_back(what);
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const std::string& token = tokens[static_cast<size_t>(i)];
      for (int cycle = 0; cycle < kCycles; ++cycle) {
        const std::string purpose = absl::StrCat("t", i, " c", cycle);
        const bool wait = (i + cycle) % 3 == 0;
        Reply reply = Acquire(token, Small(purpose, wait));
        std::int64_t lease_id = 0;
        if (reply.status == 201) {
          ++granted;
          lease_id = reply.body["lease"]["id"].get<std::int64_t>();
        } else if (reply.status == 202) {
          ++queued;
          const std::string queue_id =
              std::to_string(reply.body["queued"]["id"].get<std::int64_t>());
          Reply cancel = Call("DELETE", "/v1/queue/" + queue_id, token);
          if (cancel.status == 404) {
            // Granted while it waited: find the lease by its purpose.
            ++granted_while_queued;
            Reply mine = Call("GET", "/v1/leases", token);
            for (const json& l : mine.body.value("leases", json::array())) {
              if (l["purpose"] == purpose) lease_id = l["id"].get<std::int64_t>();
            }
            if (lease_id == 0) fail(absl::StrCat(purpose, ": queued, not cancellable, no lease"));
          } else if (cancel.status != 200) {
            fail(absl::StrCat(purpose, ": cancel ", cancel.status, " ", cancel.text));
          }
        } else if (reply.status == 409) {
          ++refused;
          if (!IsError(reply)) fail(absl::StrCat(purpose, ": refusal without error"));
        } else {
          fail(absl::StrCat(purpose, ": acquire ", reply.status, " ", reply.text, reply.error));
        }
        if (lease_id != 0) {
          if (cycle % 5 == 0) {
            Reply renew = Call("POST", absl::StrCat("/v1/leases/", lease_id, "/renew"), token,
                               json{{"ttl_s", 600}});
            if (renew.status != 200) fail(absl::StrCat(purpose, ": renew ", renew.status));
          }
          Reply release = Call("DELETE", absl::StrCat("/v1/leases/", lease_id), token);
          if (release.status != 200) {
            fail(absl::StrCat(purpose, ": release ", release.status, " ", release.text));
          }
        }
      }
    });
  }
  // While they run: no two active leases share a placement (in the service, with the claims, and
  // over HTTP, by device), and no tenant holds more than its quota.
  std::thread checker([&] {
    while (!done) {
      absl::StatusOr<std::vector<alloc::Lease>> active = service_->Leases(admin_);
      if (!active.ok()) {
        fail(std::string(active.status().message()));
        continue;
      }
      if (std::string problem = Overcommit(nodes_, *active); !problem.empty()) fail(problem);
      std::map<std::string, int> held;
      for (const alloc::Lease& l : *active) ++held[l.tenant];
      for (const auto& [tenant, n] : held) {
        if (n > kQuota) fail(absl::StrCat(tenant, " holds ", n));
      }
      Reply listed = Call("GET", "/v1/leases", admin_token_);
      std::set<std::string> devices;
      for (const json& l : listed.body.value("leases", json::array())) {
        for (const json& d : l["devices"]) {
          const std::string key = l["node"].get<std::string>() + " " + d.get<std::string>();
          if (!devices.insert(key).second) fail("two active leases on " + key);
        }
      }
      ++checks;
    }
  });
  for (std::thread& t : threads) t.join();
  done = true;
  checker.join();

  EXPECT_EQ(unexpected.load(), 0) << ::testing::PrintToString(failures);
  EXPECT_GT(checks.load(), 0);
  EXPECT_GT(granted.load(), 0);
  if (unexpected == 0) {
    EXPECT_EQ(granted + queued + refused, kThreads * kCycles);
  }
  EXPECT_TRUE(Leases(admin_token_).empty());
  EXPECT_TRUE(Queue(admin_token_).empty());
  json all = Leases(admin_token_, /*all=*/true);
  EXPECT_EQ(all.size(), static_cast<size_t>(granted + granted_while_queued));
  for (const json& l : all) EXPECT_EQ(l["state"], "released") << l.dump();
  json events = Audit(admin_token_);
  EXPECT_EQ(Count(events, "grant"), Count(events, "release"));
  EXPECT_EQ(Count(events, "grant"), static_cast<int>(all.size()));
  EXPECT_EQ(Count(events, "queue"), queued.load());
  EXPECT_EQ(Count(events, "cancel"), queued - granted_while_queued);
  EXPECT_EQ(Count(events, "refuse"), refused.load());
  ::testing::Test::RecordProperty("granted", granted.load());
  ::testing::Test::RecordProperty("queued", queued.load());
  ::testing::Test::RecordProperty("refused", refused.load());
  ::testing::Test::RecordProperty("granted_while_queued", granted_while_queued.load());
}

TEST_F(ApiTest, StopIsIdempotentAndAStoppedServerRefusesConnections) {
  Start();
  const int port = server_->port();
  ASSERT_EQ(Call("GET", "/v1/health", "").status, 200);
  server_->Stop();
  server_->Stop();
  Reply after = CallRaw(port, "GET", "/v1/health", {}, std::nullopt);
  EXPECT_EQ(after.status, 0) << after.text;
  EXPECT_FALSE(after.error.empty());
  server_->Stop();
  server_.reset();  // the destructor stops again
  // The service is still usable, and a new server can serve it.
  ServerOptions options;
  options.port = 0;
  server_ = std::make_unique<ApiServer>(*service_, options);
  ASSERT_TRUE(server_->Start().ok());
  EXPECT_EQ(Call("GET", "/v1/health", "").status, 200);
}

// Regression (ApiServer::Start on a port another ApiServer already listens on; httplib's default
// SO_REUSEPORT let both run): input: a second
// ApiServer with ServerOptions{port = the first server's port}; expected: Start() fails ("Fails if
// the address cannot be bound", server.h) with "cannot listen on 127.0.0.1:PORT"; actual: Start()
// returns OK and both listen on the port, because cpp-httplib 0.11.4 binds with SO_REUSEPORT, so
// the kernel spreads connections over the two (for `gpuslice serve`, two processes on different
// stores answering on one address). A port held by a socket without SO_REUSEPORT is refused
// (serve_cli_test: AnAddressInUseFailsWithAMessage).
TEST_F(ApiTest, StartFailsOnAnAddressInUse) {
  Start();
  ServerOptions options;
  options.port = server_->port();
  ApiServer second(*service_, options);
  absl::Status status = second.Start();
  EXPECT_FALSE(status.ok()) << "a second server started on port " << server_->port();
  EXPECT_THAT(std::string(status.message()), HasSubstr(std::to_string(server_->port())));
  // When it did start, let its thread enter the accept loop before stopping it (see
  // StopRightAfterStartReturns).
  if (status.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  second.Stop();
  EXPECT_EQ(Call("GET", "/v1/health", "").status, 200);
}

// Stop() right after Start() must return: the server thread may not have entered its accept loop
// yet. Each round runs on its own thread so that a hang fails the test instead of blocking it.
// Regression (ApiServer::Stop right after ApiServer::Start once hung): input: Start() then at once
// Stop() on the same thread; expected: Stop() returns (it "stops accepting ... joins the thread");
// actual: Stop() blocks forever in thread_.join() (first round, every run here):
// httplib::Server::stop() does nothing while is_running_ is false, and listen_after_bind() sets it
// only once the new thread runs, after which it accepts until a stop() that never comes. Start()
// should wait until the server runs (or Stop() retry until the thread has started and then
// stopped).
TEST_F(ApiTest, StopRightAfterStartReturns) {
  Start();
  constexpr int kRounds = 20;
  int hung = 0;
  for (int round = 0; round < kRounds && hung == 0; ++round) {
    ServerOptions options;
    options.port = 0;
    auto server = std::make_shared<ApiServer>(*service_, options);
    auto done = std::make_shared<std::promise<bool>>();
    std::future<bool> finished = done->get_future();
    std::thread([server, done] {
      const bool started = server->Start().ok();
      server->Stop();
      done->set_value(started);
    }).detach();
    if (finished.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      ++hung;
      // The stuck thread keeps `server` (and through it the service) alive: leak them.
      new std::shared_ptr<ApiServer>(server);
      service_.release();
      continue;
    }
    EXPECT_TRUE(finished.get()) << "round " << round;
  }
  EXPECT_EQ(hung, 0) << "ApiServer::Stop() called right after Start() did not return";
}

}  // namespace
}  // namespace gpuslice::api
