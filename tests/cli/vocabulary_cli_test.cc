// One CLI vocabulary (issue 25, item 6), through the built binary: a mistyped command or option
// is named with the closest ones ("did you mean"), exits 2, and prints no CLI11 boilerplate; every
// duration option reads one syntax, and `--since` means "that long ago" in every command; a
// server's refusal is printed in words with its documented exit code, never as an HTTP code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"
#include "run_gpuslice.h"

namespace gpuslice::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunGpuslice;

TEST(Vocabulary, AMistypedCommandSuggestsTheClosest) {
  const testing::CommandResult top = RunGpuslice("relase 3");
  EXPECT_EQ(top.exit_code, 2);
  EXPECT_THAT(top.output, HasSubstr("unknown command 'relase' for 'gpuslice'; did you mean "
                                    "'release' or 'lease'?"));
  EXPECT_THAT(top.output, HasSubstr("Run 'gpuslice --help' for its commands."));
  const testing::CommandResult nested = RunGpuslice("admin tenat ml");
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_THAT(nested.output,
              HasSubstr("unknown command 'tenat' for 'gpuslice admin'; did you mean 'tenant' or "
                        "'tenants'?"));
  const testing::CommandResult sim = RunGpuslice("sim creat m.json 1xH100-80GB");
  EXPECT_THAT(sim.output, HasSubstr("did you mean 'create'?"));
}

TEST(Vocabulary, AFarWordIsNamedWithoutAGuess) {
  const testing::CommandResult result = RunGpuslice("frobnicate");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.output, HasSubstr("unknown command 'frobnicate' for 'gpuslice'\n"));
  EXPECT_THAT(result.output, Not(HasSubstr("did you mean")));
}

TEST(Vocabulary, AMistypedOptionSuggestsTheCommandsOwn) {
  const testing::CommandResult gpus = RunGpuslice("gpus --jsn");
  EXPECT_EQ(gpus.exit_code, 2);
  EXPECT_THAT(gpus.output,
              HasSubstr("unknown option '--jsn' for 'gpuslice gpus'; did you mean '--json'?"));
  const testing::CommandResult acquire = RunGpuslice("acquire --clas=small --purpose x");
  EXPECT_EQ(acquire.exit_code, 2);
  EXPECT_THAT(acquire.output, HasSubstr("unknown option '--clas' for 'gpuslice acquire'; did you "
                                        "mean '--class'"));
}

