// Tests of running mig-parted hooks: exit codes, signals, environment, workdir, missing commands
// and where the output goes. They run real child processes (/bin/sh).
#include "gpuslice/agent/hook_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gpuslice::agent {
namespace {

using spec::HookCommand;
using spec::HooksFile;
using ::testing::HasSubstr;

// A fresh directory per test, removed at the end.
class HookRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "gpuslice_hooks_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  bool Exists(const std::string& name) const { return std::filesystem::exists(dir_ + "/" + name); }

  static HookCommand Sh(std::string script) {
    return {"/bin/sh", {"-c", std::move(script)}, {}, ""};
  }

  std::string dir_;
};

TEST_F(HookRunnerTest, ReportsTheExitCode) {
  HooksFile hooks;
  hooks.hooks.push_back({"pre-apply-mode", {Sh("exit 3")}});
  const absl::Status status = RunHook(hooks, "pre-apply-mode", {});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("pre-apply-mode"));
  EXPECT_THAT(status.message(), HasSubstr("command 1 of 1 (/bin/sh -c 'exit 3')"));
  EXPECT_THAT(status.message(), HasSubstr("exited with code 3"));
}

TEST_F(HookRunnerTest, RunsInOrderAndStopsAtTheFirstFailure) {
  HookCommand first = Sh("echo one > first");
  first.workdir = dir_;
  HookCommand failing = Sh("exit 1");
  HookCommand third = Sh("echo three > third");
  third.workdir = dir_;
  HooksFile hooks;
  hooks.hooks.push_back({"apply-start", {first, failing, third}});
  const absl::Status status = RunHook(hooks, "apply-start", {});
  EXPECT_THAT(status.message(), HasSubstr("command 2 of 3"));
  EXPECT_THAT(status.message(), HasSubstr("exited with code 1"));
  EXPECT_EQ(Read("first"), "one\n");
  EXPECT_FALSE(Exists("third"));
}

TEST_F(HookRunnerTest, SuccessAndAbsentHooks) {
  HookCommand write = Sh("printf ok > done");
  write.workdir = dir_;
  HooksFile hooks;
  hooks.hooks.push_back({"apply-exit", {write}});
  hooks.hooks.push_back({"pre-apply-config", {}});
  EXPECT_TRUE(RunHook(hooks, "apply-exit", {}).ok());
  EXPECT_EQ(Read("done"), "ok");
  EXPECT_TRUE(RunHook(hooks, "pre-apply-config", {}).ok());  // no commands
  EXPECT_TRUE(RunHook(hooks, "apply-start", {}).ok());       // not in the file
  EXPECT_TRUE(RunHook(HooksFile{}, "apply-start", {}).ok());
}

TEST_F(HookRunnerTest, EnvironmentAndWorkdir) {
  ASSERT_EQ(::setenv("GPUSLICE_HOOK_TEST_INHERITED", "from-process", 1), 0);
  ASSERT_EQ(::setenv("GPUSLICE_HOOK_TEST_OVERRIDDEN", "from-process", 1), 0);
  HookCommand command =
      Sh("printf '%s|%s|%s|%s|%s' \"$GPUSLICE_HOOK_TEST_INHERITED\" "
         "\"$GPUSLICE_HOOK_TEST_OVERRIDDEN\" "
         "\"$FROM_HOOK\" \"$MIG_PARTED_SELECTED_CONFIG\" \"$(pwd -P)\" > env.txt");
  command.envs = {"GPUSLICE_HOOK_TEST_OVERRIDDEN=from-hook", "FROM_HOOK=hook value",
                  "MIG_PARTED_SELECTED_CONFIG=from-hook"};
  command.workdir = dir_;
  HooksFile hooks;
  hooks.hooks.push_back({"apply-start", {command}});
  const absl::Status status =
      RunHook(hooks, "apply-start", {{"MIG_PARTED_SELECTED_CONFIG", "all-balanced"}});
  ASSERT_TRUE(status.ok()) << status;
  const std::string real_dir = std::filesystem::canonical(dir_).string();
  EXPECT_EQ(Read("env.txt"), "from-process|from-hook|hook value|all-balanced|" + real_dir);
  // The process's own environment is untouched.
  EXPECT_STREQ(std::getenv("GPUSLICE_HOOK_TEST_OVERRIDDEN"), "from-process");
  EXPECT_EQ(std::getenv("FROM_HOOK"), nullptr);
  ::unsetenv("GPUSLICE_HOOK_TEST_INHERITED");
  ::unsetenv("GPUSLICE_HOOK_TEST_OVERRIDDEN");
}

