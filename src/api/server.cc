#include "gpuslice/api/server.h"

#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpuslice/alloc/usage.h"
#include "gpuslice/alloc/wire.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxBodyBytes = 64 * 1024;

// ---- transport
//
// httplib 0.11's own connection loop polls before every recv() and every send(), wakes every
// 10 ms to see whether a keep-alive connection has a new request, starts each request with a
// fresh 4 KiB buffer, and sends a response's headers and body in two send()s: with TCP_NODELAY,
// two segments, so the client wakes twice. With one thread per connection on a small machine,
// those system calls and wake-ups were most of the server's time. HttpServer keeps httplib's
// request parsing, routing and response writing (process_request) and runs them over
// ConnectionStream: one read buffer for the whole connection, recv() without a poll when
// bytes are there, and a response gathered into one send().

// A peer's or our own address as httplib gives it (numeric host, port).
void SocketAddress(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  sockaddr* generic = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? ::getpeername(sock, generic, &len) : ::getsockname(sock, generic, &len)) != 0) {
    return;
  }
  if (addr.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(generic, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0) ip = host;
}

class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int sock, int wake_fd, int read_timeout_ms)
      : sock_(sock), wake_fd_(wake_fd), read_timeout_ms_(read_timeout_ms), in_(16 * 1024) {}

  bool is_readable() const override {
    return begin_ < end_ || WaitReadable(read_timeout_ms_, false);
  }
  bool is_writable() const override { return true; }  // send() itself times out (SO_SNDTIMEO)

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == end_) {
      // Never wait for input with output unsent (a "100 Continue" goes before the body).
      if (!Flush()) return -1;
      const ssize_t n = Fill(read_timeout_ms_);
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, in_.data() + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (size >= kDirectWrite) {  // a large body goes as it is, after what came before it
      if (!Flush() || !SendAll(ptr, size)) return -1;
    } else {
      out_.append(ptr, size);
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    if (remote_port_ < 0) SocketAddress(sock_, true, remote_ip_, remote_port_);
    ip = remote_ip_;
    port = remote_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    if (local_port_ < 0) SocketAddress(sock_, false, local_ip_, local_port_);
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return sock_; }

  // Waits up to `timeout_ms` for the next request: false at the timeout or once the server
  // stops (the wake descriptor turns readable). The end of the stream counts as readable.
  bool WaitRequest(int timeout_ms) { return begin_ < end_ || WaitReadable(timeout_ms, true); }

  // Sends what the response wrote.
  bool Flush() {
    const bool ok = SendAll(out_.data(), out_.size());
    out_.clear();
    return ok;
  }

 private:
  static constexpr std::size_t kDirectWrite = 64 * 1024;

  bool WaitReadable(int timeout_ms, bool or_wake) const {
    pollfd fds[2] = {{sock_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const nfds_t count = or_wake && wake_fd_ >= 0 ? 2 : 1;
    for (;;) {
      const int n = ::poll(fds, count, timeout_ms);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || (count == 2 && fds[1].revents != 0)) return false;
      return fds[0].revents != 0;
    }
  }

  // Refills the empty buffer: the byte count, 0 at the end of the stream, -1 on an error or
  // after `timeout_ms` without a byte.
  ssize_t Fill(int timeout_ms) {
    begin_ = end_ = 0;
    for (;;) {
      const ssize_t n = ::recv(sock_, in_.data(), in_.size(), MSG_DONTWAIT);
      if (n >= 0) {
        end_ = static_cast<size_t>(n);
        return n;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!WaitReadable(timeout_ms, false)) return -1;
    }
  }

  bool SendAll(const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(sock_, data, size, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      data += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  int sock_;
  int wake_fd_;
  int read_timeout_ms_;
  std::vector<char> in_;
  size_t begin_ = 0;
  size_t end_ = 0;
  std::string out_;
  // Both addresses are asked once per connection, not once per request.
  mutable std::string remote_ip_;
  mutable int remote_port_ = -1;
  mutable std::string local_ip_;
  mutable int local_port_ = -1;
};

class HttpServer final : public httplib::Server {
 public:
  HttpServer() : wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~HttpServer() override {
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // After stop(): the connections waiting for their next request close now (the requests in
  // flight finish first).
  void WakeIdle() {
    const std::uint64_t one = 1;
    if (wake_fd_ >= 0 && ::write(wake_fd_, &one, sizeof one) < 0) {
      // Nothing to do: idle connections then close at their keep-alive timeout.
    }
  }

 private:
  // The loop httplib runs for each accepted connection, over ConnectionStream.
  bool process_and_close_socket(socket_t sock) override {
    // A send() stuck for the write timeout fails, as httplib's poll before each send did.
    timeval send_timeout{};
    send_timeout.tv_sec = write_timeout_sec_;
    send_timeout.tv_usec = static_cast<suseconds_t>(write_timeout_usec_);
    ::setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
    const int read_ms = static_cast<int>(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000);
    const int keep_alive_ms = static_cast<int>(keep_alive_timeout_sec_ * 1000);
    bool ret = false;
    {
      ConnectionStream strm(sock, wake_fd_, read_ms);
      for (std::size_t left = keep_alive_max_count_;
           left > 0 && svr_sock_ != INVALID_SOCKET && strm.WaitRequest(keep_alive_ms); --left) {
        bool connection_closed = false;
        ret = process_request(strm, left == 1, connection_closed, nullptr);
        if (!strm.Flush()) ret = false;
        if (!ret || connection_closed) break;
      }
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }

  int wake_fd_;
};

int HttpCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

void Reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

void Fail(httplib::Response& res, const absl::Status& status) {
  Reply(res, HttpCode(status), json{{"error", std::string(status.message())}});
}

// A JSON object body with only the allowed fields.
absl::StatusOr<json> Body(const httplib::Request& req, const std::set<std::string>& allowed) {
  if (req.body.size() > kMaxBodyBytes) {
    return absl::ResourceExhaustedError("body: larger than 64 KiB");
  }
  json body = json::parse(req.body.empty() ? std::string("{}") : req.body, nullptr, false);
  if (body.is_discarded()) return absl::InvalidArgumentError("body: not valid JSON");
  if (!body.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!allowed.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat("body: unknown field '", key, "'"));
    }
  }
  return body;
}

// Typed field readers: a missing field keeps the default; a wrong type is an error.
template <typename T>
absl::Status Field(const json& body, const char* name, T* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be true or false"));
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be an integer"));
    const auto value = it->get<std::int64_t>();
    if (value < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        value > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": out of range"));
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be a number"));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be a string"));
  } else {
    if (!it->is_object())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be an object"));
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ".", key, ": must be a string"));
      }
    }
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

