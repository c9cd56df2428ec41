// The API's HTTP transport (src/api/http_server.h) over raw sockets on loopback: keep-alive and
// pipelining; requests split across many small writes at every byte; malformed request lines,
// headers, chunked bodies and Content-Lengths refused and the connection closed; request
// smuggling; 100-continue; deadlines for slow heads, bodies and readers; connection limits per
// source, slow clients that hold no worker.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

// One response: its head and Content-Length body, or what came before the connection closed or
// `wait` passed.
struct OneResponse {
  std::string status;  // "200"; "" when no whole head came
  std::string head;
  std::string body;
  bool closed = false;  // the connection closed before a whole response came
};
OneResponse ReadResponse(int fd, milliseconds wait = milliseconds(5000)) {
  OneResponse out;
  std::string text;
  const auto deadline = Clock::now() + wait;
  std::size_t want = std::string::npos;
  char buf[4096];
  while (text.size() < want && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<long>(left, 0))) <= 0) break;
    const std::size_t room = want == std::string::npos ? 1 : want - text.size();
    const ssize_t n = ::recv(fd, buf, std::min(sizeof buf, room), 0);
    if (n <= 0) {
      out.closed = true;
      break;
    }
    text.append(buf, static_cast<std::size_t>(n));
    const std::size_t end = text.find("\r\n\r\n");
    if (want == std::string::npos && end != std::string::npos) {
      out.head = text.substr(0, end + 4);
      const std::size_t at = out.head.find("Content-Length: ");
      want = end + 4 + (at == std::string::npos ? 0 : std::stoul(out.head.substr(at + 16)));
    }
  }
  if (!out.head.empty()) {
    out.status = out.head.substr(9, 3);
    out.body = text.substr(out.head.size());
  }
  return out;
}

// Whether the server has closed the connection (within `wait`); false while it is open and
// silent.
bool ClosedByServer(int fd, milliseconds wait = milliseconds(200)) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK) <= 0;
}

void NoDelay(int fd) {
  const int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
}

class TransportTest : public ::testing::Test {
 protected:
  static constexpr std::size_t kBigBytes = 32 << 20;  // GET /big's answer