TEST_F(HookRunnerTest, CommandsFromPathAndRelativeToWorkdir) {
  // "sh" is looked up in PATH.
  HookCommand from_path{"sh", {"-c", "printf path > from_path"}, {}, dir_};
  // "./script.sh" is relative to the workdir.
  {
    std::ofstream script(dir_ + "/script.sh");
    script << "#!/bin/sh\nprintf \"$1\" > from_script\n";
  }
  ASSERT_EQ(::chmod((dir_ + "/script.sh").c_str(), 0755), 0);
  HookCommand relative{"./script.sh", {"relative"}, {}, dir_};
  HooksFile hooks;
  hooks.hooks.push_back({"apply-exit", {from_path, relative}});
  const absl::Status status = RunHook(hooks, "apply-exit", {});
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(Read("from_path"), "path");
  EXPECT_EQ(Read("from_script"), "relative");
}

TEST_F(HookRunnerTest, MissingCommandIsReported) {
  HooksFile hooks;
  hooks.hooks.push_back({"apply-start", {HookCommand{"/nonexistent/gpuslice-hook", {}, {}, ""}}});
  hooks.hooks.push_back(
      {"apply-exit", {HookCommand{"gpuslice-no-such-command-xyz", {"a"}, {}, ""}}});
  const absl::Status absolute = RunHook(hooks, "apply-start", {});
  ASSERT_FALSE(absolute.ok());
  EXPECT_EQ(absolute.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(absolute.message(), HasSubstr("hook apply-start"));
  EXPECT_THAT(absolute.message(), HasSubstr("cannot run '/nonexistent/gpuslice-hook'"));
  EXPECT_THAT(absolute.message(), HasSubstr("No such file or directory"));

  const absl::Status in_path = RunHook(hooks, "apply-exit", {});
  ASSERT_FALSE(in_path.ok());
  EXPECT_EQ(in_path.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(in_path.message(), HasSubstr("'gpuslice-no-such-command-xyz' not found in PATH"));
}

TEST_F(HookRunnerTest, NotExecutableAndMissingWorkdir) {
  {
    std::ofstream script(dir_ + "/plain.txt");
    script << "not a program\n";
  }
  HooksFile hooks;
  hooks.hooks.push_back({"apply-start", {HookCommand{dir_ + "/plain.txt", {}, {}, ""}}});
  hooks.hooks.push_back({"apply-exit", {HookCommand{"/bin/sh", {"-c", "true"}, {}, dir_ + "/no"}}});
  const absl::Status not_executable = RunHook(hooks, "apply-start", {});
  ASSERT_FALSE(not_executable.ok());
  EXPECT_EQ(not_executable.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(not_executable.message(), HasSubstr("Permission denied"));

  const absl::Status no_workdir = RunHook(hooks, "apply-exit", {});
  ASSERT_FALSE(no_workdir.ok());
  EXPECT_EQ(no_workdir.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_workdir.message(), HasSubstr("cannot change to workdir '" + dir_ + "/no'"));
}

TEST_F(HookRunnerTest, ReportsSignals) {
  HooksFile hooks;
  hooks.hooks.push_back({"apply-exit", {Sh("kill -9 $$")}});
  const absl::Status status = RunHook(hooks, "apply-exit", {});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("killed by signal 9 (SIGKILL)"));
}

TEST_F(HookRunnerTest, OutputGoesToStderrAndStdinIsEmpty) {
  HooksFile hooks;
  hooks.hooks.push_back(
      {"apply-start", {Sh("echo to-stdout; echo to-stderr >&2; read line || echo stdin-empty")}});
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const absl::Status status = RunHook(hooks, "apply-start", {});
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(err, HasSubstr("to-stdout"));
  EXPECT_THAT(err, HasSubstr("to-stderr"));
  EXPECT_THAT(err, HasSubstr("stdin-empty"));
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace gpuslice::agent
