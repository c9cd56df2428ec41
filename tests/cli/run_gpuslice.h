// Test helpers: Shell runs a shell command, RunGpuslice the built gpuslice binary
// (GPUSLICE_BINARY, defined for the cli_test and crash_test targets), collecting exit code and
// output.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace gpuslice::cli::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout, and stderr too unless it was left out
};

// Runs `command` with /bin/sh; its stdout and exit code.
inline CommandResult Shell(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << command;
    return result;
  }
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Runs `gpuslice ARGS` (ARGS are shell words, quoted by the caller where needed); stderr joins
// stdout unless `with_stderr` is false.
inline CommandResult RunGpuslice(const std::string& args, bool with_stderr = true) {
  return Shell(std::string("'") + GPUSLICE_BINARY + "' " + args +
               (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

}  // namespace gpuslice::cli::testing
