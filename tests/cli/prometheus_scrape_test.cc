// Monitoring end to end.
//
// MetricsListenerTest: the agent's /metrics listener (gpuslice/server/metrics_listener.h) on a
// loopback port: the provider's text with Prometheus's content type, 500 with the message when the
// provider fails, 404 elsewhere, a port in use refused, Stop idempotent and the port closed after
// it.
//
// PrometheusScrapeTest: a real Prometheus server (Debian's /usr/bin/prometheus; the test is
// skipped only when it is absent) scrapes `gpuslice serve` (simulated 1xA30-24GB, SQLite in a
// scratch dir, admin token through `authorization: credentials_file`) and `gpuslice agent
// --metrics-listen` (a simulated H100 kept in a state file, MIG on) every second on loopback. A
// lease holds serve's whole A30 as a 4g.24gb instance, a second one a 1g.10gb instance on the
// agent's machine, with a process of 1234 MiB in it. Through Prometheus's HTTP API the test reads
// back both targets up, the agent's per-instance memory series (DCGM_FI_DEV_FB_USED with GPU_I_ID,
// GPU_I_PROFILE and the GPU's UUID) and process memory, and the lease series of both
// (gpuslice_lease_info, with the MIG device's UUID).
// Every wait is bounded (30 s); every process is killed at the end, also on failure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli/run_gpuslice.h"
#include "cli/serve_process.h"
#include "gpuslice/server/metrics_listener.h"
#include "nlohmann/json.hpp"
#include "require.h"

