// Black-box tests of `gpuslice serve` and its client commands: the built binary serves a simulated
// fleet on a loopback port as a child process; the client commands (admin tenant/user, acquire,
// leases, release, audit) talk to it through GPUSLICE_SERVER/GPUSLICE_TOKEN; SIGTERM stops it
// cleanly; a restart on the same store keeps the tenants and the first admin. Also: a client with
// no server, and bad --listen values.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/run_gpuslice.h"
#include "cli/serve_process.h"
#include "nlohmann/json.hpp"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Outcome = gpuslice::cli::testing::CommandResult;
using gpuslice::cli::testing::FirstLine;
using gpuslice::cli::testing::HttpGet;
using gpuslice::cli::testing::Loopback;
using gpuslice::cli::testing::PickPort;
using gpuslice::cli::testing::ReadFile;
using gpuslice::cli::testing::ScopedEnv;
using gpuslice::cli::testing::WaitUntil;
using ServeProcess = gpuslice::cli::testing::GpusliceProcess;

namespace fs = std::filesystem;

Outcome Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

std::string FreshDir(const std::string& name) {
  return gpuslice::cli::testing::FreshDir("gpuslice_serve_cli_" + name);
}

std::vector<std::string> ServeArgs(const std::string& dir, int port) {
  return gpuslice::cli::testing::ServeArgs("2xA100-80GB", dir, port);
}

