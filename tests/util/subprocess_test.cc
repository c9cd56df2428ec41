// util::Subprocess: exit codes and signals, captured output, the child's environment, working
// directory and standard input, exec and chdir failures reported by Start, Poll and Signal, and a
// child left running reaped by the destructor.
#include "gpuslice/util/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <thread>

namespace gpuslice::util {
namespace {

SubprocessOptions Shell(const std::string& script) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.output = SubprocessOptions::Output::kCapture;
  return o;
}

ExitStatus RunToEnd(SubprocessOptions o, std::string* output = nullptr) {
  absl::StatusOr<Subprocess> child = Subprocess::Start(std::move(o));
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return {};
  absl::StatusOr<ExitStatus> done = child->Wait();
  EXPECT_TRUE(done.ok()) << done.status();
  if (output != nullptr) *output = child->output();
  return done.ok() ? *done : ExitStatus{};
}

TEST(Subprocess, ExitCodesSignalsAndOutput) {
  std::string out;
  ExitStatus status = RunToEnd(Shell("echo out; echo err >&2; exit 3"), &out);
  EXPECT_TRUE(status.exited);
  EXPECT_EQ(status.code, 3);
  EXPECT_EQ(status.ShellCode(), 3);
  EXPECT_EQ(out, "out\nerr\n");
  status = RunToEnd(Shell("kill -TERM $$"));
  EXPECT_FALSE(status.exited);
  EXPECT_EQ(status.signal, SIGTERM);
  EXPECT_EQ(status.ShellCode(), 128 + SIGTERM);
}

TEST(Subprocess, TheEnvironmentIsInheritedChangedOrReplaced) {
  setenv("GPUSLICE_SUBPROCESS_KEEP", "kept", 1);
  setenv("GPUSLICE_SUBPROCESS_DROP", "dropped", 1);
  SubprocessOptions o = Shell("echo $GPUSLICE_SUBPROCESS_KEEP-$GPUSLICE_SUBPROCESS_DROP-$ADDED");
  o.unset_env = {"GPUSLICE_SUBPROCESS_DROP"};
  o.set_env = {{"ADDED", "a b"}};
  std::string out;
  RunToEnd(o, &out);
  EXPECT_EQ(out, "kept--a b\n");
  o = Shell("echo $GPUSLICE_SUBPROCESS_KEEP-$ONLY");
  o.environment = std::vector<std::string>{"ONLY=this"};
  RunToEnd(o, &out);
  EXPECT_EQ(out, "-this\n");
  unsetenv("GPUSLICE_SUBPROCESS_KEEP");
  unsetenv("GPUSLICE_SUBPROCESS_DROP");
}

TEST(Subprocess, WorkdirStdinAndRedirection) {
  SubprocessOptions o = Shell("pwd; cat; echo to-stdout");
  o.workdir = "/";
  o.input = SubprocessOptions::Input::kDevNull;  // cat ends at once
  std::string out;
  EXPECT_EQ(RunToEnd(o, &out).code, 0);
  EXPECT_EQ(out, "/\nto-stdout\n");
}

TEST(Subprocess, StartSaysWhyAProgramCannotRun) {
  SubprocessOptions missing;
  missing.argv = {"gpuslice-no-such-program-anywhere"};
  absl::StatusOr<Subprocess> child = Subprocess::Start(missing);
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound) << child.status();
  EXPECT_NE(child.status().message().find("cannot run 'gpuslice-no-such-program-anywhere'"),
            std::string::npos);
  SubprocessOptions not_executable;
  not_executable.argv = {"x"};
  not_executable.executable = "/etc/hostname";
  EXPECT_EQ(Subprocess::Start(not_executable).status().code(),
            absl::StatusCode::kFailedPrecondition);
  SubprocessOptions no_dir = Shell("true");
  no_dir.workdir = "/nonexistent-gpuslice-dir";
  absl::StatusOr<Subprocess> in_nowhere = Subprocess::Start(no_dir);
  EXPECT_EQ(in_nowhere.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(in_nowhere.status().message().find("cannot change to workdir"), std::string::npos);
  EXPECT_EQ(Subprocess::Start(SubprocessOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Subprocess, PollSignalAndTheDestructorReaps) {
  SubprocessOptions o;
  o.argv = {"sleep", "30"};
  absl::StatusOr<Subprocess> child = Subprocess::Start(o);
  ASSERT_TRUE(child.ok());
  absl::StatusOr<std::optional<ExitStatus>> running = child->Poll();
  ASSERT_TRUE(running.ok());
  EXPECT_FALSE(running->has_value());
  child->Signal(SIGKILL);
  std::optional<ExitStatus> ended;
  for (int i = 0; i < 500 && !ended; ++i) {
    ended = *child->Poll();
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->signal, SIGKILL);
  EXPECT_FALSE(child->Wait().ok());  // already reaped

  pid_t pid = 0;
  {
    absl::StatusOr<Subprocess> left = Subprocess::Start(o);
    ASSERT_TRUE(left.ok());
    pid = left->pid();
  }
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);  // reaped already: no such child
  EXPECT_EQ(errno, ECHILD);
}

}  // namespace
}  // namespace gpuslice::util
