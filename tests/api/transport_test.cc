// The API's HTTP transport (src/api/http_server.h) over raw sockets on loopback: request
// smuggling refused and the connection closed, deadlines for slow heads and bodies, connection
// limits per source, slow clients that hold no worker, keep-alive and pipelining.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "api/http_server.h"

namespace gpuslice::api::http {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A connected loopback socket, from `source` (any 127.0.0.0/8 address) to the port.
int Connect(int port, const char* source = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) ADD_FAILURE() << "bind";
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) ADD_FAILURE() << "connect";
  return fd;
}

void Send(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Everything the server sends until it closes the connection, or until `wait` passes.
struct Received {
  std::string text;
  bool closed = false;
};
Received ReadUntilClosed(int fd, milliseconds wait = milliseconds(5000)) {
  Received out;
  const auto deadline = Clock::now() + wait;
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<long>(left, 0))) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      out.closed = true;
      break;
    }
    out.text.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

int CountResponses(const std::string& text) {
  int n = 0;
  for (std::size_t at = text.find("HTTP/1.1 "); at != std::string::npos;
       at = text.find("HTTP/1.1 ", at + 1)) {
    ++n;
  }
  return n;
}

class TransportTest : public ::testing::Test {
 protected:
  void Start(TransportOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    transport_ = std::make_unique<Transport>(options, [this](Request& req, Response& res) {
      handled_.fetch_add(1);
      res.set_content(req.method + " " + req.path + " " + req.body, "text/plain");
    });
    ASSERT_TRUE(transport_->Start().ok());
  }
  void TearDown() override {
    if (transport_) transport_->Stop();
  }
  int port() const { return transport_->port(); }

  std::unique_ptr<Transport> transport_;
  std::atomic<int> handled_{0};
};

TEST_F(TransportTest, AnswersKeepAliveAndPipelinedRequestsInOrder) {
  Start();
  const int fd = Connect(port());
  Send(fd,
       "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
       "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyz"
       "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const Received r = ReadUntilClosed(fd);
  ::close(fd);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(CountResponses(r.text), 3) << r.text;
  const std::size_t a = r.text.find("GET /a ");
  const std::size_t b = r.text.find("POST /b xyz");
  const std::size_t c = r.text.find("GET /c ");
  EXPECT_TRUE(a < b && b < c) << r.text;
  EXPECT_EQ(handled_.load(), 3);
}

// Each smuggling attempt is answered with an error, the connection is closed, and the bytes
// after the bad head never reach the handler as a request.
TEST_F(TransportTest, RefusesSmugglingAndClosesWithoutParsingTheRest) {
  Start();
  const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  const struct {
    std::string head;
    const char* status;
  } cases[] = {
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: " +
           std::to_string(smuggled.size()) + "\r\n\r\n",
       "400"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "411"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n",
       "400"},
      {"GET /a HTTP/1.1\rHost: x\r\n\r\n", "400"},
      {std::string("GET /a HTTP/1.1\r\nHost: x\0\r\n\r\n", 30), "400"},
      {"GET /a HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", "400"},
  };
  for (const auto& c : cases) {
    const int fd = Connect(port());
    Send(fd, c.head + smuggled);
    const Received r = ReadUntilClosed(fd);
    ::close(fd);
    EXPECT_TRUE(r.closed) << c.head;
    EXPECT_EQ(r.text.rfind(std::string("HTTP/1.1 ") + c.status, 0), 0u) << r.text;
    EXPECT_EQ(CountResponses(r.text), 1) << r.text;
    EXPECT_NE(r.text.find("Connection: close"), std::string::npos);
  }
  EXPECT_EQ(handled_.load(), 0);
  EXPECT_EQ(transport_->counters().bad_requests, 6);
}

TEST_F(TransportTest, RefusesAnOversizedBodyBeforeReadingIt) {
  TransportOptions options;
  options.max_body_bytes = 1024;
  Start(options);
  const int fd = Connect(port());
  Send(fd, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n");
  const Received r = ReadUntilClosed(fd);
  ::close(fd);
  EXPECT_EQ(r.text.rfind("HTTP/1.1 413", 0), 0u) << r.text;
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(handled_.load(), 0);
}

TEST_F(TransportTest, AnswersContinueBeforeTheBody) {
  Start();
  const int fd = Connect(port());
  Send(fd, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  char buf[64] = {};
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0))),
            "HTTP/1.1 100 Continue\r\n\r\n");
  Send(fd, "hi");
  shutdown(fd, SHUT_WR);
  const Received r = ReadUntilClosed(fd);
  ::close(fd);
  EXPECT_NE(r.text.find("POST /a hi"), std::string::npos) << r.text;
}

TEST_F(TransportTest, SlowHeadsAndBodiesAreTimedOut) {
  TransportOptions options;
  options.header_timeout_ms = 300;
  options.body_timeout_ms = 300;
  options.idle_timeout_ms = 300;
  Start(options);
  // A head sent a byte at a time, each within any per-read timeout, never finishes in time.
  const int slow_head = Connect(port());
  const int slow_body = Connect(port());
  const int idle = Connect(port());
  Send(slow_body, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345");
  const auto start = Clock::now();
  const std::string head = "GET /a HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  for (std::size_t i = 0; i < head.size() && Clock::now() - start < milliseconds(1500); ++i) {
    if (::send(slow_head, head.data() + i, 1, MSG_NOSIGNAL) != 1) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  const Received h = ReadUntilClosed(slow_head);
  const Received b = ReadUntilClosed(slow_body);
  const Received i = ReadUntilClosed(idle);
  for (int fd : {slow_head, slow_body, idle}) ::close(fd);
  EXPECT_TRUE(h.closed && b.closed && i.closed);
  EXPECT_EQ(h.text.rfind("HTTP/1.1 408", 0), 0u) << h.text;
  EXPECT_EQ(b.text.rfind("HTTP/1.1 408", 0), 0u) << b.text;
  EXPECT_EQ(i.text, "");  // an idle connection is closed without a word
  EXPECT_EQ(transport_->counters().timed_out, 3);
  EXPECT_EQ(handled_.load(), 0);
}

// 1,000 connections from one source that send part of a head and stop: the per-source limit
// refuses those past it, none holds a worker, and a client from another address is answered.
TEST_F(TransportTest, SlowConnectionsFromOneSourceDoNotStopOthers) {
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < 4096) {
    GTEST_SKIP() << "needs 4,096 open files; the hard limit is " << limit.rlim_max;
  }
  TransportOptions options;
  options.worker_threads = 4;
  options.max_connections_per_source = 200;
  Start(options);  // raises this process's soft limit for its connections
  std::vector<int> slow;
  for (int i = 0; i < 1000; ++i) {
    const int fd = Connect(port(), "127.0.0.2");
    ::send(fd, "GET /slow HTTP/1.1\r\nHo", 22, MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  for (int attempt = 0; attempt < 100 && transport_->counters().accepted < 1000; ++attempt) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  const int fd = Connect(port(), "127.0.0.1");
  Send(fd, "GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const Received r = ReadUntilClosed(fd);
  ::close(fd);
  EXPECT_NE(r.text.find("GET /fast"), std::string::npos) << r.text;
  const TransportCounters counters = transport_->counters();
  EXPECT_EQ(counters.refused_per_source, 800);
  EXPECT_EQ(counters.open, 200);  // the fast client's connection is closed by now
  for (int s : slow) ::close(s);
}

}  // namespace
}  // namespace gpuslice::api::http