// A loopback stand-in for the API: answers every request with `status` and `body`, and keeps
// the last request's path and query.
class StandInApi {
 public:
  StandInApi(int status, nlohmann::json body) {
    auto answer = [this, status, body](const httplib::Request& request,
                                       httplib::Response& response) {
      std::lock_guard<std::mutex> hold(mutex_);
      last_target_ = request.path;
      last_body_ = nlohmann::json::parse(request.body, nullptr, false);
      for (const auto& [key, value] : request.params) params_[key] = value;
      response.status = status;
      response.set_content(body.dump(), "application/json");
    };
    server_.Get(".*", answer);
    server_.Post(".*", answer);
    server_.Put(".*", answer);
    server_.Delete(".*", answer);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~StandInApi() {
    server_.stop();
    thread_.join();
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string Param(const std::string& key) const {
    std::lock_guard<std::mutex> hold(mutex_);
    auto it = params_.find(key);
    return it == params_.end() ? "" : it->second;
  }
  std::string last_target() const {
    std::lock_guard<std::mutex> hold(mutex_);
    return last_target_;
  }
  nlohmann::json last_body() const {
    std::lock_guard<std::mutex> hold(mutex_);
    return last_body_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mutex_;  // the server's thread writes what the test reads
  std::string last_target_;
  nlohmann::json last_body_;
  std::map<std::string, std::string> params_;
};

std::int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(Vocabulary, AuditSinceABareNumberIsThatManySecondsAgo) {
  StandInApi api(200, {{"events", nlohmann::json::array()}});
  const std::int64_t before = Now();
  const testing::CommandResult audit =
      RunGpuslice("audit --since 60 --token gs_x --server " + api.Url());
  const std::int64_t after = Now();
  ASSERT_EQ(audit.exit_code, 0) << audit.output;
  std::int64_t since = 0;
  ASSERT_TRUE(absl::SimpleAtoi(api.Param("since"), &since)) << api.last_target();
  EXPECT_GE(since, before - 60);
  EXPECT_LE(since, after - 60);
  // A date in RFC 3339 and @EPOCH are points in time.
  ASSERT_EQ(RunGpuslice("audit --since 2026-12-01 --token gs_x --server " + api.Url()).exit_code,
            0);
  EXPECT_EQ(api.Param("since"), "1796083200");
  ASSERT_EQ(RunGpuslice("audit --since @1733000000 --token gs_x --server " + api.Url()).exit_code,
            0);
  EXPECT_EQ(api.Param("since"), "1733000000");
}

TEST(Vocabulary, DurationOptionsReadOneSyntax) {
  StandInApi api(200, {{"id", 7}, {"state", "active"}});
  // 1h30m is sent as seconds; a malformed one is a usage error that shows the forms.
  const testing::CommandResult renew =
      RunGpuslice("renew 7 --ttl 1h30m --token gs_x --server " + api.Url());
  EXPECT_EQ(api.last_target(), "/v1/leases/7/renew") << renew.output;
  EXPECT_EQ(api.last_body(), nlohmann::json({{"ttl_s", 5400}})) << renew.output;
  const testing::CommandResult bad = RunGpuslice("renew 7 --ttl 90x --token gs_x");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--ttl"));
  EXPECT_THAT(bad.output, HasSubstr("90x"));
  const testing::CommandResult tick = RunGpuslice("serve --tick 2h");
  EXPECT_EQ(tick.exit_code, 2) << tick.output;
  EXPECT_THAT(tick.output, HasSubstr("--tick"));
  const testing::CommandResult report = RunGpuslice("report usage --since 1970-01-01");
  EXPECT_EQ(report.exit_code, 2) << report.output;
  EXPECT_THAT(report.output, HasSubstr("--since"));
}

TEST(Vocabulary, RefusalsAreWordsWithTheirExitCodes) {
  struct Case {
    int http;
    const char* words;
    int exit_code;
  };
  for (const Case& c : {Case{401, "gpuslice: not signed in: no such token (check --token", 3},
                        Case{403, "gpuslice: not allowed: no such token", 3},
                        Case{404, "gpuslice: not found: no such token", 1},
                        Case{429, "gpuslice: too many attempts: no such token", 1},
                        Case{500, "gpuslice: the server failed: no such token", 1}}) {
    StandInApi api(c.http, {{"error", "no such token"}});
    const testing::CommandResult leases = RunGpuslice("leases --token gs_x --server " + api.Url());
    EXPECT_EQ(leases.exit_code, c.exit_code) << c.http << ": " << leases.output;
    EXPECT_THAT(leases.output, HasSubstr(c.words)) << c.http;
    EXPECT_THAT(leases.output, Not(HasSubstr(std::to_string(c.http)))) << c.http;
    EXPECT_THAT(leases.output, Not(HasSubstr("{"))) << c.http;
  }
  // Unreachable is exit 2, and says where it looked.
  const testing::CommandResult down =
      RunGpuslice("leases --token gs_x --server http://127.0.0.1:1");
  EXPECT_EQ(down.exit_code, 2) << down.output;
  EXPECT_THAT(down.output, HasSubstr("cannot reach http://127.0.0.1:1"));
}

// A hostile server's words reach the terminal escaped: no escape sequence (C0 or C1; broken
// UTF-8 never parses as JSON, and util_test covers it); likewise an acquire's refusal and a queued
// answer's reason.
TEST(Vocabulary, AServersControlCharactersAreShownEscaped) {
  StandInApi api(403, {{"error",
                        "no\x1b[2J\x1b]0;pwned\x07 \xc2\x9b"
                        "31m"}});
  const testing::CommandResult leases = RunGpuslice("leases --token gs_x --server " + api.Url());
  EXPECT_EQ(leases.exit_code, 3) << leases.output;
  EXPECT_THAT(leases.output, HasSubstr("not allowed: no\\x1b[2J\\x1b]0;pwned\\x07 \\xc2\\x9b31m"));
  EXPECT_THAT(leases.output, Not(HasSubstr("\x1b")));
  StandInApi refusal(409, {{"error", "full\x1b[2J"}});
  const testing::CommandResult acquire =
      RunGpuslice("acquire --class small --purpose t --token gs_x --server " + refusal.Url());
  EXPECT_EQ(acquire.exit_code, 1) << acquire.output;
  EXPECT_THAT(acquire.output, HasSubstr("refused: full\\x1b[2J"));
  StandInApi queued(
      202, {{"queued", {{"id", 4}, {"position", 1}, {"class", "small\r"}}}, {"reason", 7}});
  const testing::CommandResult wait =
      RunGpuslice("acquire --class small --purpose t --token gs_x --server " + queued.Url());
  EXPECT_EQ(wait.exit_code, 4) << wait.output;
  EXPECT_THAT(wait.output, HasSubstr("queued as 4, position 1 in class small\\x0d: 7"));
}

// Every command names its machine with --sim: a state file or a fleet; the sim commands take the
// file as --sim too, and the old agent/serve spellings still work, hidden from --help.
TEST(Vocabulary, OneWayToNameASimulatedMachine) {
  const std::string dir = ::testing::TempDir() + "/vocabulary-sim";
  ASSERT_EQ(testing::Shell("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").exit_code, 0);
  const std::string file = dir + "/m.json";
  ASSERT_EQ(RunGpuslice("sim create '" + file + "' 1xA100-40GB").exit_code, 0);
  const testing::CommandResult fleet = RunGpuslice("status --sim 1xH100-80GB,1xL4");
  EXPECT_EQ(fleet.exit_code, 0) << fleet.output;
  EXPECT_THAT(fleet.output, HasSubstr("simulator (in memory): 2 GPU(s)"));
  EXPECT_THAT(fleet.output, HasSubstr("(H100-80GB)"));
  const testing::CommandResult state = RunGpuslice("status --sim '" + file + "'");
  EXPECT_EQ(state.exit_code, 0) << state.output;
  EXPECT_THAT(state.output, HasSubstr("(A100-40GB)"));
  const testing::CommandResult show = RunGpuslice("sim show --sim '" + file + "'", false);
  EXPECT_EQ(show.exit_code, 0) << show.output;
  EXPECT_THAT(show.output, HasSubstr("\"driver_version\""));
  const testing::CommandResult neither = RunGpuslice("status --sim '" + dir + "/nope.json'");
  EXPECT_EQ(neither.exit_code, 2) << neither.output;
  EXPECT_THAT(neither.output, HasSubstr("no such state file"));
  for (const char* command : {"agent", "serve"}) {
    const testing::CommandResult help = RunGpuslice(std::string(command) + " --help");
    EXPECT_THAT(help.output, HasSubstr("--sim ")) << command;
    EXPECT_THAT(help.output, Not(HasSubstr("--sim-fleet"))) << command;
  }
}

// -o is the output format in every command; a config is selected with -c everywhere.
TEST(Vocabulary, DashOIsAFormatAndDashCAConfig) {
  const std::string plan = std::string("plan -w '") + GPUSLICE_SOURCE_DIR +
                           "/examples/plan/workloads.yaml' -f '" + GPUSLICE_SOURCE_DIR +
                           "/examples/plan/fleet.yaml' --fast ";
  const testing::CommandResult json = RunGpuslice(plan + "-o json", false);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_TRUE(nlohmann::json::parse(json.output, nullptr, false).is_object()) << json.output;
  const std::string dir = ::testing::TempDir() + "/vocabulary-plan";
  ASSERT_EQ(testing::Shell("rm -rf '" + dir + "'").exit_code, 0);
  const testing::CommandResult files = RunGpuslice(plan + "-o yaml --out-dir '" + dir + "'", false);
  ASSERT_EQ(files.exit_code, 0) << files.output;
  EXPECT_THAT(files.output, HasSubstr("baselines:"));
  EXPECT_EQ(testing::Shell("test -s '" + dir + "/mig-config.yaml'").exit_code, 0);
  const testing::CommandResult both = RunGpuslice(plan + "-o out --out-dir '" + dir + "'");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_THAT(both.output, HasSubstr("the files go to --out-dir"));
  const testing::CommandResult named = RunGpuslice("check H100-80GB 3g.40gb,3g.40gb -c mine");
  EXPECT_EQ(named.exit_code, 0) << named.output;
  EXPECT_THAT(named.output, HasSubstr("\n    mine:\n"));
  const testing::CommandResult old = RunGpuslice("check H100-80GB 3g.40gb --config-name theirs");
  EXPECT_THAT(old.output, HasSubstr("\n    theirs:\n"));
}

}  // namespace
}  // namespace gpuslice::cli
