// The HTTP transport (src/api/http_server.h) on raw bytes over a real loopback connection: one
// transport for the whole run, each input sent on a new connection whose write side is then
// closed. Beside the sanitizers (the reactor, the workers and the parser run instrumented): the
// server answers only with well-formed HTTP/1.1 responses, one per request it handed to the
// handler plus at most one error, and closes the connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "api/http_server.h"

namespace {

std::atomic<int> handled{0};

gpuslice::api::http::Transport& Server() {
  static auto* transport = [] {
    gpuslice::api::http::TransportOptions options;
    options.port = 0;
    options.worker_threads = 2;
    options.header_timeout_ms = 2000;
    options.body_timeout_ms = 2000;
    options.max_body_bytes = 4096;
    auto* t = new gpuslice::api::http::Transport(
        options, [](gpuslice::api::http::Request& req, gpuslice::api::http::Response& res) {
          handled.fetch_add(1);
          res.set_content(req.method + " " + req.path + " " + std::to_string(req.body.size()),
                          "text/plain");
        });
    if (!t->Start().ok()) std::abort();
    return t;
  }();
  return *transport;
}

// A connection to the transport. A connect() interrupted by libFuzzer's timer signal goes on in
// the background; a busy loopback may be short of ports for a moment. Only a server that keeps
// refusing is a failure.
int Connect(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    if (errno == EINTR) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t len = sizeof error;
      if (::poll(&p, 1, 1000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 &&
          error == 0) {
        return fd;
      }
    }
    ::close(fd);
    ::usleep(10'000);
  }
  std::abort();  // the transport no longer accepts connections
}

int Responses(const std::string& text) {
  int n = 0;
  for (std::size_t at = 0; (at = text.find("HTTP/1.1 ", at)) != std::string::npos; at += 9) ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  gpuslice::api::http::Transport& server = Server();
  const int fd = Connect(server.port());
  const int before = handled.load();
  std::size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server may close early after an error
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[8192];
  // The server must end the connection within 8 s (its deadlines are 2 s). libFuzzer's timer
  // signal interrupts poll(): that is no answer yet, not a timeout.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) std::abort();
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) std::abort();
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (!answer.empty() && answer.rfind("HTTP/1.1 ", 0) != 0) std::abort();
  const int requests = handled.load() - before;
  const int responses = Responses(answer);
  // Each handled request is answered; at most one more answer (the error that closed it). A
  // "100 Continue" interim answer may come before a body.
  if (responses < requests || responses > requests + 2) std::abort();
  return 0;
}
