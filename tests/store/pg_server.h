// A PostgreSQL server for the tests of one binary: the one GPUSLICE_PG_URL names (.ci/run starts
// one), else a throwaway server this environment starts on a free loopback port with
// scripts/pg_test_server.sh and stops at the end. url() is empty when neither is available (no
// PostgreSQL installed): tests then skip, and fail under CI=true (tests/require.h).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace gpuslice::store::test_server {

// The output of a shell command without its trailing newlines; empty when it fails.
inline std::string RunShell(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  if (pclose(pipe) != 0) return "";
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// A loopback port no socket holds now (the kernel's choice), for the server to listen on. A port
// derived from the pid could be held by other tests' servers under ctest -j.
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// Registered once per binary with ::testing::AddGlobalTestEnvironment.
class PostgresEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (const char* url = std::getenv("GPUSLICE_PG_URL"); url != nullptr && *url != '\0') {
      url_ = url;
      return;
    }
    dir_ =
        std::filesystem::temp_directory_path() / ("gpuslice-pg-test-" + std::to_string(getpid()));
    const int port = FreeLoopbackPort();
    url_ = RunShell(std::string(GPUSLICE_SOURCE_DIR) + "/scripts/pg_test_server.sh start " +
                    dir_.string() + " " + std::to_string(port) + " 2>/dev/null");
    started_ = !url_.empty();
  }
  void TearDown() override {
    if (started_) {
      RunShell(std::string(GPUSLICE_SOURCE_DIR) + "/scripts/pg_test_server.sh stop " +
               dir_.string());
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }
  static const std::string& url() { return url_; }

 private:
  static inline std::string url_;
  std::filesystem::path dir_;
  bool started_ = false;
};

}  // namespace gpuslice::store::test_server