json BoundJson(const std::vector<alloc::BoundDevice>& devices) {
  json bound = json::array();
  for (const alloc::BoundDevice& d : devices) {
    json device = {{"uuid", d.uuid}, {"gpu_uuid", d.gpu_uuid}, {"gpu_index", d.gpu_index}};
    if (d.gi >= 0) {
      device["gi"] = d.gi;
      device["ci"] = d.ci;
    }
    if (d.vram_mib > 0) device["vram_mib"] = d.vram_mib;
    if (d.share_milli > 0) device["share_milli"] = d.share_milli;
    bound.push_back(device);
  }
  return bound;
}

// A nested object: an object with only these fields.
absl::Status Only(const json& item, const std::set<std::string>& allowed, const char* where) {
  if (!item.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": an object"));
  for (const auto& [key, value] : item.items()) {
    if (!allowed.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown field '", key, "'"));
    }
  }
  return absl::OkStatus();
}

json LeaseJson(const alloc::Lease& lease) {
  const json bound = BoundJson(lease.bound);
  return {
      {"id", lease.id},
      {"tenant", lease.tenant},
      {"user", lease.user},
      {"class", lease.class_name},
      {"purpose", lease.purpose},
      {"node", lease.node},
      {"devices", lease.devices},
      {"memory_gib", lease.memory_gib},
      {"granted_at", lease.granted_at},
      {"expires_at", lease.expires_at},
      {"ended_at", lease.ended_at},
      {"state", lease.state},
      {"from_queue", lease.from_queue},
      {"bound", bound},
      // What a process needs, while the lease lasts.
      {"env", lease.state == "active" ? json(alloc::LeaseEnvironment(lease)) : json::object()},
      {"docker_args", lease.state == "active" ? json(alloc::DockerArgs(lease)) : json::array()}};
}

json UsageRowJson(const alloc::UsageRow& row) {
  json out = {{"key", row.key},
              {"tenant", row.tenant},
              {"class", row.class_name},
              {"purpose", row.purpose},
              {"leases", row.leases},
              {"samples", row.samples},
              {"first", row.first},
              {"last", row.last},
              {"memory_peak_mib", row.memory_peak_mib},
              {"memory_typical_mib", row.memory_typical_mib},
              {"processes_peak", row.processes_peak},
              {"concurrent_peak", row.concurrent_peak},
              {"gpu_model", row.gpu_model},
              {"profile", row.profile},
              {"share", row.share},
              {"slice_mib", row.slice_mib},
              {"peak_fraction", row.peak_fraction},
              {"workloads", row.workloads},
              {"oversized", row.oversized},
              {"too_small", row.too_small},
              {"idle", row.idle},
              {"suggested_profile", row.suggested_profile},
              {"kind", row.kind},
              {"explanation", row.explanation}};
  // Activity is absent when the devices never gave it (never a made-up zero).
  if (row.activity_peak_pct.has_value()) out["activity_peak_pct"] = *row.activity_peak_pct;
  if (row.activity_typical_pct.has_value()) {
    out["activity_typical_pct"] = *row.activity_typical_pct;
  }
  return out;
}

json QueueJson(const alloc::QueueEntry& q) {
  return {{"id", q.id},
          {"tenant", q.tenant},
          {"user", q.user},
          {"class", q.class_name},
          {"purpose", q.purpose},
          {"priority", q.priority},
          {"enqueued_at", q.enqueued_at},
          {"position", q.position},
          {"reason", q.reason}};
}

json ClassJson(const alloc::ClassSpec& c) {
  return {{"name", c.name},
          {"mig", c.mig},
          {"share_milli", c.share_milli},
          {"vram_mib", c.vram_mib},
          {"full", c.full},
          {"max_lease_s", c.max_lease_s},
          {"idle_timeout_s", c.idle_timeout_s}};
}

json TenantJson(const alloc::TenantSpec& t) {
  return {{"name", t.name},
          {"may_take_full", t.may_take_full},
          {"priority", t.priority},
          {"max_slices", t.max_slices},
          {"max_gib", t.max_gib}};
}

absl::StatusOr<std::int64_t> PathId(const httplib::Request& req) {
  std::int64_t id = 0;
  if (!absl::SimpleAtoi(req.matches[1].str(), &id) || id <= 0) {
    return absl::InvalidArgumentError("id: must be a positive integer");
  }
  return id;
}

