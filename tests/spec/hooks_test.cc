// Tests of the mig-parted hooks-file format: parsing, located errors, writing and reading back.
#include "gpuslice/spec/hooks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpuslice::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Shaped like mig-parted's deployments/systemd/hooks-default.yaml (own wording).
constexpr std::string_view kHooks = R"(version: v1
hooks:
  apply-start:
    - workdir: "/etc/nvidia-mig-manager"
      command: "/bin/bash"
      args: ["-x", "-c", "source hooks.sh; persist-config ${MIG_PARTED_SELECTED_CONFIG}"]
  pre-apply-mode:
    - workdir: "/etc/nvidia-mig-manager"
      command: "/bin/bash"
      args: ["-x", "-c", "source hooks.sh; stop-services"]
    - command: systemctl
      args: [stop, nvidia-dcgm]
      envs:
        SYSTEMD_LOG_LEVEL: debug
        EMPTY: ""
        NUMBER: 3
  pre-apply-config: []
  apply-exit:
    - command: "/bin/bash"
      args: ["-c", "echo done"]
)";

HooksFile MustParse(std::string_view text) {
  absl::StatusOr<HooksFile> file = ParseHooksFile(text, "hooks.yaml");
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *std::move(file) : HooksFile{};
}

TEST(HooksParse, ReadsEveryHookInOrder) {
  const HooksFile file = MustParse(kHooks);
  ASSERT_EQ(file.hooks.size(), 4u);
  EXPECT_EQ(file.hooks[0].first, "apply-start");
  EXPECT_EQ(file.hooks[1].first, "pre-apply-mode");
  EXPECT_EQ(file.hooks[2].first, "pre-apply-config");
  EXPECT_EQ(file.hooks[3].first, "apply-exit");

  ASSERT_EQ(file.hooks[0].second.size(), 1u);
  const HookCommand& start = file.hooks[0].second[0];
  EXPECT_EQ(start.command, "/bin/bash");
  EXPECT_THAT(
      start.args,
      ElementsAre("-x", "-c", "source hooks.sh; persist-config ${MIG_PARTED_SELECTED_CONFIG}"));
  EXPECT_EQ(start.workdir, "/etc/nvidia-mig-manager");
  EXPECT_TRUE(start.envs.empty());

  ASSERT_EQ(file.hooks[1].second.size(), 2u);
  const HookCommand& stop = file.hooks[1].second[1];
  EXPECT_EQ(stop.command, "systemctl");
  EXPECT_THAT(stop.args, ElementsAre("stop", "nvidia-dcgm"));
  EXPECT_THAT(stop.envs, ElementsAre("SYSTEMD_LOG_LEVEL=debug", "EMPTY=", "NUMBER=3"));
  EXPECT_TRUE(stop.workdir.empty());

  EXPECT_TRUE(file.hooks[2].second.empty());
  ASSERT_EQ(file.hooks[3].second.size(), 1u);
}

TEST(HooksParse, ReadsJsonAndNullHooks) {
  const HooksFile file = MustParse(
      R"({"version": "v1", "hooks": {"apply-exit": [{"command": "true", "envs": {"A": "b=c"}}],
          "apply-start": null}})");
  ASSERT_EQ(file.hooks.size(), 2u);
  EXPECT_EQ(file.hooks[0].first, "apply-exit");
  EXPECT_THAT(file.hooks[0].second[0].envs, ElementsAre("A=b=c"));
  EXPECT_TRUE(file.hooks[1].second.empty());
  EXPECT_TRUE(MustParse("version: v1\nhooks: {}\n").hooks.empty());
}

