// GET /metrics on `gpuslice serve`: the machine's GPUs and MIG instances in Prometheus text format
// with dcgm-exporter's names and labels, each lease tied to its MIG device, the service's leases
// and queue by class; admin or agent tokens only; and promtool reads it (its one complaint is the
// camelCase label modelName, which dcgm-exporter's dashboards need).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/serve_process.h"
#include "require.h"

namespace {

using gpuslice::cli::testing::HttpGet;
using gpuslice::cli::testing::ServeFixture;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class MetricsCliTest : public ServeFixture {
 protected:
  void SetUp() override {
    static int salt = 510;
    ASSERT_NO_FATAL_FAILURE(StartServer("gpuslice_metrics_cli_", "1xA30-24GB", salt++));
    ASSERT_NO_FATAL_FAILURE(AddTeamA());
  }
};

TEST_F(MetricsCliTest, ExposesGpusInstancesAndLeasesToAdminsOnly) {
  const gpuslice::cli::testing::CommandResult acquired = gpuslice::cli::testing::RunGpuslice(
      "acquire --token " + ann_token_ + " --class small --purpose notebook");
  ASSERT_EQ(acquired.exit_code, 0) << acquired.output;

  const std::string reply = HttpGet(port_, "/metrics", admin_token_);
  ASSERT_THAT(reply, StartsWith("HTTP/1.1 200")) << reply;
  EXPECT_THAT(reply, HasSubstr("text/plain; version=0.0.4"));
  const std::string body = reply.substr(reply.find("\r\n\r\n") + 4);
  EXPECT_THAT(body, HasSubstr("# TYPE DCGM_FI_DEV_FB_USED gauge\n"));
  EXPECT_THAT(body, HasSubstr("DCGM_FI_DEV_FB_TOTAL{gpu=\"0\""));
  EXPECT_THAT(body, HasSubstr("modelName=\"NVIDIA A30\""));
  EXPECT_THAT(body, HasSubstr("GPU_I_PROFILE=\"1g.6gb\""));
  EXPECT_THAT(body, HasSubstr("lease=\"1\",tenant=\"team-a\",class=\"small\"} 1\n"));
  EXPECT_THAT(body, HasSubstr("gpuslice_leases{class=\"small\",tenant=\"team-a\"} 1\n"));
  EXPECT_THAT(body, HasSubstr("gpuslice_gpu_mig_mode{gpu=\"0\""));
  EXPECT_THAT(body, HasSubstr("gpuslice_collect_errors{Hostname="));
  // The lease's series carry its MIG device's UUID.
  const std::string lease_line = body.substr(body.find("gpuslice_lease_info{"));
  EXPECT_THAT(lease_line.substr(0, lease_line.find('\n')), HasSubstr("UUID=\"MIG-"));

  EXPECT_THAT(HttpGet(port_, "/metrics"), StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(HttpGet(port_, "/metrics", ann_token_), StartsWith("HTTP/1.1 403"));

  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GPUSLICE_SKIP_OR_FAIL_IN_CI("promtool is not installed (Debian package prometheus)");
  }
  const std::string in = dir_ + "/metrics.txt";
  const std::string out = dir_ + "/promtool.txt";
  std::ofstream(in) << body;
  const int rc = std::system(("promtool check metrics < " + in + " > " + out + " 2>&1").c_str());
  std::ifstream report(out);
  std::string line;
  int complaints = 0;
  while (std::getline(report, line)) {
    if (line.empty()) continue;
    ++complaints;
    EXPECT_THAT(line, HasSubstr("label names should be written in 'snake_case' not 'camelCase'"))
        << "promtool: " << line;
  }
  // 0: clean; 3: lint complaints only (parse errors are 1), and those are modelName's.
  EXPECT_TRUE(WEXITSTATUS(rc) == 0 || (WEXITSTATUS(rc) == 3 && complaints > 0)) << rc;
}

}  // namespace
