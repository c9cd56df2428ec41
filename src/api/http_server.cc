#include "api/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api::http {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// kDrain: an error was answered and our side shut; what the client still sends (the rest of a
// refused body) is read and dropped for a moment, so that it reads the answer instead of a reset.
enum class Phase { kHandshake, kIdle, kHead, kBody, kWorking, kDrain };

constexpr std::size_t kDrainBytes = 8 << 20;
constexpr int kDrainMs = 2000;
enum class Io { kOk, kWouldBlock, kEof, kError };

struct Connection {
  int fd = -1;
  SSL* ssl = nullptr;
  std::string source;
  std::string in;  // bytes read and not yet consumed
  Phase phase = Phase::kIdle;
  Clock::time_point deadline;
  bool first = true;                      // its first request has not been read yet
  bool registered = false;                // in the epoll set
  bool want_write = false;                // TLS waits for the socket to take bytes
  bool peer_closed = false;               // the peer sent its end of stream
  std::vector<std::string> client_names;  // a verified client certificate's names
  RequestHead head;                       // kBody, kWorking: the request being read or answered
  std::size_t head_bytes = 0;
  bool close_after = false;    // set by the worker
  std::size_t drain_left = 0;  // kDrain: bytes still to drop before closing
};

// The peer's numeric address; an IPv4 address mapped into IPv6 as the IPv4 one.
std::string NumericHost(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) != 0) {
    return "?";
  }
  std::string out = host;
  if (absl::StartsWith(out, "::ffff:") && out.find('.') != std::string::npos) out.erase(0, 7);
  return out;
}

// Waits until `fd` has `events` or the deadline passes.
bool WaitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left, 0)));
    if (n < 0 && errno == EINTR) continue;
    return n > 0 && (p.revents & (events | POLLERR | POLLHUP)) != 0;
  }
}

// Reads what the socket has into `c.in`, up to `cap` bytes buffered.
Io ReadAvailable(Connection& c, std::size_t cap) {
  char buf[16 * 1024];
  while (c.in.size() < cap) {
    const std::size_t want = std::min(sizeof buf, cap - c.in.size());
    if (c.ssl != nullptr) {
      ERR_clear_error();
      const int n = SSL_read(c.ssl, buf, static_cast<int>(want));
      if (n > 0) {
        c.in.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      const int error = SSL_get_error(c.ssl, n);
      c.want_write = error == SSL_ERROR_WANT_WRITE;
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) return Io::kWouldBlock;
      return error == SSL_ERROR_ZERO_RETURN ? Io::kEof : Io::kError;
    }
    const ssize_t n = ::recv(c.fd, buf, want, 0);
    if (n > 0) {
      c.in.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return Io::kEof;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? Io::kWouldBlock : Io::kError;
  }
  return Io::kOk;
}

// Writes all of `data` before the deadline (the socket is non-blocking).
bool WriteAll(Connection& c, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    if (c.ssl != nullptr) {
      ERR_clear_error();
      const int chunk = static_cast<int>(std::min<std::size_t>(data.size(), 1 << 30));
      const int n = SSL_write(c.ssl, data.data(), chunk);
      if (n > 0) {
        data.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      const int error = SSL_get_error(c.ssl, n);
      const short wait = error == SSL_ERROR_WANT_READ    ? POLLIN
                         : error == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                         : 0;
      if (wait == 0 || !WaitFd(c.fd, wait, deadline)) return false;
      continue;
    }
    const ssize_t n = ::send(c.fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if ((errno != EAGAIN && errno != EWOULDBLOCK) || !WaitFd(c.fd, POLLOUT, deadline)) {
      return false;
    }
  }
  return true;
}

Response ErrorResponse(int status, const std::string& message) {
  Response res;
  res.status = status;
  res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json");
  res.close = true;
  return res;
}

// The common name and DNS names of the client's certificate, when it sent one that verified.
std::vector<std::string> ClientCertificateNames(SSL* ssl) {
  std::vector<std::string> names;
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return names;
  if (SSL_get_verify_result(ssl) == X509_V_OK) {
    char cn[256] = {};
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) > 0) {
      names.emplace_back(cn);
    }
    auto* sans =
        static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
    for (int i = 0; sans != nullptr && i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
      if (name->type != GEN_DNS) continue;
      const ASN1_STRING* text = name->d.dNSName;
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
                         static_cast<std::size_t>(ASN1_STRING_length(text)));
    }
    GENERAL_NAMES_free(sans);
  }
  X509_free(cert);
  return names;
}