TEST(HooksParse, ErrorsNameTheLineAndField) {
  struct Case {
    std::string text;
    std::string location;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "hooks.yaml: ", "expected a mapping"},
      {"hooks: {}\n", "hooks.yaml:1: version:", "required field is missing"},
      {"version: v2\nhooks: {}\n", "hooks.yaml:1: version:", "unsupported version 'v2'"},
      {"version: v1\n", "hooks.yaml:1: hooks:", "required field is missing"},
      {"version: v1\nhooks: {}\nextra: 1\n", "hooks.yaml:3: extra:", "unknown field"},
      {"version: v1\nhooks: [a]\n", "hooks.yaml:2: hooks:", "expected a mapping"},
      {"version: v1\nhooks:\n  apply-start: []\n  pre-apply: []\n",
       "hooks.yaml:4: hooks.pre-apply:", "unknown field (expected apply-start, pre-apply-mode"},
      {"version: v1\nhooks:\n  apply-start: []\n  apply-start: []\n",
       "hooks.yaml:4: hooks.apply-start:", "duplicate key"},
      {"version: v1\nhooks:\n  apply-exit: {command: x}\n",
       "hooks.yaml:3: hooks.apply-exit:", "expected a list of commands"},
      {"version: v1\nhooks:\n  apply-exit:\n    - /bin/true\n",
       "hooks.yaml:4: hooks.apply-exit[0]:", "expected a mapping"},
      {"version: v1\nhooks:\n  apply-exit:\n    - args: [a]\n",
       "hooks.yaml:4: hooks.apply-exit[0].command:", "required field is missing"},
      {"version: v1\nhooks:\n  apply-exit:\n    - command: \"\"\n",
       "hooks.yaml:4: hooks.apply-exit[0].command:", "must not be empty"},
      {"version: v1\nhooks:\n  apply-exit:\n    - command: x\n      cmd: y\n",
       "hooks.yaml:5: hooks.apply-exit[0].cmd:", "unknown field"},
      {"version: v1\nhooks:\n  apply-exit:\n    - command: x\n      args: \"-c true\"\n",
       "hooks.yaml:5: hooks.apply-exit[0].args:", "expected a list"},
      {"version: v1\nhooks:\n  apply-exit:\n    - command: x\n      envs: [\"A=b\"]\n",
       "hooks.yaml:5: hooks.apply-exit[0].envs:", "expected a mapping"},
      {"version: v1\nhooks:\n  apply-exit:\n    - command: x\n      envs:\n        \"A=B\": c\n",
       "hooks.yaml:6: hooks.apply-exit[0].envs.A=B:", "invalid environment variable name"},
      {"version: v1\nhooks:\n  apply-exit:\n    - command: x\n      envs:\n        A: [1]\n",
       "hooks.yaml:6: hooks.apply-exit[0].envs.A:", "expected a text value"},
      {"version: v1\nhooks:\n  apply-exit:\n    - command: x\n      workdir: [a]\n",
       "hooks.yaml:5: hooks.apply-exit[0].workdir:", "expected a text value"},
      {"version: v1\nhooks: {\n", "hooks.yaml:", ""},
  };
  for (const Case& error_case : cases) {
    SCOPED_TRACE(error_case.text);
    absl::StatusOr<HooksFile> file = ParseHooksFile(error_case.text, "hooks.yaml");
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(file.status().message());
    EXPECT_EQ(message.substr(0, error_case.location.size()), error_case.location) << message;
    EXPECT_THAT(message, HasSubstr(error_case.message));
  }
}

TEST(HooksWrite, RoundTrips) {
  const HooksFile file = MustParse(kHooks);
  const std::string written = WriteHooksFile(file);
  SCOPED_TRACE(written);
  EXPECT_EQ(MustParse(written), file);
  EXPECT_EQ(WriteHooksFile(MustParse(written)), written);

  HooksFile tricky;
  tricky.hooks.push_back(
      {"apply-exit",
       {HookCommand{
           "/bin/sh", {"-c", "echo \"quoted\" \\ back\ttab\nnew"}, {"K=v: #x", "E="}, "."}}});
  EXPECT_EQ(MustParse(WriteHooksFile(tricky)), tricky);
  EXPECT_EQ(MustParse(WriteHooksFile(HooksFile{})), HooksFile{});
}

}  // namespace
}  // namespace gpuslice::spec