  void Start(TransportOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    transport_ = std::make_unique<Transport>(options, [this](Request& req, Response& res) {
      handled_.fetch_add(1);
      if (req.path == "/big") return res.set_content(std::string(kBigBytes, 'x'), "text/plain");
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

// One keep-alive connection; the same request split into two writes at every byte (the second
// part sent once the first has had time to arrive alone), then sent a byte at a time. Each is
// answered as the whole request, and the connection stays open.
TEST_F(TransportTest, ReadsARequestSplitAtAnyByte) {
  Start();
  const int fd = Connect(port());
  NoDelay(fd);
  const std::string request =
      "POST /split HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nX-Pad: a b\r\n\r\nhello";
  int answered = 0;
  for (std::size_t cut = 1; cut < request.size(); ++cut) {
    Send(fd, request.substr(0, cut));
    std::this_thread::sleep_for(milliseconds(2));
    Send(fd, request.substr(cut));
    const OneResponse r = ReadResponse(fd);
    EXPECT_EQ(r.status, "200") << "cut at " << cut << ": " << r.head;
    EXPECT_EQ(r.body, "POST /split hello") << "cut at " << cut;
    EXPECT_FALSE(r.closed) << "cut at " << cut;
    answered += r.status == "200" ? 1 : 0;
  }
  for (char c : request) {
    Send(fd, std::string(1, c));
    std::this_thread::sleep_for(milliseconds(1));
  }
  const OneResponse r = ReadResponse(fd);
  EXPECT_EQ(r.status, "200") << r.head;
  EXPECT_EQ(r.body, "POST /split hello");
  EXPECT_EQ(r.head.find("Connection: close"), std::string::npos) << r.head;
  EXPECT_FALSE(ClosedByServer(fd));
  ::close(fd);
  EXPECT_EQ(answered, static_cast<int>(request.size()) - 1);
  EXPECT_EQ(handled_.load(), static_cast<int>(request.size()));
  EXPECT_EQ(transport_->counters().bad_requests, 0);
}

// Each malformed head is answered with its status and `Connection: close`, the connection is
// closed, and the request after it is never parsed.
TEST_F(TransportTest, RefusesMalformedRequestsWithTheirStatusAndCloses) {
  Start();
  const std::string next = "GET /next HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string many_headers = [] {
    std::string head = "GET /a HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 100; ++i) head += "X-" + std::to_string(i) + ": y\r\n";
    return head + "\r\n";
  }();
  const struct {
    std::string bytes;
    const char* status;
  } cases[] = {
      // The request line.
      {"GARBAGE\r\nHost: x\r\n\r\n", "400"},
      {"GET /a\r\nHost: x\r\n\r\n", "400"},
      {"GET  /a HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
      {"G(T /a HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
      {"GET a HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
      {"GET http://x/a HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
      {"GET /a HTTP/1.1x\r\nHost: x\r\n\r\n", "400"},
      {"GET /a?q=%zz HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
      {"GET /a HTTP/2.0\r\nHost: x\r\n\r\n", "505"},
      {"GET /a HTTP/1.1\n\n", "400"},
      // Header lines.
      {"GET /a HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", "400"},
      {"GET /a HTTP/1.1\r\nHost : x\r\n\r\n", "400"},
      {"GET /a HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", "400"},
      {"GET /a HTTP/1.1\r\nHost: x\r\nX: a\x01"
       "b\r\n\r\n",
       "400"},
      {"GET /a HTTP/1.1\r\n\r\n", "400"},
      {"GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", "400"},
      {"GET /a HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n", "417"},
      {many_headers, "431"},
      {"GET /a HTTP/1.1\r\nHost: x\r\nX-Long: " + std::string(17 * 1024, 'y') + "\r\n\r\n", "431"},
      // Chunked bodies, well-formed or not, are never read.
      {"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot "
       "hex\r\n0\r\n\r\n",
       "411"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "411"},
      {"POST /a HTTP/1.1\r\nHost: x\r\ntransfer-encoding: CHUNKED\r\n\r\n1\r\nx\r\n0\r\n\r\n",
       "411"},
      // Content-Length: digits only, one of them, at most 18 digits.
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", "400"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", "400"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\nx", "400"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0x1\r\n\r\nx", "400"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1 1\r\n\r\nx", "400"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1,1\r\n\r\nx", "400"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", "400"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1234567890123456789\r\n\r\n", "400"},
      {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999999999\r\n\r\n", "413"},
  };
  int refused = 0;
  for (const auto& c : cases) {
    const int fd = Connect(port());
    Send(fd, c.bytes + next);
    const Received r = ReadUntilClosed(fd);
    ::close(fd);
    EXPECT_TRUE(r.closed) << c.bytes;
    EXPECT_EQ(r.text.substr(0, 12), std::string("HTTP/1.1 ") + c.status) << c.bytes << r.text;
    EXPECT_NE(r.text.find("Connection: close\r\n"), std::string::npos) << r.text;
    // One answer only (its body, the error, holds no CRLF), and nothing for the next request.
    const std::size_t head_end = r.text.find("\r\n\r\n");
    EXPECT_EQ(head_end, r.text.rfind("\r\n\r\n")) << r.text;
    EXPECT_EQ(r.text.find("{\"error\":"), head_end + 4) << r.text;
    ++refused;
  }
  EXPECT_EQ(handled_.load(), 0);
  EXPECT_EQ(transport_->counters().bad_requests, refused);
}

// A client that closes before its request is whole gets no answer, and nothing is handled.
TEST_F(TransportTest, ARequestCutShortIsNeverHandled) {
  Start();
  const std::vector<std::string> cut_short = {
      "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345",
      "GET /a HTTP/1.1\r\nHost: x\r\n"};
  for (const std::string& bytes : cut_short) {
    const int fd = Connect(port());
    Send(fd, bytes);
    ::shutdown(fd, SHUT_WR);
    const Received r = ReadUntilClosed(fd);
    ::close(fd);
    EXPECT_TRUE(r.closed) << bytes;
    EXPECT_EQ(r.text, "") << bytes;
  }
  EXPECT_EQ(handled_.load(), 0);
}

// 100 Continue is sent only while the body is awaited, and the connection goes on after it.
TEST_F(TransportTest, ContinuesOnlyWhileTheBodyIsAwaited) {
  TransportOptions options;
  options.max_body_bytes = 1024;
  Start(options);
  const std::string expect = "POST /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n";
  const int fd = Connect(port());
  // The body sent with the head: no 100, just the answer.
  Send(fd, expect + "Content-Length: 2\r\n\r\nhi");
  OneResponse r = ReadResponse(fd);
  EXPECT_EQ(r.status, "200") << r.head;
  EXPECT_EQ(r.body, "POST /a hi");
  // No body at all: nothing to continue.
  Send(fd, expect + "Content-Length: 0\r\n\r\n");
  r = ReadResponse(fd);
  EXPECT_EQ(r.status, "200") << r.head;
  // The body awaited: 100 first, then the answer, on the same connection.
  Send(fd, expect + "Content-Length: 3\r\n\r\n");
  r = ReadResponse(fd);
  EXPECT_EQ(r.status, "100") << r.head;
  EXPECT_EQ(r.head, "HTTP/1.1 100 Continue\r\n\r\n");
  Send(fd, "abc");
  r = ReadResponse(fd);
  EXPECT_EQ(r.status, "200") << r.head;
  EXPECT_EQ(r.body, "POST /a abc");
  EXPECT_FALSE(ClosedByServer(fd));
  ::close(fd);
  // A body over the limit: refused before any 100, and closed.
  const int big = Connect(port());
  Send(big, expect + "Content-Length: 1025\r\n\r\n");
  const Received refused = ReadUntilClosed(big);
  ::close(big);
  EXPECT_EQ(refused.text.rfind("HTTP/1.1 413", 0), 0u) << refused.text;
  EXPECT_EQ(refused.text.find("100 Continue"), std::string::npos) << refused.text;
  EXPECT_TRUE(refused.closed);
  EXPECT_EQ(handled_.load(), 3);
}

// A client that sends a request and never reads the answer holds its worker only until the
// write deadline; then its connection is closed and the next client is answered.
TEST_F(TransportTest, AClientThatDoesNotReadIsCutOffAtTheWriteDeadline) {
  TransportOptions options;
  options.worker_threads = 1;
  options.write_timeout_ms = 300;
  Start(options);
  const int slow = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int small = 4096;
  ::setsockopt(slow, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port()));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  ASSERT_EQ(::connect(slow, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  Send(slow, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
  for (int i = 0; i < 500 && handled_.load() == 0; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(handled_.load(), 1);
  // The one worker is writing to the client that does not read.
  const auto start = Clock::now();
  const int fast = Connect(port());
  Send(fast, "GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const Received f = ReadUntilClosed(fast);
  const auto waited = Clock::now() - start;
  ::close(fast);
  EXPECT_NE(f.text.find("GET /fast"), std::string::npos) << f.text;
  EXPECT_GE(waited, milliseconds(150));
  EXPECT_LT(waited, milliseconds(5000));
  // The slow client finds its answer cut short and the connection closed.
  const Received s = ReadUntilClosed(slow, milliseconds(10000));
  ::close(slow);
  EXPECT_TRUE(s.closed);
  EXPECT_EQ(s.text.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(s.text.size(), kBigBytes);
  EXPECT_EQ(handled_.load(), 2);
}

}  // namespace
}  // namespace gpuslice::api::http
