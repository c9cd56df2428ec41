// TLS on the API (gpuslice/api/tls.h): the self-signed pair serve makes (key 0600), the context
// it loads (a key that does not match is refused), a client that verifies the server (an
// untrusted certificate and plain HTTP both fail), and mutual TLS for agents (an agent's token
// works only with a client certificate for its own machine).
#include "gpuslice/api/tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "alloc/alloc_test_util.h"
#include "api/api_fixture.h"
#include "nlohmann/json.hpp"
#include "place/place_test_util.h"

namespace gpuslice::api {
namespace {

using alloc::testing::GpuUuid;
using alloc::testing::MigA100;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

unsigned Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777u;
}

TEST(TlsFiles, ASelfSignedPairHasAPrivateKeyAndLoads) {
  alloc::testing::ScratchDir dir;
  const std::string cert = dir.path() + "/c.crt";
  const std::string key = dir.path() + "/c.key";
  ASSERT_TRUE(MakeSelfSignedCertificate(cert, key, {"localhost", "127.0.0.1", "::1"}).ok());
  EXPECT_EQ(Mode(key), 0600u);
  EXPECT_EQ(Mode(cert), 0644u);
  absl::StatusOr<std::unique_ptr<TlsServerContext>> ctx = TlsServerContext::Load(cert, key);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_THAT((*ctx)->fingerprint(), MatchesRegex("([0-9A-F]{2}:){31}[0-9A-F]{2}"));
  // Another pair's key does not belong to this certificate.
  ASSERT_TRUE(MakeSelfSignedCertificate(dir.path() + "/d.crt", dir.path() + "/d.key", {"x"}).ok());
  EXPECT_FALSE(TlsServerContext::Load(cert, dir.path() + "/d.key").ok());
  EXPECT_FALSE(TlsServerContext::Load(dir.path() + "/missing.crt", key).ok());
}

class TlsApiTest : public ::testing::Test {
 protected:
  // Serves a service over TLS with a new self-signed pair; `client_ca` asks agents for a
  // client certificate.
  void Serve(const std::string& client_ca = "") {
    cert_ = dir_.path() + "/server.crt";
    key_ = dir_.path() + "/server.key";
    ASSERT_TRUE(MakeSelfSignedCertificate(cert_, key_, {"localhost", "127.0.0.1"}).ok());
    absl::StatusOr<std::unique_ptr<TlsServerContext>> ctx =
        TlsServerContext::Load(cert_, key_, client_ca);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    tls_ = *std::move(ctx);
    absl::StatusOr<std::unique_ptr<store::Database>> db =
        store::OpenSqlite(dir_.path() + "/tls.db");
    ASSERT_TRUE(db.ok());
    absl::StatusOr<std::unique_ptr<alloc::Service>> service =
        alloc::Service::Open(*std::move(db), place::testing::MakeCluster({MigA100("n1", 1)}), {});
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    ServerOptions options;
    options.port = 0;
    options.tls = tls_->get();
    options.agents_need_client_certificates = !client_ca.empty();
    server_ = std::make_unique<ApiServer>(*service_, options);
    ASSERT_TRUE(server_->Start().ok());
    absl::StatusOr<std::optional<std::string>> admin = service_->BootstrapAdmin("root");
    ASSERT_TRUE(admin.ok() && admin->has_value());
    admin_ = **admin;
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  // GET or PUT over https with `ca` trusted and an optional client certificate.
  httplib::Result Call(const std::string& method, const std::string& path, const std::string& token,
                       const std::string& ca, const std::string& client_cert = "",
                       const std::string& client_key = "", const std::string& body = "") {
    httplib::Client client("https://127.0.0.1:" + std::to_string(server_->port()), client_cert,
                           client_key);
    client.enable_server_certificate_verification(true);
    if (!ca.empty()) client.set_ca_cert_path(ca);
    client.set_connection_timeout(5);
    client.set_read_timeout(10);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    return method == "GET" ? client.Get(path, headers)
                           : client.Put(path, headers, body, "application/json");
  }

  alloc::testing::ScratchDir dir_;
  std::string cert_, key_, admin_;
  std::unique_ptr<TlsServerContext> tls_;
  std::unique_ptr<alloc::Service> service_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(TlsApiTest, ClientsThatTrustTheCertificateAreAnsweredAndOthersAreNot) {
  ASSERT_NO_FATAL_FAILURE(Serve());
  httplib::Result ok = Call("GET", "/v1/classes", admin_, cert_);
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200);
  // Another certificate as the only trusted one: the server is refused by the client.
  ASSERT_TRUE(
      MakeSelfSignedCertificate(dir_.path() + "/o.crt", dir_.path() + "/o.key", {"127.0.0.1"})
          .ok());
  httplib::Result untrusted = Call("GET", "/v1/health", "", dir_.path() + "/o.crt");
  ASSERT_FALSE(untrusted);
  EXPECT_EQ(untrusted.error(), httplib::Error::SSLServerVerification);
  // Plain HTTP to the TLS port gets no answer.
  httplib::Client plain("127.0.0.1", server_->port());
  plain.set_read_timeout(5);
  EXPECT_FALSE(plain.Get("/v1/health"));
}

TEST_F(TlsApiTest, AnAgentNeedsAClientCertificateForItsMachine) {
  // Each machine's certificate is its own CA here: the file of both is the client CA list.
  const std::string r1 = dir_.path() + "/r1", r2 = dir_.path() + "/r2";
  ASSERT_TRUE(MakeSelfSignedCertificate(r1 + ".crt", r1 + ".key", {"r1"}).ok());
  ASSERT_TRUE(MakeSelfSignedCertificate(r2 + ".crt", r2 + ".key", {"r2"}).ok());
  const std::string cas = dir_.path() + "/agents.pem";
  {
    std::ofstream out(cas);
    out << ReadAll(r1 + ".crt") << ReadAll(r2 + ".crt");
  }
  ASSERT_NO_FATAL_FAILURE(Serve(cas));
  absl::StatusOr<std::string> agent =
      service_->CreateUser(alloc::Caller{"root", "", alloc::Role::kAdmin, ""}, "agent-r1", "",
                           alloc::Role::kAgent, "r1");
  ASSERT_TRUE(agent.ok()) << agent.status();
  const std::string report =
      json{{"cpu_milli", 1000},
           {"memory_mib", 1000},
           {"gpus",
            json::array({json{
                {"index", 0}, {"uuid", GpuUuid("r1", 0)}, {"model", "H100-80GB"}, {"mig", true}}})}}
          .dump();
  httplib::Result bare = Call("PUT", "/v1/nodes/r1", *agent, cert_, "", "", report);
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->status, 403) << bare->body;
  EXPECT_THAT(bare->body, HasSubstr("client certificate"));
  httplib::Result other =
      Call("PUT", "/v1/nodes/r1", *agent, cert_, r2 + ".crt", r2 + ".key", report);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 403) << other->body;
  httplib::Result own =
      Call("PUT", "/v1/nodes/r1", *agent, cert_, r1 + ".crt", r1 + ".key", report);
  ASSERT_TRUE(own) << httplib::to_string(own.error());
  EXPECT_EQ(own->status, 200) << own->body;
  // Users need no certificate.
  httplib::Result user = Call("GET", "/v1/classes", admin_, cert_);
  ASSERT_TRUE(user);
  EXPECT_EQ(user->status, 200);
}

}  // namespace
}  // namespace gpuslice::api
