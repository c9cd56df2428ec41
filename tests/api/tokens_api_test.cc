// Tokens over the API (gpuslice/api/server.h, src/api/auth.h): GET/POST /v1/users,
// DELETE /v1/users/{name}, POST /v1/users/{name}/rotate; failed authentications audited and
// limited per source with the service's virtual clock; and the limiter itself (pure).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "api/api_fixture.h"
#include "api/auth.h"

namespace gpuslice::api {
namespace {

using testing::ApiFixture;
using testing::Count;
using testing::Reply;

// ---- the limiter, pure

TEST(AuthFailureLimiterTest, LocksASourceOutAfterItsFailuresWithinTheWindow) {
  AuthFailureLimiter limiter(AuthLimits{.max_failures = 3, .window_s = 60, .lockout_s = 100});
  EXPECT_FALSE(limiter.Failed("10.0.0.1", 1000));
  EXPECT_FALSE(limiter.Failed("10.0.0.1", 1010));
  EXPECT_EQ(limiter.RetryAfter("10.0.0.1", 1010), 0);
  EXPECT_TRUE(limiter.Failed("10.0.0.1", 1020));
  EXPECT_EQ(limiter.RetryAfter("10.0.0.1", 1020), 100);
  EXPECT_EQ(limiter.RetryAfter("10.0.0.1", 1119), 1);
  EXPECT_EQ(limiter.RetryAfter("10.0.0.2", 1020), 0) << "another source is not limited";
  EXPECT_FALSE(limiter.Failed("10.0.0.1", 1050)) << "failures while locked out are not counted";
  EXPECT_EQ(limiter.RetryAfter("10.0.0.1", 1120), 0);
  EXPECT_FALSE(limiter.Failed("10.0.0.1", 1120));
  EXPECT_FALSE(limiter.Failed("10.0.0.1", 1121));
  EXPECT_TRUE(limiter.Failed("10.0.0.1", 1122));
}

TEST(AuthFailureLimiterTest, FailuresOlderThanTheWindowAreForgotten) {
  AuthFailureLimiter limiter(AuthLimits{.max_failures = 3, .window_s = 60, .lockout_s = 100});
  for (std::int64_t t = 0; t < 600; t += 30) {
    EXPECT_FALSE(limiter.Failed("10.0.0.1", t)) << t;
  }
}

TEST(AuthFailureLimiterTest, AnIpv6HostCountsByItsSlash64) {
  EXPECT_EQ(AuthFailureLimiter::SourceOf("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  EXPECT_EQ(AuthFailureLimiter::SourceOf("2001:db8:1:2:bbbb::7"), "2001:db8:1:2::/64");
  EXPECT_EQ(AuthFailureLimiter::SourceOf("2001:db8:1:3::1"), "2001:db8:1:3::/64");
  EXPECT_EQ(AuthFailureLimiter::SourceOf("::ffff:192.0.2.9"), "192.0.2.9");
  EXPECT_EQ(AuthFailureLimiter::SourceOf("192.0.2.9"), "192.0.2.9");
  EXPECT_EQ(AuthFailureLimiter::SourceOf("::1"), "::/64");
}

TEST(AuthFailureLimiterTest, ManySourcesShareOneEntryPastTheCap) {
  AuthFailureLimiter limiter(
      AuthLimits{.max_failures = 2, .window_s = 60, .lockout_s = 60, .max_sources = 4});
  for (int i = 0; i < 4; ++i) limiter.Failed("10.0.0." + std::to_string(i), 0);
  EXPECT_EQ(limiter.tracked(), 4u);
  EXPECT_FALSE(limiter.Failed("10.0.1.1", 1));
  EXPECT_TRUE(limiter.Failed("10.0.1.2", 1)) << "the overflow entry counts them together";
  EXPECT_GT(limiter.RetryAfter("10.0.1.3", 1), 0);
  EXPECT_LE(limiter.tracked(), 5u);
  // Once the old windows end, their entries make room for new sources.
  EXPECT_FALSE(limiter.Failed("10.0.2.1", 100));
  EXPECT_EQ(limiter.RetryAfter("10.0.2.1", 100), 0);
}

// ---- over HTTP

class TokensApiTest : public ApiFixture {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Start(place::testing::MakeCluster({}))); }
};

TEST_F(TokensApiTest, TheEleventhBadTokenInAMinuteIsAnswered429AndEveryOneBeforeIsAudited) {
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(Call("GET", "/v1/leases", "gs_wrong" + std::to_string(i)).status, 401) << i;
  }
  Reply tenth = Call("GET", "/v1/leases", "gs_wrong");
  EXPECT_EQ(tenth.status, 401);
  Reply limited = Call("GET", "/v1/leases", "gs_wrong");
  EXPECT_EQ(limited.status, 429) << limited.text;
  EXPECT_THAT(limited.body.value("error", ""), ::testing::HasSubstr("try again in 60 s"));
  // Locked out means locked out: the source's valid tokens wait too, without being counted.
  EXPECT_EQ(Call("GET", "/v1/leases", tenant_).status, 429);
  EXPECT_EQ(Call("GET", "/v1/health", "").status, 200) << "health needs no token";
  clock_.Advance(60);
  nlohmann::json events = Audit();
  EXPECT_EQ(Count(events, "auth.fail"), 9);
  EXPECT_EQ(Count(events, "auth.limit"), 1);
  for (const nlohmann::json& e : events) {
    EXPECT_EQ(e.dump().find("gs_wrong"), std::string::npos) << "a token reached the audit";
  }
  EXPECT_EQ(Call("GET", "/v1/leases", tenant_).status, 200);
}

TEST_F(TokensApiTest, RequestsWithoutATokenAreNotCounted) {
  for (int i = 0; i < 30; ++i) EXPECT_EQ(Call("GET", "/v1/leases", "").status, 401);
  EXPECT_EQ(Call("GET", "/v1/leases", tenant_).status, 200);
  EXPECT_EQ(Count(Audit(), "auth.fail"), 0);
}

TEST_F(TokensApiTest, AnExpiredTokenIsRefusedAndAuditedWithItsUser) {
  Reply made =
      Call("POST", "/v1/users", admin_,
           nlohmann::json{
               {"name", "temp"}, {"tenant", "team-a"}, {"role", "tenant"}, {"expires_in_s", 600}});
  ASSERT_EQ(made.status, 201) << made.text;
  const std::string token = made.body["token"].get<std::string>();
  EXPECT_EQ(Call("GET", "/v1/leases", token).status, 200);
  clock_.Advance(600);
  Reply refused = Call("GET", "/v1/leases", token);
  EXPECT_EQ(refused.status, 401);
  EXPECT_THAT(refused.body.value("error", ""), ::testing::HasSubstr("'temp' expired"));
  bool audited = false;
  for (const nlohmann::json& e : Audit()) {
    audited |= e["action"] == "auth.fail" && e["detail"].dump().find("temp") != std::string::npos;
  }
  EXPECT_TRUE(audited);
}

TEST_F(TokensApiTest, ListRevokeAndRotateOverHttp) {
  nlohmann::json all = Get("/v1/users", "users");
  ASSERT_EQ(all.size(), 3u) << all;
  nlohmann::json own = Get("/v1/users", "users", tenant_);
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0]["name"], "ann");
  EXPECT_EQ(own.dump().find("token\""), std::string::npos) << "a listing never holds tokens";

  Reply rotated = Call("POST", "/v1/users/ann/rotate", tenant_, nlohmann::json::object());
  ASSERT_EQ(rotated.status, 200) << rotated.text;
  const std::string fresh = rotated.body["token"].get<std::string>();
  EXPECT_EQ(Call("GET", "/v1/leases", tenant_).status, 401);
  EXPECT_EQ(Call("GET", "/v1/leases", fresh).status, 200);
  EXPECT_EQ(Call("POST", "/v1/users/root/rotate", fresh, nlohmann::json::object()).status, 403);
  EXPECT_EQ(
      Call("POST", "/v1/users/ann/rotate", admin_, nlohmann::json{{"expires_in_s", -5}}).status,
      400);
  EXPECT_EQ(Call("POST", "/v1/users/ann/rotate", admin_, nlohmann::json{{"lifetime", 5}}).status,
            400);

  EXPECT_EQ(Call("DELETE", "/v1/users/ann", fresh).status, 403);
  EXPECT_EQ(Call("DELETE", "/v1/users/ann", admin_).status, 200);
  EXPECT_EQ(Call("GET", "/v1/leases", fresh).status, 401);
  EXPECT_EQ(Call("DELETE", "/v1/users/ann", admin_).status, 404);
  EXPECT_EQ(Call("DELETE", "/v1/users/root", admin_).status, 409) << "the last admin";
  nlohmann::json events = Audit();
  EXPECT_EQ(Count(events, "user.rotate"), 1);
  EXPECT_EQ(Count(events, "user.revoke"), 1);
}

}  // namespace
}  // namespace gpuslice::api
