// The API's client (gpuslice/api/client.h) against a real ApiServer on loopback: answers of every
// kind come back with their HTTP status, error answers become the status they stand for with the
// HTTP status attached, and calls that get no answer are errors that say what to do.
#include "gpuslice/api/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "api/api_fixture.h"

namespace gpuslice::api {
namespace {

using ::testing::HasSubstr;

ClientSettings Settings(const std::string& server, const std::string& token = "",
                        int timeout_s = 10) {
  ClientSettings settings;
  settings.server = server;
  settings.token = token;
  settings.timeout_s = timeout_s;
  return settings;
}

class ClientTest : public testing::ApiFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start(place::testing::MakeCluster({alloc::testing::MigA100("vm", 1)})));
  }

  Client Make(const std::string& token) {
    absl::StatusOr<Client> client =
        Client::Make(Settings("http://127.0.0.1:" + std::to_string(server_->port()), token));
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }
};

TEST_F(ClientTest, AnAnswerComesBackWithItsStatusAndBody) {
  const Client client = Make(admin_);
  absl::StatusOr<Response> health = client.Call("GET", "/v1/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  EXPECT_TRUE(health->ok());
  EXPECT_EQ(health->body["status"], "ok");
  absl::StatusOr<nlohmann::json> tenants = client.Json("GET", "/v1/tenants");
  ASSERT_TRUE(tenants.ok()) << tenants.status();
  EXPECT_THAT(tenants->dump(), HasSubstr("team-a"));
  const nlohmann::json tenant = nlohmann::json::object();
  absl::StatusOr<Response> put = client.Call("PUT", "/v1/tenants/team-z", &tenant);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->status, 200) << put->text;
}

TEST_F(ClientTest, ErrorAnswersAreTheStatusTheyStandFor) {
  absl::StatusOr<Response> refused = Make("gs_" + std::string(64, '0')).Call("GET", "/v1/leases");
  ASSERT_TRUE(refused.ok()) << refused.status();  // an answer: 401
  EXPECT_EQ(refused->status, 401);
  const absl::Status unauthenticated = refused->Check();
  EXPECT_TRUE(absl::IsUnauthenticated(unauthenticated)) << unauthenticated;
  EXPECT_EQ(HttpStatusOf(unauthenticated), 401);
  EXPECT_TRUE(IsRefusedCredential(unauthenticated));

  const nlohmann::json empty = nlohmann::json::object();
  absl::StatusOr<nlohmann::json> forbidden = Make(tenant_).Json("PUT", "/v1/tenants/x", &empty);
  ASSERT_FALSE(forbidden.ok());
  EXPECT_EQ(HttpStatusOf(forbidden.status()), 403) << forbidden.status();
  EXPECT_TRUE(absl::IsPermissionDenied(forbidden.status()));

  absl::StatusOr<nlohmann::json> missing = Make(admin_).Json("GET", "/v1/leases/12345");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_EQ(HttpStatusOf(missing.status()), 404);
  EXPECT_FALSE(IsRefusedCredential(missing.status()));

  const nlohmann::json bad = {{"no such field", 1}};
  absl::StatusOr<Response> invalid = Make(admin_).Call("PUT", "/v1/tenants/team-q", &bad);
  ASSERT_TRUE(invalid.ok()) << invalid.status();
  EXPECT_EQ(invalid->status, 400);
  EXPECT_TRUE(absl::IsInvalidArgument(invalid->Check()));
  EXPECT_FALSE(invalid->Error().empty());
}

TEST_F(ClientTest, NoAnswerIsAnErrorThatSaysWhatToDo) {
  // A port nobody listens on: this server's, once it has stopped.
  const std::string url = "http://127.0.0.1:" + std::to_string(server_->port());
  Stop();
  absl::StatusOr<Client> client = Client::Make(Settings(url, "t", 2));
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<Response> none = client->Call("GET", "/v1/health");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::IsUnavailable(none.status())) << none.status();
  EXPECT_EQ(HttpStatusOf(none.status()), 0);
  EXPECT_THAT(none.status().message(), HasSubstr("cannot reach " + url));
  EXPECT_THAT(none.status().message(), HasSubstr("is `gpuslice serve` running?"));
}

TEST(ClientSettingsTest, SettingsThatCannotWorkAreRefused) {
  absl::StatusOr<Client> ftp = Client::Make(Settings("ftp://127.0.0.1:1"));
  EXPECT_TRUE(absl::IsInvalidArgument(ftp.status())) << ftp.status();
  EXPECT_THAT(ftp.status().message(), HasSubstr("not an http:// or https:// URL"));
  ClientSettings cert_only = Settings("https://127.0.0.1:1");
  cert_only.client_cert = "c.pem";
  absl::StatusOr<Client> half = Client::Make(cert_only);
  EXPECT_TRUE(absl::IsInvalidArgument(half.status())) << half.status();
  EXPECT_THAT(half.status().message(), HasSubstr("go together"));
}

}  // namespace
}  // namespace gpuslice::api