TEST(ServeCliTest, ServesClientsStopsOnSigtermAndKeepsStateAcrossRestarts) {
  const std::string dir = FreshDir("lifecycle");
  const int port = PickPort(1);
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);

  ServeProcess server;
  server.Start(ServeArgs(dir, port), dir + "/serve1.log");
  ASSERT_TRUE(server.WaitHealthy(port)) << server.Output();
  const std::string health = HttpGet(port, "/v1/health");
  EXPECT_THAT(health, HasSubstr("\"store\":\"sqlite\""));
  EXPECT_THAT(health, HasSubstr("\"gpus\":2"));
  // The banner follows the listening socket: it may come a moment after the first health answer.
  EXPECT_TRUE(WaitUntil([&] { return server.Output().find("SIMULATED") != std::string::npos; },
                        std::chrono::seconds(10)))
      << server.Output();

  // The admin token file: one line, owner-only.
  const std::string token_file = dir + "/t";
  const std::string admin_token = FirstLine(ReadFile(token_file));
  ASSERT_THAT(admin_token, HasSubstr("gs_"));
  struct stat info {};
  ASSERT_EQ(stat(token_file.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_THAT(server.Output(), Not(HasSubstr(admin_token)));

  ScopedEnv server_env("GPUSLICE_SERVER", url);
  ScopedEnv token_env("GPUSLICE_TOKEN", admin_token);

  Outcome tenant = Gpuslice("admin tenant team-a --quota small=1");
  ASSERT_EQ(tenant.exit_code, 0) << tenant.output;
  EXPECT_THAT(tenant.output, HasSubstr("team-a"));
  Outcome user = Gpuslice("admin user ann --tenant team-a", /*with_stderr=*/false);
  ASSERT_EQ(user.exit_code, 0) << user.output;
  const std::string ann = FirstLine(user.output);
  ASSERT_THAT(ann, HasSubstr("gs_"));
  EXPECT_NE(ann, admin_token);

  token_env.Set(ann);
  Outcome acquired = Gpuslice("acquire --class small --purpose x");
  ASSERT_EQ(acquired.exit_code, 0) << acquired.output;
  EXPECT_THAT(acquired.output, HasSubstr("lease"));
  EXPECT_THAT(acquired.output, HasSubstr("MIG"));
  EXPECT_THAT(acquired.output, HasSubstr("purpose: x"));
  std::smatch match;
  ASSERT_TRUE(std::regex_search(acquired.output, match, std::regex(R"(lease (\d+))")))
      << acquired.output;
  const std::string id = match[1].str();

  Outcome second = Gpuslice("acquire --class small --purpose y");
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_THAT(second.output, HasSubstr("over quota"));

  Outcome leases = Gpuslice("leases --json", /*with_stderr=*/false);
  ASSERT_EQ(leases.exit_code, 0) << leases.output;
  const nlohmann::json listed = nlohmann::json::parse(leases.output, nullptr, false);
  ASSERT_TRUE(listed.is_object()) << leases.output;
  ASSERT_EQ(listed["leases"].size(), 1u) << leases.output;
  EXPECT_EQ(listed["leases"][0]["id"].get<std::int64_t>(), std::stoll(id));
  EXPECT_EQ(listed["leases"][0]["purpose"], "x");
  EXPECT_EQ(listed["leases"][0]["tenant"], "team-a");

  // Admin commands are forbidden to a tenant (exit 3); a wrong token is unauthorised (exit 3).
  // Both say so in words, with the server's reason, never as an HTTP code or raw JSON.
  Outcome forbidden = Gpuslice("admin tenant team-b");
  EXPECT_EQ(forbidden.exit_code, 3) << forbidden.output;
  EXPECT_THAT(forbidden.output, HasSubstr("gpuslice: not allowed: "));
  EXPECT_THAT(forbidden.output, Not(HasSubstr("403")));
  EXPECT_THAT(forbidden.output, Not(HasSubstr("{\"error\"")));
  Outcome wrong = Gpuslice("leases --token gs_wrong");
  EXPECT_EQ(wrong.exit_code, 3) << wrong.output;
  EXPECT_THAT(wrong.output, HasSubstr("gpuslice: not signed in: "));
  EXPECT_THAT(wrong.output, HasSubstr("(check --token or $GPUSLICE_TOKEN)"));
  EXPECT_THAT(wrong.output, Not(HasSubstr("401")));

  Outcome released = Gpuslice("release " + id);
  ASSERT_EQ(released.exit_code, 0) << released.output;
  EXPECT_THAT(released.output, HasSubstr("released lease " + id));
  Outcome again = Gpuslice("release " + id);
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_THAT(again.output, HasSubstr("gpuslice: not found: "));
  Outcome none = Gpuslice("leases");
  EXPECT_EQ(none.exit_code, 0) << none.output;
  EXPECT_THAT(none.output, HasSubstr("no leases"));

  Outcome audit = Gpuslice("audit");
  ASSERT_EQ(audit.exit_code, 0) << audit.output;
  EXPECT_THAT(audit.output, HasSubstr("  grant  lease " + id));
  EXPECT_THAT(audit.output, HasSubstr("  release  lease " + id));
  EXPECT_THAT(audit.output, HasSubstr("  refuse  "));
  EXPECT_THAT(audit.output, HasSubstr("purpose: x"));
  EXPECT_THAT(audit.output, Not(HasSubstr(ann.substr(3))));
  EXPECT_THAT(audit.output, Not(HasSubstr(admin_token.substr(3))));

  // SIGTERM: exits 0 within 5 s, saying it stops.
  const int code = server.Terminate(std::chrono::seconds(5));
  EXPECT_EQ(code, 0) << server.Output();
  EXPECT_THAT(server.Output(), HasSubstr("stopping"));
  EXPECT_EQ(HttpGet(port, "/v1/health"), "");
  const std::string log1 = server.Output();
  EXPECT_THAT(log1, Not(HasSubstr(ann.substr(3))));

  // Restart on the same store: the tenant and the user are still there, the token file is not
  // rewritten (an admin exists).
  const auto token_mtime = fs::last_write_time(token_file);
  const std::string token_text = ReadFile(token_file);
  ServeProcess restarted;
  restarted.Start(ServeArgs(dir, port), dir + "/serve2.log");
  ASSERT_TRUE(restarted.WaitHealthy(port)) << restarted.Output();
  EXPECT_TRUE(WaitUntil(
      [&] { return restarted.Output().find("an admin exists already") != std::string::npos; },
      std::chrono::seconds(10)))
      << restarted.Output();
  EXPECT_EQ(ReadFile(token_file), token_text);
  EXPECT_EQ(fs::last_write_time(token_file), token_mtime);
  EXPECT_FALSE(fs::exists(token_file + ".tmp"));
  token_env.Set(admin_token);
  // The quota survived the restart: in the API's JSON, and in the table printed by default.
  Outcome tenants = Gpuslice("admin tenants --json", /*with_stderr=*/false);
  ASSERT_EQ(tenants.exit_code, 0) << tenants.output;
  EXPECT_THAT(tenants.output, HasSubstr("\"team-a\""));
  EXPECT_THAT(tenants.output, HasSubstr("\"small\": 1"));
  Outcome table = Gpuslice("admin tenants");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_THAT(table.output, HasSubstr("TENANT"));
  EXPECT_THAT(table.output, HasSubstr("small=1"));
  token_env.Set(ann);
  Outcome history = Gpuslice("leases --all --json", /*with_stderr=*/false);
  ASSERT_EQ(history.exit_code, 0) << history.output;
  const nlohmann::json all = nlohmann::json::parse(history.output, nullptr, false);
  ASSERT_TRUE(all.is_object()) << history.output;
  ASSERT_EQ(all["leases"].size(), 1u) << history.output;
  EXPECT_EQ(all["leases"][0]["state"], "released");
  // The quota still holds after the restart: one lease, then over quota.
  Outcome after_restart = Gpuslice("acquire --class small --purpose z");
  EXPECT_EQ(after_restart.exit_code, 0) << after_restart.output;
  Outcome over = Gpuslice("acquire --class small --purpose zz --no-wait");
  EXPECT_EQ(over.exit_code, 1) << over.output;
  EXPECT_THAT(over.output, HasSubstr("over quota"));
  EXPECT_EQ(restarted.Terminate(std::chrono::seconds(5)), 0) << restarted.Output();
  EXPECT_THAT(restarted.Output(), HasSubstr("stopping"));
}

TEST(ServeCliTest, ClientWithoutAServerNamesTheUrlAndFails) {
  const int port = PickPort(2);
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  ScopedEnv server_env("GPUSLICE_SERVER", url);
  ScopedEnv token_env("GPUSLICE_TOKEN", "gs_0000");
  Outcome acquired = Gpuslice("acquire --class small --purpose x");
  EXPECT_NE(acquired.exit_code, 0) << acquired.output;
  EXPECT_THAT(acquired.output, HasSubstr(url));
  EXPECT_THAT(acquired.output, HasSubstr("gpuslice serve"));
  EXPECT_THAT(acquired.output, Not(HasSubstr("gs_0000")));
  // --server wins over the environment.
  const int other = PickPort(3);
  const std::string other_url = "http://127.0.0.1:" + std::to_string(other);
  Outcome leases = Gpuslice("leases --server " + other_url);
  EXPECT_NE(leases.exit_code, 0) << leases.output;
  EXPECT_THAT(leases.output, HasSubstr(other_url));
}

TEST(ServeCliTest, BadListenAddressesExitTwo) {
  const std::string dir = FreshDir("bad_listen");
  for (const std::string& listen :
       {std::string("bad"), std::string("127.0.0.1:99999"), std::string("127.0.0.1:abc"),
        std::string("127.0.0.1:-1"), std::string("")}) {
    Outcome served = Gpuslice("serve --sim-fleet 2xA100-80GB --listen '" + listen + "' --db '" +
                              dir + "/g.db' --admin-token-file '" + dir + "/t' --tick 1");
    EXPECT_EQ(served.exit_code, 2) << "--listen '" << listen << "': " << served.output;
    EXPECT_THAT(served.output, HasSubstr("--listen")) << listen;
    // Nothing was created.
    EXPECT_FALSE(fs::exists(dir + "/g.db")) << listen;
    EXPECT_FALSE(fs::exists(dir + "/t")) << listen;
  }
}

TEST(ServeCliTest, AnAddressInUseFailsWithAMessage) {
  const std::string dir = FreshDir("in_use");
  const int port = PickPort(4);
  ASSERT_GT(port, 0);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = Loopback(port);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  Outcome served =
      Gpuslice("serve --sim-fleet 2xA100-80GB --listen 127.0.0.1:" + std::to_string(port) +
               " --db '" + dir + "/g.db' --admin-token-file '" + dir + "/t' --tick 1");
  close(fd);
  EXPECT_EQ(served.exit_code, 1) << served.output;
  EXPECT_THAT(served.output, HasSubstr("cannot listen"));
}

// Regression: a second `gpuslice serve` on the port of a running one once kept running (cpp-httplib
// 0.11.4 binds with SO_REUSEPORT, so the kernel spread the clients' connections over two services
// with different stores). Input: two `serve` processes with the same --listen 127.0.0.1:PORT and
// different --db; expected: the second exits 1 with "cannot listen on 127.0.0.1:PORT (in use ...)".
TEST(ServeCliTest, ASecondServeOnTheSamePortFails) {
  const std::string dir = FreshDir("twice");
  fs::create_directories(dir + "/first");
  fs::create_directories(dir + "/second");
  const int port = PickPort(5);
  ASSERT_GT(port, 0);
  ServeProcess first;
  first.Start(ServeArgs(dir + "/first", port), dir + "/first.log");
  ASSERT_TRUE(first.WaitHealthy(port)) << first.Output();
  ServeProcess second;
  second.Start(ServeArgs(dir + "/second", port), dir + "/second.log");
  // The second one should give up as soon as it tries to listen; allow 30 s (sanitizer builds
  // start slowly), then stop it if it is still running.
  int code = -1;
  for (int i = 0; i < 300 && code == -1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (second.Output().find("cannot listen") != std::string::npos) {
      // It exits by itself (a sanitizer build takes a while to finish its exit checks).
      code = second.WaitExit(std::chrono::seconds(30));
    }
  }
  if (code == -1) {
    ADD_FAILURE() << "a second serve runs on port " << port << ":\n" << second.Output();
    second.Terminate(std::chrono::seconds(5));
  } else {
    EXPECT_EQ(code, 1) << second.Output();
  }
  EXPECT_EQ(first.Terminate(std::chrono::seconds(5)), 0) << first.Output();
}

TEST(ServeCliTest, BadSimFleetExitsTwo) {
  const std::string dir = FreshDir("bad_fleet");
  // --sim, and --sim-fleet as it was spelled before one --sim (kept, hidden).
  for (const std::string option : {"--sim", "--sim-fleet"}) {
    Outcome served = Gpuslice("serve " + option + " 2xNOPE --listen 127.0.0.1:1 --db '" + dir +
                              "/g.db' --admin-token-file '" + dir + "/t'");
    EXPECT_EQ(served.exit_code, 2) << served.output;
    EXPECT_THAT(served.output, HasSubstr("--sim 2xNOPE: no such state file, and not a fleet spec"));
  }
}

}  // namespace