namespace {

using gpuslice::cli::testing::FreeLoopbackPort;
using gpuslice::cli::testing::GpusliceProcess;
using gpuslice::cli::testing::HttpGet;
using gpuslice::cli::testing::ReadFile;
using gpuslice::cli::testing::RunGpuslice;
using gpuslice::cli::testing::ServeFixture;
using gpuslice::cli::testing::Tail;
using gpuslice::cli::testing::WaitUntil;
using gpuslice::server::ListenAddress;
using gpuslice::server::MetricsListener;
using gpuslice::server::ParseListenAddress;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr auto kWait = std::chrono::seconds(30);
constexpr const char* kPrometheus = "/usr/bin/prometheus";

// ---------------------------------------------------------------------------------------------
// The listener.

TEST(ParseListenAddressTest, TakesHostAndPort) {
  absl::StatusOr<ListenAddress> v4 = ParseListenAddress("127.0.0.1:9401");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 9401);
  absl::StatusOr<ListenAddress> v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  for (const char* bad : {"9401", ":9401", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:70000",
                          "127.0.0.1:-1", "[]:9401"}) {
    absl::StatusOr<ListenAddress> parsed = ParseListenAddress(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(MetricsListenerTest, ServesTheProvidersTextOnGetMetricsOnly) {
  int calls = 0;
  MetricsListener listener([&calls]() -> absl::StatusOr<std::string> {
    ++calls;
    return "# HELP up_test A test.\n# TYPE up_test gauge\nup_test 1\n";
  });
  ASSERT_TRUE(listener.Start({"127.0.0.1", 0}).ok());
  ASSERT_GT(listener.port(), 0);

  const std::string reply = HttpGet(listener.port(), "/metrics");
  ASSERT_THAT(reply, StartsWith("HTTP/1.1 200")) << reply;
  EXPECT_THAT(reply, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(reply,
              HasSubstr("\r\n\r\n# HELP up_test A test.\n# TYPE up_test gauge\nup_test 1\n"));
  EXPECT_EQ(calls, 1);

  const std::string other = HttpGet(listener.port(), "/v1/health");
  EXPECT_THAT(other, StartsWith("HTTP/1.1 404")) << other;
  EXPECT_THAT(other, HasSubstr("GET /metrics"));
  EXPECT_THAT(HttpGet(listener.port(), "/metrics/x"), StartsWith("HTTP/1.1 404"));
  EXPECT_EQ(calls, 1);

  const int port = listener.port();
  listener.Stop();
  listener.Stop();
  EXPECT_EQ(listener.port(), 0);
  EXPECT_EQ(HttpGet(port, "/metrics"), "") << "still answering after Stop";
}

TEST(MetricsListenerTest, AFailingProviderGives500WithItsMessage) {
  MetricsListener listener(
      []() -> absl::StatusOr<std::string> { return absl::UnavailableError("NVML is gone"); });
  ASSERT_TRUE(listener.Start({"127.0.0.1", 0}).ok());
  const std::string reply = HttpGet(listener.port(), "/metrics");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 500")) << reply;
  EXPECT_THAT(reply, HasSubstr("NVML is gone"));
}

// Wave 1's agent listener had no authentication; with a token, a scrape must send it.
TEST(MetricsListenerTest, WithATokenOnlyScrapesThatSendItAreAnswered) {
  MetricsListener listener([]() -> absl::StatusOr<std::string> { return std::string("x 1\n"); });
  listener.RequireToken("s3cret");
  ASSERT_TRUE(listener.Start({"127.0.0.1", 0}).ok());
  EXPECT_THAT(HttpGet(listener.port(), "/metrics"), StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(HttpGet(listener.port(), "/metrics", "wrong"), StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(HttpGet(listener.port(), "/metrics", "s3cret"), StartsWith("HTTP/1.1 200"));
  EXPECT_FALSE(gpuslice::server::NeedsToken({"127.0.0.1", 1}));
  EXPECT_FALSE(gpuslice::server::NeedsToken({"::1", 1}));
  EXPECT_TRUE(gpuslice::server::NeedsToken({"0.0.0.0", 1}));
  EXPECT_TRUE(gpuslice::server::NeedsToken({"10.0.0.5", 1}));
}

TEST(MetricsListenerTest, APortInUseIsRefused) {
  MetricsListener first([]() -> absl::StatusOr<std::string> { return std::string(); });
  ASSERT_TRUE(first.Start({"127.0.0.1", 0}).ok());
  MetricsListener second([]() -> absl::StatusOr<std::string> { return std::string(); });
  const absl::Status status = second.Start({"127.0.0.1", first.port()});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(second.port(), 0);
  // The first one still answers.
  EXPECT_THAT(HttpGet(first.port(), "/metrics"), StartsWith("HTTP/1.1 200"));
}

// ---------------------------------------------------------------------------------------------
// A real Prometheus server.

// A program as a child process in its own process group, its output in a log file; the group is
// killed (SIGTERM, then SIGKILL) at Stop or destruction, and the child dies with the test.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { Stop(); }

  void Start(const std::vector<std::string>& argv, const std::string& log) {
    log_ = log;
    std::vector<std::string> args = argv;
    std::vector<char*> pointers;
    for (std::string& arg : args) pointers.push_back(arg.data());
    pointers.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(125);
      std::FILE* out = std::freopen(log.c_str(), "w", stdout);
      if (out == nullptr) _exit(126);
      dup2(fileno(stdout), fileno(stderr));
      execv(pointers[0], pointers.data());
      _exit(127);
    }
    ASSERT_GT(pid_, 0) << "fork failed";
    setpgid(pid_, pid_);
  }

  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGTERM);
    for (int i = 0; i < 50 && Running(); ++i) gpuslice::cli::testing::SleepMs(100);
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }

  std::string Output() const { return ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

std::string UrlEncode(const std::string& text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

class PrometheusScrapeTest : public ServeFixture {
 protected:
  void SetUp() override {
    if (access(kPrometheus, X_OK) != 0) {
      GPUSLICE_SKIP_OR_FAIL_IN_CI(kPrometheus << " is not installed (Debian package prometheus; "
                                              << "scripts/setup.sh installs it)");
    }
    static int salt = 930;
    ASSERT_NO_FATAL_FAILURE(StartServer("gpuslice_prometheus_", "1xA30-24GB", salt++));
    ASSERT_NO_FATAL_FAILURE(AddTeamA());
    ASSERT_NO_FATAL_FAILURE(AddUser("agent-remote1 --agent --machine remote1", &agent_token_));
  }

  void TearDown() override {
    if (IsSkipped()) return;
    if (HasFailure()) {
      std::cerr << "--- agent log\n"
                << Tail(agent_.Output()) << "\n--- prometheus log\n"
                << Tail(prometheus_.Output()) << "\n";
    }
    prometheus_.Stop();
    agent_.Kill();
    ServeFixture::TearDown();
  }

  // The JSON of GET path on Prometheus (null when it does not answer 200).
  json Api(const std::string& path) {
    httplib::Client client("127.0.0.1", prometheus_port_);
    client.set_connection_timeout(2);
    client.set_read_timeout(5);
    httplib::Result result = client.Get(path.c_str());
    if (!result || result->status != 200) return json();
    json parsed = json::parse(result->body, nullptr, false);
    return parsed.is_discarded() ? json() : parsed;
  }

  // The series an instant query returns (an empty array when it fails or finds none).
  json Query(const std::string& promql) {
    json reply = Api("/api/v1/query?query=" + UrlEncode(promql));
    if (!reply.is_object() || reply.value("status", "") != "success") return json::array();
    return reply["data"]["result"];
  }

  // Polls `promql` until it returns exactly one series for which `good` holds; that series
  // (null after kWait).
  json WaitForOne(const std::string& promql, const std::function<bool(const json&)>& good) {
    json found;
    WaitUntil(
        [&] {
          const json series = Query(promql);
          if (series.size() != 1 || !good(series[0])) return false;
          found = series[0];
          return true;
        },
        kWait);
    EXPECT_TRUE(found.is_object()) << promql << " gave " << Query(promql).dump();
    return found;
  }

  static double Value(const json& series) {
    return std::stod(series["value"][1].get<std::string>());
  }
  static std::string Label(const json& series, const std::string& name) {
    return series["metric"].value(name, std::string("(absent)"));
  }

  std::string agent_token_;
  int agent_metrics_port_ = 0;
  int prometheus_port_ = 0;
  GpusliceProcess agent_;
  Child prometheus_;
};

TEST_F(PrometheusScrapeTest, ScrapesServeAndAnAgentAndQueriesPerInstanceSeriesBack) {
  // Lease 1 holds serve's whole A30 (a 4g.24gb instance), so the next small slice goes to remote1.
  const json first = Json("acquire --token " + ann_token_ + " --profile 4g.24gb --purpose fill");
  ASSERT_TRUE(first.is_object() && first.contains("lease")) << first.dump();
  const std::int64_t serve_lease = first["lease"]["id"].get<std::int64_t>();

  // The agent's machine: a simulated H100 in a state file, MIG on, no instances yet.
  const std::string state = dir_ + "/remote1.json";
  ASSERT_EQ(RunGpuslice("sim create " + state + " 1xH100-80GB").exit_code, 0);
  std::ofstream(dir_ + "/mig-on.yaml") << "version: v1\nmig-configs:\n  mig-on:\n"
                                          "    - devices: all\n      mig-enabled: true\n"
                                          "      mig-devices: {}\n";
  const gpuslice::cli::testing::CommandResult mig =
      RunGpuslice("apply --sim " + state + " -f " + dir_ + "/mig-on.yaml -c mig-on");
  ASSERT_EQ(mig.exit_code, 0) << mig.output;
  agent_metrics_port_ = FreeLoopbackPort();
  ASSERT_GT(agent_metrics_port_, 0);
  agent_.Start({"agent", "--server", url_, "--token", agent_token_, "--host", "remote1",
                "--sim-state", state, "--interval", "1", "--metrics-listen",
                "127.0.0.1:" + std::to_string(agent_metrics_port_)},
               dir_ + "/agent.log");
  ASSERT_TRUE(
      WaitUntil([&] { return agent_.Output().find("reported") != std::string::npos; }, kWait))
      << agent_.Output();

  // Lease 2: a small slice on remote1, set up by the agent, with a process of 1234 MiB in it.
  const json second = Json("acquire --token " + ann_token_ + " --class small --purpose eval");
  ASSERT_TRUE(second.is_object() && second.contains("lease")) << second.dump();
  const std::int64_t agent_lease = second["lease"]["id"].get<std::int64_t>();
  ASSERT_THAT(second["lease"]["node"].get<std::string>(), StartsWith("remote1/"));
  json bound;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const json leases = Json("leases --all");
        if (!leases.is_object() || !leases.contains("leases")) return false;
        for (const json& l : leases["leases"]) {
          if (l["id"] != agent_lease || !l.contains("bound") || l["bound"].size() != 1) continue;
          bound = l["bound"][0];
          return true;
        }
        return false;
      },
      kWait))
      << agent_.Output();
  const std::string uuid = bound["uuid"].get<std::string>();  // the MIG device's
  const std::string gpu_uuid = bound["gpu_uuid"].get<std::string>();
  const std::string gi = std::to_string(bound["gi"].get<int>());
  const gpuslice::cli::testing::CommandResult process = RunGpuslice(
      "sim process add " + state + " --gpu " + std::to_string(bound["gpu_index"].get<int>()) +
      " --gi " + gi + " --ci " + std::to_string(bound["ci"].get<int>()) +
      " --pid 4242 --memory 1234 --name trainer");
  ASSERT_EQ(process.exit_code, 0) << process.output;

  // Prometheus: both targets every second, serve with the admin token from its file.
  prometheus_port_ = FreeLoopbackPort();
  ASSERT_GT(prometheus_port_, 0);
  const std::string config = dir_ + "/prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                        << "scrape_configs:\n"
                        << "  - job_name: gpuslice-serve\n"
                        << "    authorization:\n      credentials_file: " << dir_ << "/t\n"
                        << "    static_configs:\n      - targets: ['127.0.0.1:" << port_ << "']\n"
                        << "  - job_name: gpuslice-agent\n"
                        << "    static_configs:\n      - targets: ['127.0.0.1:"
                        << agent_metrics_port_ << "']\n";
  prometheus_.Start(
      {kPrometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir_ + "/tsdb",
       "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port_)},
      dir_ + "/prometheus.log");
  ASSERT_TRUE(WaitUntil(
      [&] {
        return HttpGet(prometheus_port_, "/-/ready").rfind("HTTP/1.1 200", 0) == 0 ||
               !prometheus_.Running();
      },
      kWait));
  ASSERT_TRUE(prometheus_.Running()) << prometheus_.Output();

  // Both targets up.
  std::map<std::string, std::string> health;
  const bool up = WaitUntil(
      [&] {
        health.clear();
        const json targets = Api("/api/v1/targets");
        if (!targets.is_object()) return false;
        for (const json& t : targets["data"]["activeTargets"]) {
          health[t["labels"]["job"].get<std::string>()] =
              t["health"].get<std::string>() + " " + t.value("lastError", "");
        }
        return health["gpuslice-serve"] == "up " && health["gpuslice-agent"] == "up ";
      },
      kWait);
  ASSERT_TRUE(up) << "serve: " << health["gpuslice-serve"]
                  << "; agent: " << health["gpuslice-agent"];

  // The agent's MIG instance: its memory, under dcgm-exporter's name and labels.
  const json fb = WaitForOne("DCGM_FI_DEV_FB_USED{Hostname=\"remote1\",GPU_I_ID=\"" + gi + "\"}",
                             [](const json& s) { return Value(s) >= 1234; });
  ASSERT_TRUE(fb.is_object());
  EXPECT_EQ(Label(fb, "job"), "gpuslice-agent");
  EXPECT_EQ(Label(fb, "instance"), "127.0.0.1:" + std::to_string(agent_metrics_port_));
  EXPECT_EQ(Label(fb, "UUID"), gpu_uuid);  // as dcgm-exporter: the GPU's, and GPU_I_ID
  EXPECT_EQ(Label(fb, "GPU_I_PROFILE"), "1g.10gb");
  EXPECT_EQ(Label(fb, "gpu"), "0");
  EXPECT_THAT(Label(fb, "modelName"), HasSubstr("H100"));
  EXPECT_LE(Value(fb), 10240);  // within the 1g.10gb instance

  const json used =
      WaitForOne("gpuslice_process_memory_mib{Hostname=\"remote1\",GPU_I_ID=\"" + gi + "\"}",
                 [](const json& s) { return Value(s) == 1234; });
  ASSERT_TRUE(used.is_object());
  EXPECT_EQ(Label(used, "UUID"), gpu_uuid);

  // The agent's lease on that device; busy, so not idle.
  const json held =
      WaitForOne("gpuslice_lease_info{job=\"gpuslice-agent\"}", [](const json&) { return true; });
  ASSERT_TRUE(held.is_object());
  EXPECT_EQ(Label(held, "lease"), std::to_string(agent_lease));
  EXPECT_EQ(Label(held, "UUID"), uuid);
  EXPECT_EQ(Label(held, "GPU_I_ID"), gi);
  EXPECT_EQ(Value(held), 1);
  // Tenant and class: from the assignments the service sends the agent.
  EXPECT_EQ(Label(held, "tenant"), "team-a");
  EXPECT_EQ(Label(held, "class"), "small");
  const json idle = WaitForOne("gpuslice_lease_idle_seconds{job=\"gpuslice-agent\"}",
                               [](const json& s) { return Value(s) == 0; });
  EXPECT_TRUE(idle.is_object());

  // serve's own machine: the 4g.24gb instance and the lease holding it, with tenant and class.
  const json serve_fb = WaitForOne("DCGM_FI_DEV_FB_USED{job=\"gpuslice-serve\",GPU_I_ID!=\"\"}",
                                   [](const json&) { return true; });
  ASSERT_TRUE(serve_fb.is_object());
  EXPECT_EQ(Label(serve_fb, "GPU_I_PROFILE"), "4g.24gb");
  EXPECT_THAT(Label(serve_fb, "modelName"), HasSubstr("A30"));
  const json serve_held =
      WaitForOne("gpuslice_lease_info{job=\"gpuslice-serve\"}", [](const json&) { return true; });
  ASSERT_TRUE(serve_held.is_object());
  EXPECT_EQ(Label(serve_held, "lease"), std::to_string(serve_lease));
  EXPECT_EQ(Label(serve_held, "tenant"), "team-a");
  EXPECT_EQ(Label(serve_held, "class"), "profile:4g.24gb");
  EXPECT_EQ(Label(serve_held, "GPU_I_ID"), Label(serve_fb, "GPU_I_ID"));
  EXPECT_EQ(Value(serve_held), 1);
}

}  // namespace