// Raises the open-files limit towards what `connections` need (each takes a descriptor).
void RaiseFileLimit(int connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t want = static_cast<rlim_t>(connections) + 1024;
  if (limit.rlim_cur >= want) return;
  limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? want : std::min(want, limit.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

class Transport::Impl {
 public:
  Impl(TransportOptions options, Handler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}
  ~Impl() {
    for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
      if (fd >= 0) ::close(fd);
    }
  }

  absl::Status Listen(int* port);
  void Launch();
  void Stop();
  TransportCounters counters() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
  }

 private:
  void Reactor();
  void Worker();
  void Accept();
  // Answers `status` and ends the connection: after a framing error the client's remaining bytes
  // are drained for a moment (`drain`), after a timeout it is closed at once.
  void Refuse(Connection* c, int status, const std::string& message, bool drain = true);
  void Drain(Connection* c);
  void Close(Connection* c, bool graceful = false);
  void Arm(Connection* c);
  void OnReadable(Connection* c);
  void Handshake(Connection* c);
  void Advance(Connection* c);
  bool ReadHead(Connection* c, Clock::time_point now);
  void Dispatch(Connection* c);
  void TakeReturned();
  void Sweep(Clock::time_point now);
  void Count(std::int64_t TransportCounters::*field, std::int64_t by = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.*field += by;
  }

  const TransportOptions options_;
  const Handler handler_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread reactor_;
  std::vector<std::thread> workers_;

  // The reactor thread's own.
  std::unordered_map<Connection*, std::unique_ptr<Connection>> connections_;
  std::unordered_map<std::string, int> per_source_;
  int working_ = 0;
  bool accepting_ = true;
  Clock::time_point accept_resume_;

  // Shared between the reactor and the workers.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<Connection*> work_;
  std::vector<Connection*> returned_;
  bool stopping_ = false;
  bool workers_stop_ = false;
  TransportCounters counters_;
};

absl::Status Transport::Impl::Listen(int* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options_.port);
  if (const int rc = ::getaddrinfo(options_.host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", options_.host, ": ", ::gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.host, ":", options_.port, " (", why, ")"));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return absl::InternalError("epoll/eventfd failed");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.ptr = &wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  RaiseFileLimit(options_.max_connections);
  return absl::OkStatus();
}

void Transport::Impl::Launch() {
  reactor_ = std::thread([this] { Reactor(); });
  for (int i = 0; i < std::max(1, options_.worker_threads); ++i) {
    workers_.emplace_back([this] { Worker(); });
  }
}

void Transport::Impl::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  const std::uint64_t one = 1;
  if (wake_fd_ >= 0 && ::write(wake_fd_, &one, sizeof one) < 0) {
    // The reactor also wakes at its next sweep.
  }
  if (reactor_.joinable()) reactor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers_stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void Transport::Impl::Reactor() {
  std::vector<epoll_event> events(256);
  Clock::time_point last_sweep = Clock::now();
  for (;;) {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stopping_;
    }
    if (stopping) {
      if (listen_fd_ >= 0) {
        ::close(listen_fd_);
        listen_fd_ = -1;
      }
      std::vector<Connection*> idle;
      for (auto& [ptr, owned] : connections_) {
        if (ptr->phase != Phase::kWorking) idle.push_back(ptr);
      }
      for (Connection* c : idle) Close(c);
      if (working_ == 0) return;
    }
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 100);
    for (int i = 0; i < n; ++i) {
      void* tag = events[static_cast<std::size_t>(i)].data.ptr;
      if (tag == &listen_fd_) {
        Accept();
      } else if (tag == &wake_fd_) {
        std::uint64_t value = 0;
        while (::read(wake_fd_, &value, sizeof value) > 0) {
        }
      } else {
        OnReadable(static_cast<Connection*>(tag));
      }
    }
    TakeReturned();
    const Clock::time_point now = Clock::now();
    if (now - last_sweep >= milliseconds(100)) {
      Sweep(now);
      last_sweep = now;
    }
  }
}

void Transport::Impl::Accept() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop accepting for a moment instead of spinning on the listener.
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accepting_ = false;
        accept_resume_ = Clock::now() + milliseconds(100);
      }
      return;
    }
    Count(&TransportCounters::accepted);
    std::string source = NumericHost(addr, len);
    const bool over_total = static_cast<int>(connections_.size()) >= options_.max_connections;
    const bool over_source = per_source_[source] >= options_.max_connections_per_source;
    if (over_total || over_source) {
      Count(over_total ? &TransportCounters::refused_total
                       : &TransportCounters::refused_per_source);
      if (options_.tls == nullptr) {
        const std::string text = SerializeResponse(ErrorResponse(
            over_total ? 503 : 429, over_total
                                        ? "the server has too many connections; try again later"
                                        : "too many connections from this address"));
        ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::shutdown(fd, SHUT_WR);
      }
      ::close(fd);
      if (per_source_[source] == 0) per_source_.erase(source);
      continue;
    }
    const int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    auto owned = std::make_unique<Connection>();
    Connection* c = owned.get();
    c->fd = fd;
    c->source = std::move(source);
    c->deadline = Clock::now() + milliseconds(options_.header_timeout_ms);
    if (options_.tls != nullptr) {
      c->ssl = SSL_new(options_.tls);
      if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) {
        if (c->ssl != nullptr) SSL_free(c->ssl);
        ::close(fd);
        continue;
      }
      SSL_set_mode(c->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
      SSL_set_accept_state(c->ssl);
      c->phase = Phase::kHandshake;
    }
    ++per_source_[c->source];
    connections_.emplace(c, std::move(owned));
    Count(&TransportCounters::open);
    Arm(c);
  }
}

