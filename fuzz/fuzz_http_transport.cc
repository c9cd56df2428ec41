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

int Responses(const std::string& text) {
  int n = 0;
  for (std::size_t at = 0; (at = text.find("HTTP/1.1 ", at)) != std::string::npos; at += 9) ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  gpuslice::api::http::Transport& server = Server();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
  const int before = handled.load();
  std::size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early after an error
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[8192];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) std::abort();  // the server must end the connection
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
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
