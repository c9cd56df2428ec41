// Black-box tests of `gpuslice top` on a simulated machine (an H100 with a 3g.40gb and a 1g.10gb
// instance, a process of 5000 MiB in the 3g.40gb, and an L40S without MIG): --once prints one
// plain frame with the instances, their memory and the process; --json the same as data; the
// leases of a configured server (here a small stand-in for GET /v1/leases) are shown on the
// devices they hold, and an unreachable server is a status line, not a failure; bad options exit 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>

#include "cli/run_gpuslice.h"
#include "cli/serve_process.h"
#include "nlohmann/json.hpp"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif

namespace {

using gpuslice::cli::testing::CommandResult;
using gpuslice::cli::testing::Shell;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

const char* const kLayout = R"(version: v1
mig-configs:
  top:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "1g.10gb": 1
)";

// `gpuslice ARGS` without the caller's service or simulator settings; stderr joins stdout unless
// `with_stderr` is false.
CommandResult Top(const std::string& args, bool with_stderr = true) {
  return Shell(
      std::string("env -u GPUSLICE_SERVER -u GPUSLICE_TOKEN -u GPUSLICE_SIM -u COLUMNS '") +
      GPUSLICE_BINARY + "' " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

class TopCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpuslice::cli::testing::FreshDir(
        std::string("gpuslice_top_cli_") +
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    state_ = dir_ + "/machine.json";
    CommandResult created = Top("sim create '" + state_ + "' 1xH100-80GB,1xL40S");
    ASSERT_EQ(created.exit_code, 0) << created.output;
    const std::string config = dir_ + "/layout.yaml";
    {
      std::FILE* file = std::fopen(config.c_str(), "w");
      ASSERT_NE(file, nullptr);
      std::fputs(kLayout, file);
      std::fclose(file);
    }
    CommandResult applied = Top("apply --sim '" + state_ + "' -f '" + config + "' -c top");
    ASSERT_EQ(applied.exit_code, 0) << applied.output;
    // The 3g.40gb instance: its GI id and MIG UUID, from `gpuslice status --json`.
    CommandResult status = Top("status --sim '" + state_ + "' --json", false);
    ASSERT_EQ(status.exit_code, 0) << status.output;
    const json parsed = json::parse(status.output, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << status.output;
    for (const json& device : parsed["gpus"][0]["mig_devices"]) {
      if (device["profile"] == "3g.40gb") {
        big_gi_ = device["gpu_instance"].get<int>();
        big_uuid_ = device["uuid"].get<std::string>();
      }
    }
    ASSERT_GE(big_gi_, 0) << status.output;
    CommandResult process =
        Top("sim process add '" + state_ + "' --gpu 0 --gi " + std::to_string(big_gi_) +
            " --ci 0 --pid 4242 --memory 5000 --name trainer");
    ASSERT_EQ(process.exit_code, 0) << process.output;
  }

  std::string dir_;
  std::string state_;
  int big_gi_ = -1;
  std::string big_uuid_;
};

// The line of the frame that starts with `prefix` ("" when there is none).
std::string LineStarting(const std::string& frame, const std::string& prefix) {
  std::size_t at = 0;
  while (at < frame.size()) {
    const std::size_t end = frame.find('\n', at);
    const std::string line = frame.substr(at, end == std::string::npos ? end : end - at);
    if (line.starts_with(prefix)) return line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

TEST_F(TopCliTest, OnceShowsTheInstancesTheirMemoryAndTheProcess) {
  const CommandResult top = Top("top --sim '" + state_ + "' --once --processes --width 200");
  ASSERT_EQ(top.exit_code, 0) << top.output;
  EXPECT_THAT(top.output, HasSubstr("gpuslice top · "));
  EXPECT_THAT(top.output, HasSubstr("simulator"));
  EXPECT_THAT(top.output, HasSubstr("GPU 0  NVIDIA H100 80GB HBM3 · MIG · "));
  EXPECT_THAT(top.output, HasSubstr("GPU 1  NVIDIA L40S · whole · "));
  // The drawing of the instances (as `gpuslice status` draws them).
  EXPECT_THAT(top.output, HasSubstr("memory slice (placement unit)"));
  EXPECT_THAT(top.output, HasSubstr("┌"));
  const std::string big = LineStarting(top.output, "  GI " + std::to_string(big_gi_) + " ");
  EXPECT_THAT(big, HasSubstr("3g.40gb")) << top.output;
  EXPECT_THAT(big, HasSubstr("4.88/")) << top.output;  // 5000 MiB in use
  EXPECT_THAT(big, HasSubstr("████")) << top.output;   // its placement units
  EXPECT_THAT(top.output, HasSubstr("1g.10gb"));
  EXPECT_THAT(top.output, HasSubstr("pid 4242 trainer 4.88 GiB"));
  EXPECT_THAT(top.output, HasSubstr("leases: no server configured"));
  EXPECT_EQ(top.output.find('\x1b'), std::string::npos) << "no escape codes with --once";
  for (std::size_t at = 0, end = 0; at < top.output.size(); at = end + 1) {
    end = top.output.find('\n', at);
    if (end == std::string::npos) end = top.output.size();
    std::size_t columns = 0;
    for (std::size_t i = at; i < end; ++i) {
      columns += (static_cast<unsigned char>(top.output[i]) & 0xC0) != 0x80 ? 1u : 0u;
    }
    EXPECT_LE(columns, 200u) << top.output.substr(at, end - at);
  }

  // --compact leaves the drawing out; a narrow width cuts lines instead of wrapping them.
  const CommandResult compact = Top("top --sim '" + state_ + "' --once --compact --width 50");
  ASSERT_EQ(compact.exit_code, 0) << compact.output;
  EXPECT_THAT(compact.output, Not(HasSubstr("memory slice")));
  EXPECT_THAT(compact.output, HasSubstr("…\n"));
}

TEST_F(TopCliTest, JsonHasTheInstanceItsMemoryAndTheProcess) {
  const CommandResult top = Top("top --sim '" + state_ + "' --json", false);
  ASSERT_EQ(top.exit_code, 0) << top.output;
  const json frame = json::parse(top.output, nullptr, false);
  ASSERT_TRUE(frame.is_object()) << top.output;
  ASSERT_EQ(frame["gpus"].size(), 2u) << top.output;
  const json& h100 = frame["gpus"][0];
  EXPECT_EQ(h100["mig"], true);
  EXPECT_EQ(frame["gpus"][1]["mig"], false);
  EXPECT_EQ(frame["gpus"][1]["name"], "NVIDIA L40S");
  json big;
  for (const json& instance : h100["instances"]) {
    if (instance["gi"] == big_gi_) big = instance;
  }
  ASSERT_TRUE(big.is_object()) << top.output;
  EXPECT_EQ(big["profile"], "3g.40gb");
  EXPECT_EQ(big["uuid"], big_uuid_);
  EXPECT_TRUE(big["placement"].is_object()) << top.output;
  ASSERT_TRUE(big["memory_used_mib"].is_number()) << top.output;
  EXPECT_GE(big["memory_used_mib"].get<std::int64_t>(), 5000);
  EXPECT_GT(big["memory_total_mib"].get<std::int64_t>(), 40000);
  EXPECT_EQ(big["processes"], 1);
  ASSERT_EQ(big["process_list"].size(), 1u) << top.output;
  EXPECT_EQ(big["process_list"][0]["pid"], 4242);
  EXPECT_EQ(big["process_list"][0]["name"], "trainer");
  EXPECT_EQ(big["process_list"][0]["used_memory_mib"], 5000);
  EXPECT_EQ(big["idle_s"], 0);  // busy
  // Absent figures are null, present ones numbers: never a string or a made-up zero.
  for (const char* field : {"temperature_c", "power_w", "sm_active_pct", "utilization_pct"}) {
    EXPECT_TRUE(h100[field].is_null() || h100[field].is_number()) << field;
  }
}

TEST_F(TopCliTest, ShowsTheLeaseThatHoldsAnInstance) {
  // A stand-in for the service's GET /v1/leases: one active lease bound to the 3g.40gb instance.
  httplib::Server server;
  std::string authorization;
  server.Get("/v1/leases", [&](const httplib::Request& request, httplib::Response& response) {
    authorization = request.get_header_value("Authorization");
    const json body = {
        {"leases",
         {{{"id", 12},
           {"tenant", "team-x"},
           {"class", "medium"},
           {"purpose", "notebook"},
           {"state", "active"},
           {"bound", {{{"uuid", big_uuid_}, {"gpu_index", 0}, {"gi", big_gi_}, {"ci", 0}}}}}}}};
    response.set_content(body.dump(), "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread thread([&server] { server.listen_after_bind(); });
  for (int i = 0; i < 500 && !server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(server.is_running());
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const CommandResult top =
      Top("top --sim '" + state_ + "' --once --width 250 --server " + url + " --token gs_test");
  server.stop();
  thread.join();
  ASSERT_EQ(top.exit_code, 0) << top.output;
  EXPECT_EQ(authorization, "Bearer gs_test");
  EXPECT_THAT(LineStarting(top.output, "  GI " + std::to_string(big_gi_) + " "),
              HasSubstr("#12 team-x medium: notebook"))
      << top.output;
  EXPECT_THAT(top.output, HasSubstr("leases: 1 active from " + url));

  // An unreachable server is a status line; the frame still comes, and top exits 0.
  const int closed = gpuslice::cli::testing::FreeLoopbackPort();
  const CommandResult down = Top("top --sim '" + state_ + "' --once --width 250 --server " +
                                 "http://127.0.0.1:" + std::to_string(closed));
  ASSERT_EQ(down.exit_code, 0) << down.output;
  EXPECT_THAT(down.output, HasSubstr("leases: cannot reach http://127.0.0.1:"));
  EXPECT_THAT(down.output, HasSubstr("3g.40gb"));
}

TEST_F(TopCliTest, IterationsPrintPlainFramesWhenNotATerminal) {
  const CommandResult top =
      Top("top --sim '" + state_ + "' --iterations 2 --interval 0.2 --compact --width 200");
  ASSERT_EQ(top.exit_code, 0) << top.output;
  std::size_t frames = 0;
  for (std::size_t at = top.output.find("gpuslice top · "); at != std::string::npos;
       at = top.output.find("gpuslice top · ", at + 1)) {
    ++frames;
  }
  EXPECT_EQ(frames, 2u) << top.output;
  EXPECT_EQ(top.output.find('\x1b'), std::string::npos);
  // The idle 1g.10gb was idle when watching began: its idle time is a lower bound.
  EXPECT_THAT(top.output, HasSubstr("≥"));
}

TEST_F(TopCliTest, BadOptionsExit2WithAClearMessage) {
  const CommandResult interval = Top("top --sim '" + state_ + "' --interval 0");
  EXPECT_EQ(interval.exit_code, 2) << interval.output;
  EXPECT_THAT(interval.output, HasSubstr("--interval"));

  const CommandResult both = Top("top --sim '" + state_ + "' --once --iterations 3");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_THAT(both.output, HasSubstr("excludes"));

  const CommandResult width = Top("top --sim '" + state_ + "' --once --width 5");
  EXPECT_EQ(width.exit_code, 2) << width.output;
  EXPECT_THAT(width.output, HasSubstr("--width"));

  const CommandResult unknown = Top("top --sim '" + state_ + "' --frobnicate");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("--frobnicate"));

  const CommandResult missing = Top("top --sim '" + dir_ + "/no-such-machine.json' --once");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("no-such-machine.json"));
}

}  // namespace