void Transport::Impl::Arm(Connection* c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT | (c->want_write ? EPOLLOUT : 0u);
  ev.data.ptr = c;
  if (::epoll_ctl(epoll_fd_, c->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev) == 0) {
    c->registered = true;
  } else {
    Close(c);
  }
}

void Transport::Impl::Close(Connection* c, bool graceful) {
  // Counted before the peer can see the end, so that what it sees matches the counters.
  Count(&TransportCounters::open, -1);
  if (c->ssl != nullptr) {
    if (!c->peer_closed && c->phase != Phase::kHandshake) SSL_shutdown(c->ssl);
    SSL_free(c->ssl);
  }
  // Our end first: the answer just written reaches the peer before any reset for bytes unread.
  if (graceful) ::shutdown(c->fd, SHUT_WR);
  ::close(c->fd);
  if (--per_source_[c->source] <= 0) per_source_.erase(c->source);
  connections_.erase(c);
}

void Transport::Impl::Refuse(Connection* c, int status, const std::string& message, bool drain) {
  Count(status == 408 ? &TransportCounters::timed_out : &TransportCounters::bad_requests);
  const bool sent = WriteAll(*c, SerializeResponse(ErrorResponse(status, message)), Clock::now());
  if (!drain || !sent || c->peer_closed) return Close(c, true);
  if (c->ssl != nullptr) {
    SSL_shutdown(c->ssl);
  } else {
    ::shutdown(c->fd, SHUT_WR);
  }
  c->phase = Phase::kDrain;
  c->in.clear();
  c->drain_left = kDrainBytes;
  c->deadline = Clock::now() + milliseconds(kDrainMs);
  Arm(c);
}

void Transport::Impl::Drain(Connection* c) {
  char buf[16 * 1024];
  for (;;) {
    const ssize_t n = c->ssl != nullptr ? SSL_read(c->ssl, buf, static_cast<int>(sizeof buf))
                                        : ::recv(c->fd, buf, sizeof buf, 0);
    if (n > 0) {
      if (static_cast<std::size_t>(n) >= c->drain_left) break;
      c->drain_left -= static_cast<std::size_t>(n);
      continue;
    }
    const bool again = c->ssl != nullptr
                           ? SSL_get_error(c->ssl, static_cast<int>(n)) == SSL_ERROR_WANT_READ
                           : n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    if (again) return Arm(c);
    break;
  }
  c->peer_closed = true;  // our close_notify is sent already
  Close(c);
}

void Transport::Impl::Handshake(Connection* c) {
  ERR_clear_error();
  const int rc = SSL_accept(c->ssl);
  if (rc == 1) {
    c->phase = Phase::kIdle;
    c->want_write = false;
    c->client_names = ClientCertificateNames(c->ssl);
    OnReadable(c);  // application data may already be decrypted and waiting
    return;
  }
  const int error = SSL_get_error(c->ssl, rc);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
    c->want_write = error == SSL_ERROR_WANT_WRITE;
    Arm(c);
    return;
  }
  Count(&TransportCounters::tls_failures);
  c->peer_closed = true;  // no close_notify on a failed handshake
  Close(c);
}

void Transport::Impl::OnReadable(Connection* c) {
  if (c->phase == Phase::kHandshake) return Handshake(c);
  if (c->phase == Phase::kDrain) return Drain(c);
  const std::size_t cap = options_.head_limits.max_head_bytes + options_.max_body_bytes + 16 * 1024;
  const Io io = ReadAvailable(*c, cap);
  if (io == Io::kError) {
    c->peer_closed = true;
    return Close(c);
  }
  if (io == Io::kEof) c->peer_closed = true;
  Advance(c);
}