// 200 with the layout in force, or 409 naming the leases in the way.
void LayoutReply(httplib::Response& res, const alloc::LayoutOutcome& outcome,
                 const std::string& refusal) {
  if (!outcome.accepted) {
    json blocking = json::array();
    for (const alloc::BlockingLease& b : outcome.blocking) {
      blocking.push_back({{"lease", b.lease.id},
                          {"tenant", b.lease.tenant},
                          {"user", b.lease.user},
                          {"class", b.lease.class_name},
                          {"purpose", b.lease.purpose},
                          {"state", b.lease.state},
                          {"gpu", b.gpu_index},
                          {"why", b.why}});
    }
    Reply(res, 409, {{"error", refusal}, {"blocking", blocking}});
    return;
  }
  Reply(res, 200,
        {{"layout", outcome.layout.generation > 0 ? alloc::LayoutToJson(outcome.layout) : json()}});
}

}  // namespace

ApiServer::ApiServer(alloc::Service& service, ServerOptions options)
    : service_(service), options_(std::move(options)), server_(std::make_unique<HttpServer>()) {}

ApiServer::~ApiServer() { Stop(); }

void ApiServer::Routes() {
  httplib::Server& s = *server_;
  s.set_payload_max_length(options_.max_body_bytes);
  // One worker per client connection up to this many (keep-alive connections hold a worker);
  // the service itself serialises the changes.
  const int workers = options_.worker_threads;
  s.new_task_queue = [workers] { return new httplib::ThreadPool(static_cast<size_t>(workers)); };
  s.set_keep_alive_timeout(2);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let a second server
  // share the port silently.
  s.set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket_ = sock;
  });
  // Replies leave at once (no Nagle delay against the client's delayed ACK), and a client keeps
  // its connection for as many requests as it likes: reconnecting storms would overflow the
  // listen backlog, which the library fixes at 5 (Start raises it).
  s.set_tcp_nodelay(true);
  s.set_keep_alive_max_count(1000000);
  // The size limit holds for what is parsed, not only for Content-Length: no chunked or
  // compressed request bodies (they are refused before the body is read).
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.has_header("Transfer-Encoding") &&
        req.get_header_value("Transfer-Encoding") != "identity") {
      Reply(res, 411, json{{"error", "chunked bodies are not accepted; send Content-Length"}});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.has_header("Content-Encoding") &&
        req.get_header_value("Content-Encoding") != "identity") {
      Reply(res, 415, json{{"error", "compressed bodies are not accepted"}});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  alloc::Service& service = service_;

  // Authenticates, then runs `handler(caller)`; any Status error becomes its HTTP code.
  auto authed = [&service](auto handler) {
    return [&service, handler](const httplib::Request& req, httplib::Response& res) {
      const std::string header = req.get_header_value("Authorization");
      if (header.rfind("Bearer ", 0) != 0) {
        Fail(res, absl::UnauthenticatedError("missing 'Authorization: Bearer <token>'"));
        return;
      }
      absl::StatusOr<alloc::Caller> caller = service.Authenticate(header.substr(7));
      if (!caller.ok()) {
        Fail(res, caller.status());
        return;
      }
      handler(*caller, req, res);
    };
  };

  if (options_.metrics) {
    auto metrics = options_.metrics;
    s.Get("/metrics", authed([metrics](const alloc::Caller& caller, const httplib::Request&,
                                       httplib::Response& res) {
            if (caller.role != alloc::Role::kAdmin && caller.role != alloc::Role::kAgent) {
              return Fail(res,
                          absl::PermissionDeniedError("/metrics needs an admin or agent token"));
            }
            absl::StatusOr<std::string> text = metrics();
            if (!text.ok()) return Fail(res, text.status());
            res.status = 200;
            res.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
          }));
  }

  s.Get("/v1/health", [&service](const httplib::Request&, httplib::Response& res) {
    int gpus = service.inventory().total_gpus();
    Reply(res, 200,
          {{"status", "ok"}, {"store", std::string(service.store_kind())}, {"gpus", gpus}});
  });

  s.Get("/v1/inventory",
        authed([&service](const alloc::Caller&, const httplib::Request&, httplib::Response& res) {
          const place::Cluster cluster = service.Occupancy();
          json nodes = json::array();
          for (int n = 0; n < cluster.node_count(); ++n) {
            const place::NodeSpec& spec = cluster.spec(n);
            json gpus = json::array();
            for (int g = 0; g < spec.gpus; ++g) {
              gpus.push_back({{"index", g},
                              {"free_milli", cluster.FreeMilli(n, g)},
                              {"fully_free", cluster.GpuFullyFree(n, g)}});
            }
            nodes.push_back({{"name", spec.name},
                             {"model", spec.model},
                             {"mode", std::string(place::ToString(spec.mode))},
                             {"cpu_milli", spec.cpu_milli},
                             {"memory_mib", spec.memory_mib},
                             {"gpus", gpus}});
          }
          Reply(res, 200, {{"nodes", nodes}});
        }));

  s.Get("/v1/classes",
        authed([&service](const alloc::Caller&, const httplib::Request&, httplib::Response& res) {
          json out = json::array();
          for (const alloc::ClassSpec& c : service.Classes()) out.push_back(ClassJson(c));
          Reply(res, 200, {{"classes", out}});
        }));
  s.Put(R"(/v1/classes/([A-Za-z0-9._-]+))",
        authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                          httplib::Response& res) {
          absl::StatusOr<json> body = Body(
              req, {"mig", "share_milli", "vram_mib", "full", "max_lease_s", "idle_timeout_s"});
          if (!body.ok()) return Fail(res, body.status());
          alloc::ClassSpec spec;
          spec.name = req.matches[1].str();
          for (absl::Status st :
               {Field(*body, "mig", &spec.mig), Field(*body, "share_milli", &spec.share_milli),
                Field(*body, "vram_mib", &spec.vram_mib), Field(*body, "full", &spec.full),
                Field(*body, "max_lease_s", &spec.max_lease_s),
                Field(*body, "idle_timeout_s", &spec.idle_timeout_s)}) {
            if (!st.ok()) return Fail(res, st);
          }
          if (absl::Status st = service.PutClass(caller, spec); !st.ok()) return Fail(res, st);
          Reply(res, 200, ClassJson(spec));
        }));
  s.Delete(R"(/v1/classes/([A-Za-z0-9._-]+))",
           authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                             httplib::Response& res) {
             if (absl::Status st = service.DeleteClass(caller, req.matches[1].str()); !st.ok()) {
               return Fail(res, st);
             }
             Reply(res, 200, {{"deleted", req.matches[1].str()}});
           }));

  s.Get("/v1/tenants", authed([&service](const alloc::Caller& caller, const httplib::Request&,
                                         httplib::Response& res) {
          absl::StatusOr<std::vector<alloc::TenantSpec>> tenants = service.Tenants(caller);
          if (!tenants.ok()) return Fail(res, tenants.status());
          json out = json::array();
          for (const alloc::TenantSpec& t : *tenants) out.push_back(TenantJson(t));
          Reply(res, 200, {{"tenants", out}});
        }));
  s.Put(R"(/v1/tenants/([A-Za-z0-9._-]+))",
        authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                          httplib::Response& res) {
          absl::StatusOr<json> body =
              Body(req, {"may_take_full", "priority", "max_slices", "max_gib"});
          if (!body.ok()) return Fail(res, body.status());
          alloc::TenantSpec tenant;
          tenant.name = req.matches[1].str();
          std::map<std::string, int> max_slices;
          for (absl::Status st : {Field(*body, "may_take_full", &tenant.may_take_full),
                                  Field(*body, "priority", &tenant.priority),
                                  Field(*body, "max_gib", &tenant.max_gib)}) {
            if (!st.ok()) return Fail(res, st);
          }
          if (auto it = body->find("max_slices"); it != body->end() && !it->is_null()) {
            if (!it->is_object()) {
              return Fail(res, absl::InvalidArgumentError("max_slices: must be an object"));
            }
            for (const auto& [class_name, value] : it->items()) {
              if (!value.is_number_integer()) {
                return Fail(res, absl::InvalidArgumentError(absl::StrCat("max_slices.", class_name,
                                                                         ": must be an integer")));
              }
              const auto max = value.get<std::int64_t>();
              if (max < 0 || max > 100000) {
                return Fail(res,
                            absl::InvalidArgumentError("max_slices: must be within 0..100000"));
              }
              tenant.max_slices[class_name] = static_cast<int>(max);
            }
          }
          if (absl::Status st = service.PutTenant(caller, tenant); !st.ok()) return Fail(res, st);
          Reply(res, 200, TenantJson(tenant));
        }));
  s.Delete(R"(/v1/tenants/([A-Za-z0-9._-]+))",
           authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                             httplib::Response& res) {
             if (absl::Status st = service.DeleteTenant(caller, req.matches[1].str()); !st.ok()) {
               return Fail(res, st);
             }
             Reply(res, 200, {{"deleted", req.matches[1].str()}});
           }));

  s.Post("/v1/users", authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                                        httplib::Response& res) {
           absl::StatusOr<json> body = Body(req, {"name", "tenant", "role"});
           if (!body.ok()) return Fail(res, body.status());
           std::string name;
           std::string tenant;
           std::string role = "tenant";
           for (absl::Status st : {Field(*body, "name", &name), Field(*body, "tenant", &tenant),
                                   Field(*body, "role", &role)}) {
             if (!st.ok()) return Fail(res, st);
           }
           if (role != "tenant" && role != "admin" && role != "agent") {
             return Fail(res, absl::InvalidArgumentError("role: 'tenant', 'admin' or 'agent'"));
           }
           absl::StatusOr<std::string> token =
               service.CreateUser(caller, name, tenant,
                                  role == "admin"   ? alloc::Role::kAdmin
                                  : role == "agent" ? alloc::Role::kAgent
                                                    : alloc::Role::kTenant);
           if (!token.ok()) return Fail(res, token.status());
           Reply(res, 201, {{"name", name}, {"tenant", tenant}, {"role", role}, {"token", *token}});
         }));

  s.Post(
      "/v1/leases", authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                                      httplib::Response& res) {
        absl::StatusOr<json> body =
            Body(req, {"class", "profile", "share_milli", "vram_mib", "purpose", "ttl_s", "wait"});
        if (!body.ok()) return Fail(res, body.status());
        alloc::AcquireRequest request;
        for (absl::Status st :
             {Field(*body, "class", &request.class_name), Field(*body, "profile", &request.profile),
              Field(*body, "share_milli", &request.share_milli),
              Field(*body, "vram_mib", &request.vram_mib),
              Field(*body, "purpose", &request.purpose), Field(*body, "ttl_s", &request.ttl_s),
              Field(*body, "wait", &request.wait)}) {
          if (!st.ok()) return Fail(res, st);
        }
        absl::StatusOr<alloc::AcquireResult> result = service.Acquire(caller, request);
        if (!result.ok()) return Fail(res, result.status());
        switch (result->outcome) {
          case alloc::AcquireResult::Outcome::kGranted:
            return Reply(res, 201, {{"outcome", "granted"}, {"lease", LeaseJson(result->lease)}});
          case alloc::AcquireResult::Outcome::kQueued:
            return Reply(res, 202,
                         {{"outcome", "queued"},
                          {"queued", QueueJson(result->queued)},
                          {"reason", result->reason}});
          case alloc::AcquireResult::Outcome::kRefused:
            return Reply(res, 409, {{"outcome", "refused"}, {"error", result->reason}});
        }
      }));
  s.Get("/v1/leases", authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                                        httplib::Response& res) {
          const bool all = req.get_param_value("all") == "true";
          absl::StatusOr<std::vector<alloc::Lease>> leases = service.Leases(caller, !all);
          if (!leases.ok()) return Fail(res, leases.status());
          json out = json::array();
          for (const alloc::Lease& lease : *leases) out.push_back(LeaseJson(lease));
          Reply(res, 200, {{"leases", out}});
        }));
  s.Get(R"(/v1/leases/(\d+))",
        authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                          httplib::Response& res) {
          absl::StatusOr<std::int64_t> id = PathId(req);
          if (!id.ok()) return Fail(res, id.status());
          absl::StatusOr<alloc::Lease> lease = service.GetLease(caller, *id);
          if (!lease.ok()) return Fail(res, lease.status());
          Reply(res, 200, LeaseJson(*lease));
        }));
  s.Post(R"(/v1/leases/(\d+)/renew)",
         authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                           httplib::Response& res) {
           absl::StatusOr<std::int64_t> id = PathId(req);
           if (!id.ok()) return Fail(res, id.status());
           absl::StatusOr<json> body = Body(req, {"ttl_s"});
           if (!body.ok()) return Fail(res, body.status());
           std::int64_t ttl = 0;
           if (absl::Status st = Field(*body, "ttl_s", &ttl); !st.ok()) return Fail(res, st);
           absl::StatusOr<alloc::Lease> lease = service.Renew(caller, *id, ttl);
           if (!lease.ok()) return Fail(res, lease.status());
           Reply(res, 200, LeaseJson(*lease));
         }));
  s.Delete(R"(/v1/leases/(\d+))",
           authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                             httplib::Response& res) {
             absl::StatusOr<std::int64_t> id = PathId(req);
             if (!id.ok()) return Fail(res, id.status());
             if (absl::Status st = service.Release(caller, *id); !st.ok()) return Fail(res, st);
             Reply(res, 200, {{"released", *id}});
           }));

  s.Get("/v1/queue", authed([&service](const alloc::Caller& caller, const httplib::Request&,
                                       httplib::Response& res) {
          absl::StatusOr<std::vector<alloc::QueueEntry>> queue = service.Queue(caller);
          if (!queue.ok()) return Fail(res, queue.status());
          json out = json::array();
          for (const alloc::QueueEntry& q : *queue) out.push_back(QueueJson(q));
          Reply(res, 200, {{"queue", out}});
        }));
  s.Delete(R"(/v1/queue/(\d+))",
           authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                             httplib::Response& res) {
             absl::StatusOr<std::int64_t> id = PathId(req);
             if (!id.ok()) return Fail(res, id.status());
             if (absl::Status st = service.CancelQueued(caller, *id); !st.ok()) {
               return Fail(res, st);
             }
             Reply(res, 200, {{"cancelled", *id}});
           }));

  // ---- agents: machines report their GPUs, fetch the leases to set up, report their devices
  s.Put(
      R"(/v1/nodes/([A-Za-z0-9._-]+))",
      authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                        httplib::Response& res) {
        absl::StatusOr<json> body = Body(req, {"cpu_milli", "memory_mib", "gpus"});
        if (!body.ok()) return Fail(res, body.status());
        alloc::NodeReport report;
        report.host = req.matches[1].str();
        for (absl::Status st : {Field(*body, "cpu_milli", &report.cpu_milli),
                                Field(*body, "memory_mib", &report.memory_mib)}) {
          if (!st.ok()) return Fail(res, st);
        }
        auto gpus = body->find("gpus");
        if (gpus == body->end() || !gpus->is_array()) {
          return Fail(res, absl::InvalidArgumentError("gpus: must be an array"));
        }
        for (const json& item : *gpus) {
          if (absl::Status st = Only(item, {"index", "uuid", "model", "mig"}, "gpus[]"); !st.ok()) {
            return Fail(res, st);
          }
          alloc::NodeReport::Gpu gpu;
          for (absl::Status st : {Field(item, "index", &gpu.index), Field(item, "uuid", &gpu.uuid),
                                  Field(item, "model", &gpu.model), Field(item, "mig", &gpu.mig)}) {
            if (!st.ok()) return Fail(res, st);
          }
          report.gpus.push_back(gpu);
        }
        if (absl::Status st = service.ReportNode(caller, report); !st.ok()) return Fail(res, st);
        const place::Cluster cluster = service.Occupancy();
        json nodes = json::array();
        for (int n = 0; n < cluster.node_count(); ++n) {
          const std::string& name = cluster.spec(n).name;
          if (name.rfind(report.host + "/", 0) == 0) nodes.push_back(name);
        }
        Reply(res, 200, {{"host", report.host}, {"nodes", nodes}});
      }));
  s.Get("/v1/nodes", authed([&service](const alloc::Caller& caller, const httplib::Request&,
                                       httplib::Response& res) {
          absl::StatusOr<std::vector<alloc::NodeReport>> nodes = service.Nodes(caller);
          if (!nodes.ok()) return Fail(res, nodes.status());
          json out = json::array();
          for (const alloc::NodeReport& n : *nodes) {
            json gpus = json::array();
            for (const alloc::NodeReport::Gpu& g : n.gpus) {
              gpus.push_back(
                  {{"index", g.index}, {"uuid", g.uuid}, {"model", g.model}, {"mig", g.mig}});
            }
            absl::StatusOr<std::optional<alloc::NodeLayout>> layout =
                service.GetLayout(caller, n.host);
            out.push_back(
                {{"host", n.host},
                 {"cpu_milli", n.cpu_milli},
                 {"memory_mib", n.memory_mib},
                 {"gpus", gpus},
                 {"seen_at", n.seen_at},
                 {"layout",
                  layout.ok() && layout->has_value() ? alloc::LayoutToJson(**layout) : json()}});
          }
          Reply(res, 200, {{"nodes", out}});
        }));
  s.Get(R"(/v1/nodes/([A-Za-z0-9._-]+)/assignments)",
        authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                          httplib::Response& res) {
          absl::StatusOr<std::vector<alloc::Assignment>> assignments =
              service.Assignments(caller, req.matches[1].str());
          if (!assignments.ok()) return Fail(res, assignments.status());
          json out = json::array();
          for (const alloc::Assignment& a : *assignments) {
            const json claims = alloc::ClaimsToJson(a.claims);
            out.push_back({{"lease", a.lease},
                           {"node", a.node},
                           {"claims", claims},
                           {"bound", BoundJson(a.bound)},
                           {"tenant", a.tenant},
                           {"class", a.class_name},
                           {"idle_timeout_s", a.idle_timeout_s}});
          }
          absl::StatusOr<std::optional<alloc::NodeLayout>> layout =
              service.GetLayout(caller, req.matches[1].str());
          if (!layout.ok()) return Fail(res, layout.status());
          Reply(res, 200,
                {{"assignments", out},
                 {"layout", layout->has_value() ? alloc::LayoutToJson(**layout) : json()}});
        }));
  s.Post(
      R"(/v1/nodes/([A-Za-z0-9._-]+)/bound)",
      authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                        httplib::Response& res) {
        absl::StatusOr<json> body = Body(req, {"leases"});
        if (!body.ok()) return Fail(res, body.status());
        auto leases = body->find("leases");
        if (leases == body->end() || !leases->is_object()) {
          return Fail(res, absl::InvalidArgumentError(
                               "leases: an object of lease id to a list of devices"));
        }
        std::map<std::int64_t, std::vector<alloc::BoundDevice>> bound;
        for (const auto& [key, devices] : leases->items()) {
          std::int64_t id = 0;
          if (!absl::SimpleAtoi(key, &id) || id <= 0 || !devices.is_array()) {
            return Fail(res, absl::InvalidArgumentError(absl::StrCat(
                                 "leases.", key, ": a lease id mapping to a list of devices")));
          }
          for (const json& item : devices) {
            if (absl::Status st = Only(
                    item, {"uuid", "gpu_uuid", "gpu_index", "gi", "ci", "vram_mib", "share_milli"},
                    "leases[]");
                !st.ok()) {
              return Fail(res, st);
            }
            alloc::BoundDevice d;
            for (absl::Status st :
                 {Field(item, "uuid", &d.uuid), Field(item, "gpu_uuid", &d.gpu_uuid),
                  Field(item, "gpu_index", &d.gpu_index), Field(item, "gi", &d.gi),
                  Field(item, "ci", &d.ci), Field(item, "vram_mib", &d.vram_mib),
                  Field(item, "share_milli", &d.share_milli)}) {
              if (!st.ok()) return Fail(res, st);
            }
            bound[id].push_back(d);
          }
        }
        absl::StatusOr<std::vector<std::int64_t>> ignored =
            service.ReportBound(caller, req.matches[1].str(), bound);
        if (!ignored.ok()) return Fail(res, ignored.status());
        Reply(res, 200, {{"ignored", *ignored}});
      }));

  // Each lease: idle_s (the idle reclaim's figure, valid for valid_s) and/or its usage figures
  // (memory_used_mib with optional memory_total_mib, sm_active_pct, processes) for the history.
  s.Post(
      R"(/v1/nodes/([A-Za-z0-9._-]+)/usage)",
      authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                        httplib::Response& res) {
        absl::StatusOr<json> body = Body(req, {"leases", "valid_s"});
        if (!body.ok()) return Fail(res, body.status());
        std::int64_t valid_s = 0;
        if (absl::Status st = Field(*body, "valid_s", &valid_s); !st.ok()) return Fail(res, st);
        auto leases = body->find("leases");
        if (leases == body->end() || !leases->is_object()) {
          return Fail(res, absl::InvalidArgumentError(
                               "leases: an object of lease id to {\"idle_s\": seconds, "
                               "\"memory_used_mib\": MiB, ...}"));
        }
        std::map<std::int64_t, std::int64_t> idle;
        std::map<std::int64_t, alloc::UsageFigures> figures;
        for (const auto& [key, usage] : leases->items()) {
          std::int64_t id = 0;
          if (!absl::SimpleAtoi(key, &id) || id <= 0 || !usage.is_object()) {
            return Fail(res, absl::InvalidArgumentError(absl::StrCat(
                                 "leases.", key, ": a lease id mapping to {\"idle_s\": n}")));
          }
          if (absl::Status st = Only(
                  usage,
                  {"idle_s", "memory_used_mib", "memory_total_mib", "sm_active_pct", "processes"},
                  "leases[]");
              !st.ok()) {
            return Fail(res, st);
          }
          const bool has_figures = usage.contains("memory_used_mib");
          if (!has_figures && (usage.contains("memory_total_mib") ||
                               usage.contains("sm_active_pct") || usage.contains("processes"))) {
            return Fail(res, absl::InvalidArgumentError(
                                 absl::StrCat("leases.", key,
                                              ": memory_used_mib is required with the other "
                                              "usage figures")));
          }
          if (usage.contains("idle_s") || !has_figures) {
            std::int64_t seconds = -1;
            if (absl::Status st = Field(usage, "idle_s", &seconds); !st.ok()) {
              return Fail(res, st);
            }
            idle[id] = seconds;
          }
          if (!has_figures) continue;
          alloc::UsageFigures f;
          double activity = 0;
          for (absl::Status st : {Field(usage, "memory_used_mib", &f.memory_used_mib),
                                  Field(usage, "memory_total_mib", &f.memory_total_mib),
                                  Field(usage, "sm_active_pct", &activity),
                                  Field(usage, "processes", &f.processes)}) {
            if (!st.ok()) return Fail(res, st);
          }
          if (usage.contains("sm_active_pct") && !usage["sm_active_pct"].is_null()) {
            f.sm_active_pct = activity;
          }
          if (absl::Status st = alloc::ValidateUsageFigures(f); !st.ok()) {
            return Fail(
                res, absl::InvalidArgumentError(absl::StrCat("leases.", key, ".", st.message())));
          }
          figures[id] = f;
        }
        std::set<std::int64_t> ignored;
        if (!idle.empty() || figures.empty()) {
          absl::StatusOr<std::vector<std::int64_t>> not_here =
              service.ReportUsage(caller, req.matches[1].str(), idle, valid_s);
          if (!not_here.ok()) return Fail(res, not_here.status());
          ignored.insert(not_here->begin(), not_here->end());
        }
        if (!figures.empty()) {
          absl::StatusOr<std::vector<std::int64_t>> not_here =
              service.RecordUsage(caller, req.matches[1].str(), figures);
          if (!not_here.ok()) return Fail(res, not_here.status());
          ignored.insert(not_here->begin(), not_here->end());
        }
        Reply(res, 200, {{"ignored", ignored}});
      }));
  // The usage history's report (admin: every tenant; a tenant's user: its own).
  s.Get("/v1/usage", authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                                       httplib::Response& res) {
          std::int64_t since_s = 7 * 86400;
          if (req.has_param("since") && !absl::SimpleAtoi(req.get_param_value("since"), &since_s)) {
            return Fail(res, absl::InvalidArgumentError("since: seconds (e.g. 604800 for 7 days)"));
          }
          alloc::UsageGroupBy by = alloc::UsageGroupBy::kWorkload;
          if (req.has_param("by")) {
            std::optional<alloc::UsageGroupBy> parsed =
                alloc::ParseUsageGroupBy(req.get_param_value("by"));
            if (!parsed.has_value()) {
              return Fail(res, absl::InvalidArgumentError("by: workload, tenant or class"));
            }
            by = *parsed;
          }
          absl::StatusOr<alloc::UsageReport> report = service.UsageReport(caller, since_s, by);
          if (!report.ok()) return Fail(res, report.status());
          json rows = json::array();
          for (const alloc::UsageRow& row : report->rows) rows.push_back(UsageRowJson(row));
          Reply(res, 200,
                {{"since", report->since},
                 {"until", report->until},
                 {"by", std::string(alloc::ToString(report->by))},
                 {"rows", rows},
                 {"plan_yaml", alloc::PlanWorkloadsYaml(*report)}});
        }));

  // ---- layouts: an admin fixes a machine's MIG layout; its agent carries it out
  s.Put(R"(/v1/nodes/([A-Za-z0-9._-]+)/layout)",
        authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                          httplib::Response& res) {
          absl::StatusOr<json> body = Body(req, {"config", "name", "origin"});
          if (!body.ok()) return Fail(res, body.status());
          alloc::LayoutRequest request;
          for (absl::Status st : {Field(*body, "config", &request.config_text),
                                  Field(*body, "name", &request.config_name),
                                  Field(*body, "origin", &request.origin)}) {
            if (!st.ok()) return Fail(res, st);
          }
          if (request.config_text.empty()) {
            return Fail(res, absl::InvalidArgumentError(
                                 "config: the mig-parted config text (YAML or JSON) is required"));
          }
          absl::StatusOr<alloc::LayoutOutcome> outcome =
              service.SetLayout(caller, req.matches[1].str(), request);
          if (!outcome.ok()) return Fail(res, outcome.status());
          LayoutReply(res, *outcome, "leases stand in the way of the layout; nothing was changed");
        }));
  s.Get(
      R"(/v1/nodes/([A-Za-z0-9._-]+)/layout)",
      authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                        httplib::Response& res) {
        absl::StatusOr<std::optional<alloc::NodeLayout>> layout =
            service.GetLayout(caller, req.matches[1].str());
        if (!layout.ok()) return Fail(res, layout.status());
        Reply(res, 200, {{"layout", layout->has_value() ? alloc::LayoutToJson(**layout) : json()}});
      }));
  s.Delete(R"(/v1/nodes/([A-Za-z0-9._-]+)/layout)",
           authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                             httplib::Response& res) {
             absl::StatusOr<alloc::LayoutOutcome> outcome =
                 service.ClearLayout(caller, req.matches[1].str());
             if (!outcome.ok()) return Fail(res, outcome.status());
             LayoutReply(res, *outcome,
                         "leases stand in the way of clearing the layout; nothing was changed");
           }));
  s.Post(R"(/v1/nodes/([A-Za-z0-9._-]+)/layout/status)",
         authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                           httplib::Response& res) {
           absl::StatusOr<json> body = Body(req, {"generation", "message"});
           if (!body.ok()) return Fail(res, body.status());
           std::int64_t generation = 0;
           std::string message;
           for (absl::Status st :
                {Field(*body, "generation", &generation), Field(*body, "message", &message)}) {
             if (!st.ok()) return Fail(res, st);
           }
           if (absl::Status st =
                   service.ReportLayout(caller, req.matches[1].str(), generation, message);
               !st.ok()) {
             return Fail(res, st);
           }
           Reply(res, 200, {{"generation", generation}});
         }));
  s.Get("/v1/audit", authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                                       httplib::Response& res) {
          alloc::AuditQuery query;
          query.tenant = req.get_param_value("tenant");
          if (req.has_param("since") &&
              !absl::SimpleAtoi(req.get_param_value("since"), &query.since)) {
            return Fail(res, absl::InvalidArgumentError("since: epoch seconds"));
          }
          if (req.has_param("limit") &&
              !absl::SimpleAtoi(req.get_param_value("limit"), &query.limit)) {
            return Fail(res, absl::InvalidArgumentError("limit: an integer"));
          }
          absl::StatusOr<std::vector<alloc::AuditEvent>> events = service.Audit(caller, query);
          if (!events.ok()) return Fail(res, events.status());
          json out = json::array();
          for (const alloc::AuditEvent& e : *events) {
            out.push_back({{"id", e.id},
                           {"at", e.at},
                           {"actor", e.actor},
                           {"tenant", e.tenant},
                           {"action", e.action},
                           {"subject", e.subject},
                           {"purpose", e.purpose},
                           {"detail", json::parse(e.detail, nullptr, false)}});
          }
          Reply(res, 200, {{"events", out}});
        }));
  s.Post(R"(/v1/nodes/([A-Za-z0-9._-]+)/alerts)",
         authed([&service](const alloc::Caller& caller, const httplib::Request& req,
                           httplib::Response& res) {
           absl::StatusOr<json> body = Body(req, {"fired", "cleared"});
           if (!body.ok()) return Fail(res, body.status());
           metrics::AlertChanges changes;
           for (const char* list : {"fired", "cleared"}) {
             if (!body->contains(list)) continue;
             const json& items = (*body)[list];
             if (!items.is_array()) {
               return Fail(res, absl::InvalidArgumentError(absl::StrCat(list, ": an array")));
             }
             for (const json& item : items) {
               absl::StatusOr<metrics::Alert> alert = metrics::AlertFromJson(item);
               if (!alert.ok()) {
                 return Fail(res, absl::InvalidArgumentError(
                                      absl::StrCat(list, "[]: ", alert.status().message())));
               }
               (std::string(list) == "fired" ? changes.fired : changes.cleared)
                   .push_back(*std::move(alert));
             }
           }
           if (absl::Status st = service.ReportAlerts(caller, req.matches[1].str(), changes);
               !st.ok()) {
             return Fail(res, st);
           }
           Reply(res, 200, {{"fired", changes.fired.size()}, {"cleared", changes.cleared.size()}});
         }));
  s.Get("/v1/alerts", authed([&service](const alloc::Caller& caller, const httplib::Request&,
                                        httplib::Response& res) {
          absl::StatusOr<alloc::Service::AlertList> list = service.Alerts(caller);
          if (!list.ok()) return Fail(res, list.status());
          json active = json::array();
          json recent = json::array();
          for (const metrics::Alert& a : list->active) active.push_back(metrics::AlertToJson(a));
          for (const metrics::Alert& a : list->recent) recent.push_back(metrics::AlertToJson(a));
          Reply(res, 200, {{"active", active}, {"recent", recent}});
        }));

  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      const char* what = res.status == 404   ? "no such endpoint"
                         : res.status == 413 ? "body too large"
                                             : "request failed";
      Reply(res, res.status, json{{"error", what}});
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    Reply(res, 500, json{{"error", "internal error"}});
  });
}

absl::Status ApiServer::Start() {
  Routes();
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ <= 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.host));
    }
  } else {
    if (!server_->bind_to_port(options_.host, options_.port)) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.host, ":",
                                                 options_.port,
                                                 " (in use, or not an address of this machine)"));
    }
    port_ = options_.port;
  }
  // The library listens with a backlog of 5; many clients connecting at once would have their
  // SYNs dropped and retried a second later. Listening again on the socket raises the backlog.
  if (listen_socket_ >= 0) ::listen(listen_socket_, SOMAXCONN);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // Serving before returning, so that Stop() right away cannot miss the listener.
  for (int i = 0; i < 500 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::OkStatus();
}

void ApiServer::Stop() {
  if (server_) {
    server_->stop();
    static_cast<HttpServer&>(*server_).WakeIdle();
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace gpuslice::api