// With the head not read yet: parses what is buffered. False when the connection was refused
// or closed, or is armed to read more.
bool Transport::Impl::ReadHead(Connection* c, Clock::time_point now) {
  if (c->in.empty()) {
    if (c->peer_closed) {
      Close(c);
    } else {
      Arm(c);
    }
    return false;
  }
  if (c->phase == Phase::kIdle) {
    c->phase = Phase::kHead;
    // The first request's deadline runs from the accept; the others' from their first byte.
    if (!c->first) c->deadline = now + milliseconds(options_.header_timeout_ms);
  }
  HeadParse parsed = ParseRequestHead(c->in, options_.head_limits);
  if (parsed.state == HeadParse::State::kError) {
    Refuse(c, parsed.error_status, parsed.error);
    return false;
  }
  if (parsed.state == HeadParse::State::kIncomplete) {
    if (c->peer_closed) {
      Close(c);
    } else {
      Arm(c);
    }
    return false;
  }
  if (static_cast<std::uint64_t>(parsed.head.content_length) > options_.max_body_bytes) {
    Refuse(c, 413, absl::StrCat("the body is over ", options_.max_body_bytes, " bytes"));
    return false;
  }
  c->head = std::move(parsed.head);
  c->head_bytes = parsed.head_bytes;
  c->phase = Phase::kBody;
  c->first = false;
  c->deadline = now + milliseconds(options_.body_timeout_ms);
  const std::size_t whole = c->head_bytes + static_cast<std::size_t>(c->head.content_length);
  if (c->head.expects_continue && c->in.size() < whole) {
    WriteAll(*c, "HTTP/1.1 100 Continue\r\n\r\n", now + milliseconds(100));
  }
  return true;
}

void Transport::Impl::Advance(Connection* c) {
  const Clock::time_point now = Clock::now();
  if ((c->phase == Phase::kIdle || c->phase == Phase::kHead) && !ReadHead(c, now)) return;
  const std::size_t whole = c->head_bytes + static_cast<std::size_t>(c->head.content_length);
  if (c->in.size() < whole) {
    if (c->peer_closed) {
      Close(c);
    } else {
      Arm(c);
    }
    return;
  }
  Dispatch(c);
}

void Transport::Impl::Dispatch(Connection* c) {
  const std::size_t length = static_cast<std::size_t>(c->head.content_length);
  c->head.request.body = c->in.substr(c->head_bytes, length);
  c->in.erase(0, c->head_bytes + length);
  c->head.request.remote_ip = c->source;
  c->head.request.client_certificate_names = c->client_names;
  c->phase = Phase::kWorking;
  ++working_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.requests;
    work_.push_back(c);
  }
  work_cv_.notify_one();
}

void Transport::Impl::Worker() {
  for (;;) {
    Connection* c = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return workers_stop_ || !work_.empty(); });
      if (work_.empty()) return;
      c = work_.front();
      work_.pop_front();
    }
    Response response;
    try {
      handler_(c->head.request, response);
    } catch (...) {
      response = ErrorResponse(500, "internal error");
    }
    if (!c->head.keep_alive || c->peer_closed) response.close = true;
    const bool sent = WriteAll(*c, SerializeResponse(response),
                               Clock::now() + milliseconds(options_.write_timeout_ms));
    c->close_after = !sent || response.close;
    c->head = RequestHead{};
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_.push_back(c);
    }
    const std::uint64_t one = 1;
    if (::write(wake_fd_, &one, sizeof one) < 0) {
      // The reactor takes it back at its next wake-up (at most 100 ms).
    }
  }
}

void Transport::Impl::TakeReturned() {
  std::vector<Connection*> back;
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mu_);
    back.swap(returned_);
    stopping = stopping_;
  }
  const Clock::time_point now = Clock::now();
  for (Connection* c : back) {
    --working_;
    if (c->close_after || stopping) {
      Close(c, true);
      continue;
    }
    c->phase = Phase::kIdle;
    c->deadline = now + milliseconds(options_.idle_timeout_ms);
    Advance(c);  // a pipelined request may already be buffered
  }
}

void Transport::Impl::Sweep(Clock::time_point now) {
  if (!accepting_ && now >= accept_resume_ && listen_fd_ >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &listen_fd_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    accepting_ = true;
  }
  std::vector<Connection*> late;
  for (auto& [c, owned] : connections_) {
    if (c->phase != Phase::kWorking && c->deadline <= now) late.push_back(c);
  }
  for (Connection* c : late) {
    if (c->phase == Phase::kHead || c->phase == Phase::kBody) {
      Refuse(c, 408,
             c->phase == Phase::kHead ? "the request head took too long"
                                      : "the request body took too long",
             /*drain=*/false);
    } else if (c->phase == Phase::kDrain) {
      c->peer_closed = true;
      Close(c);
    } else {
      Count(&TransportCounters::timed_out);
      Close(c);
    }
  }
}

Transport::Transport(TransportOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

Transport::~Transport() { Stop(); }

absl::Status Transport::Start() {
  if (absl::Status st = impl_->Listen(&port_); !st.ok()) return st;
  impl_->Launch();
  return absl::OkStatus();
}

void Transport::Stop() {
  if (impl_ != nullptr) impl_->Stop();
}

TransportCounters Transport::counters() const { return impl_->counters(); }

}  // namespace gpuslice::api::http
