// Load benchmark of the allocation service: N concurrent HTTP clients acquire and release slices
// against the API (an in-process `serve`: alloc::Service + api::ApiServer on loopback), on SQLite
// or PostgreSQL, and, in the same run, the raw durable single-row transaction rate of the same
// database on the same machine (one INSERT + COMMIT at a time), so the service's cost is a ratio.
//
//   load_bench --store sqlite|postgres [--url postgres://...] [--clients N] [--seconds S]
//              [--dir DIR] [--policy NAME] [--tls]
//
// With --tls the server speaks TLS (a self-signed certificate made in --dir, as `serve` makes
// by default) and each client verifies it and sends its requests over its own TLS connection.
//
// Each client loops: POST /v1/leases {"class":"small"} (timed: the acquire latency), then
// DELETE /v1/leases/{id}. ops_per_s counts both calls. The fleet is simulated: 8 machines of 8
// A100-80GB in MIG mode (448 small slices), so acquires never queue.
//
// Each client is a thread with its own keep-alive HTTP/1.1 connection (Client below). It sends
// the bytes httplib::Client 0.11 sends (same request line and headers, in the same order), but in
// one send() per request, and reads the response to its Content-Length without a poll() before
// each read: httplib's client spent about 20% of the machine's CPU, sharing the 2 cores with the
// server it measures. The latency is still the whole HTTP exchange on loopback: from before the
// request is written to after the whole response is read. Ends with one line:
//   load <sqlite|postgres> clients=<n> ops_per_s=<x> p50_ms=<y> p99_ms=<z> raw_txn_per_s=<w>
//        transport=<plain|tls>
// Exit status: 0 done, 1 a request failed, 2 bad usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string_view>
#include <thread>
#include <vector>

#include "gpuslice/alloc/service.h"
#include "gpuslice/api/server.h"
#include "gpuslice/api/tls.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/store/database.h"
#include "nlohmann/json.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gpuslice;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string store = "sqlite";
  std::string url;
  int clients = 32;
  double seconds = 5;
  std::string dir;
  std::string policy = "gpuslice";
  bool tls = false;
};

// One keep-alive HTTP/1.1 client connection (see the top of the file). Request() answers the
// status code, or -1 when the connection failed; it reconnects when the server closed.
class Client {
 public:
  // `tls`: a client context that verifies the server (null: plain HTTP).
  Client(int port, std::string authorization, SSL_CTX* tls = nullptr)
      : tls_(tls),
        port_(port),
        host_header_("Host: 127.0.0.1:" + std::to_string(port) + "\r\n"),
        authorization_("Authorization: " + std::move(authorization) + "\r\n"),
        in_(64 * 1024) {}
  ~Client() { Close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  int Request(std::string_view method, std::string_view path, std::string_view json_body,
              std::string& body) {
    if (fd_ < 0 && !Connect()) return -1;
    out_.clear();
    out_.append(method).append(" ").append(path).append(" HTTP/1.1\r\nAccept: */*\r\n");
    out_.append(authorization_);
    if (!json_body.empty() || method == "POST") {
      out_.append("Content-Length: ").append(std::to_string(json_body.size())).append("\r\n");
      out_.append("Content-Type: application/json\r\n");
    }
    out_.append(host_header_).append("User-Agent: cpp-httplib/0.11.4\r\n\r\n");
    out_.append(json_body);
    const int status = Send() ? ReadResponse(body) : -1;
    if (status < 0 || close_after_) Close();
    return status;
  }

 private:
  bool Connect() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    int yes = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      Close();
      return false;
    }
    begin_ = end_ = 0;
    if (tls_ != nullptr) {
      ssl_ = SSL_new(tls_);
      if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1 || SSL_connect(ssl_) != 1) {
        Close();
        return false;
      }
    }
    return true;
  }
  void Close() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    ssl_ = nullptr;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  ssize_t Write(const char* data, size_t size) {
    if (ssl_ != nullptr) return SSL_write(ssl_, data, static_cast<int>(size));
    return ::send(fd_, data, size, MSG_NOSIGNAL);
  }
  ssize_t Read(char* data, size_t size) {
    if (ssl_ != nullptr) return SSL_read(ssl_, data, static_cast<int>(size));
    return ::recv(fd_, data, size, 0);
  }
  bool Send() {
    std::string_view left = out_;
    while (!left.empty()) {
      const ssize_t n = Write(left.data(), left.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      left.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // More bytes into the buffer (moving what is unread to its front): false at the end.
  bool Fill() {
    if (begin_ > 0) {
      std::memmove(in_.data(), in_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == in_.size()) in_.resize(in_.size() * 2);
    for (;;) {
      const ssize_t n = Read(in_.data() + end_, in_.size() - end_);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      end_ += static_cast<size_t>(n);
      return true;
    }
  }
  // The status line, the headers (Content-Length, Connection), then the body.
  int ReadResponse(std::string& body) {
    std::string_view head;
    for (;;) {
      const std::string_view buffered(in_.data() + begin_, end_ - begin_);
      if (const size_t at = buffered.find("\r\n\r\n"); at != std::string_view::npos) {
        head = buffered.substr(0, at + 2);
        break;
      }
      if (!Fill()) return -1;
    }
    const size_t head_size = head.size() + 2;
    // "HTTP/1.1 201 Created"
    if (head.size() < 12 || head.substr(0, 5) != "HTTP/") return -1;
    int status = 0;
    if (std::from_chars(head.data() + 9, head.data() + 12, status).ec != std::errc{}) return -1;
    size_t length = 0;
    bool has_length = false;
    close_after_ = false;
    for (size_t line = head.find("\r\n") + 2; line < head.size();) {
      const size_t next = head.find("\r\n", line);
      const std::string_view field = head.substr(line, next - line);
      line = next + 2;
      const size_t colon = field.find(':');
      if (colon == std::string_view::npos) return -1;
      const std::string_view name = field.substr(0, colon);
      std::string_view value = field.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (Is(name, "Content-Length")) {
        if (std::from_chars(value.data(), value.data() + value.size(), length).ec != std::errc{}) {
          return -1;
        }
        has_length = true;
      } else if (Is(name, "Transfer-Encoding")) {
        return -1;  // the API never answers chunked
      } else if (Is(name, "Connection") && Is(value, "close")) {
        close_after_ = true;
      }
    }
    if (!has_length) return -1;
    begin_ += head_size;
    while (end_ - begin_ < length) {
      if (!Fill()) return -1;
    }
    body.assign(in_.data() + begin_, length);
    begin_ += length;
    return status;
  }
  static bool Is(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  }

  SSL_CTX* tls_;
  SSL* ssl_ = nullptr;
  int port_;
  std::string host_header_;
  std::string authorization_;
  int fd_ = -1;
  std::string out_;
  std::vector<char> in_;
  size_t begin_ = 0;
  size_t end_ = 0;
  bool close_after_ = false;
};

int Usage(const std::string& message) {
  if (!message.empty()) std::cerr << "load_bench: " << message << "\n";
  std::cerr << "usage: load_bench --store sqlite|postgres [--url URL] [--clients N] [--seconds S] "
               "[--policy NAME]"
               " [--dir DIR] [--tls]\n";
  return 2;
}

absl::StatusOr<std::unique_ptr<store::Database>> Open(const Options& o, const std::string& name) {
  if (o.store == "postgres") {
    absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenPostgres(o.url);
    if (!db.ok()) return db;
    // A clean schema for each phase.
    if (absl::Status s = (*db)->Exec("DROP SCHEMA public CASCADE"); !s.ok()) return s;
    if (absl::Status s = (*db)->Exec("CREATE SCHEMA public"); !s.ok()) return s;
    return db;
  }
  const fs::path path = fs::path(o.dir) / name;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path.string() + suffix);
  return store::OpenSqlite(path.string());
}

// Durable single-row transactions, one at a time, for `seconds`.
absl::StatusOr<double> RawRate(const Options& o) {
  absl::StatusOr<std::unique_ptr<store::Database>> db = Open(o, "raw.db");
  if (!db.ok()) return db.status();
  if (absl::Status s = (*db)->Exec("CREATE TABLE raw (id BIGINT PRIMARY KEY, v TEXT NOT NULL)");
      !s.ok()) {
    return s;
  }
  const auto start = Clock::now();
  std::int64_t n = 0;
  while (std::chrono::duration<double>(Clock::now() - start).count() < o.seconds) {
    store::Transaction txn(**db);
    const store::Value params[] = {n, std::string("row")};
    if (absl::Status s = (*db)->Exec("INSERT INTO raw (id, v) VALUES (?, ?)", params); !s.ok()) {
      return s;
    }
    if (absl::Status s = txn.Commit(); !s.ok()) return s;
    ++n;
  }
  return static_cast<double>(n) / std::chrono::duration<double>(Clock::now() - start).count();
}

// The service on eight machines of eight GPUs, as `serve` sees them: one placement node per
// machine and model.
absl::StatusOr<std::unique_ptr<alloc::Service>> OpenService(const Options& o) {
  std::vector<place::NodeSpec> nodes;
  for (int m = 0; m < 8; ++m) {
    place::NodeSpec node;
    node.name = "bench-" + std::to_string(m) + "/A100-80GB-mig";
    node.model = "A100-80GB";
    node.cpu_milli = 128'000;
    node.memory_mib = 1 << 21;
    node.gpus = 8;
    node.mode = place::GpuMode::kMig;
    node.hardware = hw::Catalog::Builtin().Find("A100-80GB");
    nodes.push_back(node);
  }
  absl::StatusOr<place::Cluster> cluster = place::Cluster::Create(std::move(nodes));
  absl::StatusOr<std::unique_ptr<store::Database>> db = Open(o, "service.db");
  if (!cluster.ok() || !db.ok()) return cluster.ok() ? db.status() : cluster.status();
  alloc::ServiceOptions service_options;
  service_options.policy = o.policy;
  return alloc::Service::Open(*std::move(db), *std::move(cluster), service_options);
}

// Four tenants that may each hold every client's slice, with a user each: their tokens.
absl::StatusOr<std::vector<std::string>> MakeTenants(alloc::Service& service, const Options& o) {
  const alloc::Caller admin{"bench", "", alloc::Role::kAdmin, ""};
  std::vector<std::string> tokens;
  for (int t = 0; t < 4; ++t) {
    alloc::TenantSpec tenant;
    tenant.name = "team-" + std::to_string(t);
    tenant.max_slices["small"] = o.clients;
    if (absl::Status s = service.PutTenant(admin, tenant); !s.ok()) return s;
    absl::StatusOr<std::string> token =
        service.CreateUser(admin, "user-" + std::to_string(t), tenant.name, alloc::Role::kTenant);
    if (!token.ok()) return token.status();
    tokens.push_back(*token);
  }
  return tokens;
}

// With --tls: the server's context on a self-signed certificate made in --dir, and the clients'
// that verifies it.
struct Tls {
  std::unique_ptr<api::TlsServerContext> server;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> client{nullptr, SSL_CTX_free};
};

// False once the error is printed.
bool SetUpTls(const Options& o, Tls* tls) {
  const std::string cert = (fs::path(o.dir) / "load-bench.crt").string();
  const std::string key = (fs::path(o.dir) / "load-bench.key").string();
  absl::Status made = api::MakeSelfSignedCertificate(cert, key, {"127.0.0.1"});
  absl::StatusOr<std::unique_ptr<api::TlsServerContext>> loaded =
      made.ok() ? api::TlsServerContext::Load(cert, key)
                : absl::StatusOr<std::unique_ptr<api::TlsServerContext>>(made);
  tls->client.reset(SSL_CTX_new(TLS_client_method()));
  if (!loaded.ok() || tls->client == nullptr ||
      SSL_CTX_load_verify_locations(tls->client.get(), cert.c_str(), nullptr) != 1) {
    std::cerr << "load_bench: TLS: "
              << (loaded.ok() ? "client context" : loaded.status().ToString()) << "\n";
    return false;
  }
  SSL_CTX_set_verify(tls->client.get(), SSL_VERIFY_PEER, nullptr);
  tls->server = *std::move(loaded);
  return true;
}

// What the clients did.
struct Load {
  std::int64_t ops = 0;
  int errors = 0;
  double elapsed_s = 0;
  std::vector<double> latencies_ms;  // every acquire's, sorted
};

// o.clients clients acquiring and releasing for o.seconds on the server at `port`.
Load DriveClients(const Options& o, int port, const std::vector<std::string>& tokens,
                  SSL_CTX* client_tls) {
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> ops{0};
  std::atomic<int> errors{0};
  std::vector<std::vector<double>> latencies(static_cast<size_t>(o.clients));
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < o.clients; ++c) {
    threads.emplace_back([&, c] {
      Client client(port, "Bearer " + tokens[static_cast<size_t>(c) % tokens.size()], client_tls);
      const std::string body = R"({"class":"small","purpose":"load benchmark","wait":false})";
      std::string response;
      while (!stop) {
        const auto t0 = Clock::now();
        const int acquired = client.Request("POST", "/v1/leases", body, response);
        const auto t1 = Clock::now();
        if (acquired != 201) {
          ++errors;
          continue;
        }
        latencies[static_cast<size_t>(c)].push_back(
            std::chrono::duration<double, std::milli>(t1 - t0).count());
        const auto lease = nlohmann::json::parse(response)["lease"]["id"].get<std::int64_t>();
        if (client.Request("DELETE", "/v1/leases/" + std::to_string(lease), "", response) != 200) {
          ++errors;
        }
        ops += 2;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  stop = true;
  for (std::thread& t : threads) t.join();
  Load load;
  load.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  load.ops = ops.load();
  load.errors = errors.load();
  for (const auto& l : latencies) {
    load.latencies_ms.insert(load.latencies_ms.end(), l.begin(), l.end());
  }
  std::sort(load.latencies_ms.begin(), load.latencies_ms.end());
  return load;
}

void Report(const Options& o, const Load& load, double raw) {
  const std::vector<double>& all = load.latencies_ms;
  auto percentile = [&](double p) {
    return all.empty() ? 0.0
                       : all[std::min(all.size() - 1,
                                      static_cast<size_t>(p * static_cast<double>(all.size())))];
  };
  const double ops_per_s = static_cast<double>(load.ops) / load.elapsed_s;
  std::printf(
      "acquire+release over HTTP: %lld calls in %.1f s by %d clients, %d errors; ratio to "
      "the raw durable transaction rate %.2f\n",
      static_cast<long long>(load.ops), load.elapsed_s, o.clients, load.errors, ops_per_s / raw);
  std::printf(
      "load %s clients=%d ops_per_s=%.0f p50_ms=%.2f p99_ms=%.2f raw_txn_per_s=%.0f "
      "transport=%s\n",
      o.store.c_str(), o.clients, ops_per_s, percentile(0.50), percentile(0.99), raw,
      o.tls ? "tls" : "plain");
}

int Run(const Options& o) {
  absl::StatusOr<double> raw = RawRate(o);
  if (!raw.ok()) {
    std::cerr << "load_bench: raw transactions: " << raw.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<alloc::Service>> service = OpenService(o);
  if (!service.ok()) {
    std::cerr << "load_bench: " << service.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::vector<std::string>> tokens = MakeTenants(**service, o);
  if (!tokens.ok()) {
    std::cerr << "load_bench: " << tokens.status() << "\n";
    return 1;
  }
  api::ServerOptions server_options;
  server_options.port = 0;
  Tls tls;
  if (o.tls) {
    if (!SetUpTls(o, &tls)) return 1;
    server_options.tls = tls.server->get();
  }
  api::ApiServer server(**service, server_options);
  if (absl::Status s = server.Start(); !s.ok()) {
    std::cerr << "load_bench: " << s << "\n";
    return 1;
  }
  const Load load = DriveClients(o, server.port(), *tokens, tls.client.get());
  server.Stop();
  Report(o, load, *raw);
  return load.errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--store") {
      o.store = value();
    } else if (arg == "--url") {
      o.url = value();
    } else if (arg == "--clients") {
      o.clients = std::atoi(value().c_str());
    } else if (arg == "--seconds") {
      o.seconds = std::atof(value().c_str());
    } else if (arg == "--policy") {
      o.policy = value();
    } else if (arg == "--dir") {
      o.dir = value();
    } else if (arg == "--tls") {
      o.tls = true;
    } else {
      return Usage("unknown argument " + arg);
    }
  }
  if (o.store != "sqlite" && o.store != "postgres") return Usage("--store: sqlite or postgres");
  if (o.store == "postgres" && o.url.empty()) return Usage("--url is needed for postgres");
  if (o.clients < 1 || o.clients > 1024) return Usage("--clients: 1..1024");
  if (!(o.seconds > 0 && o.seconds <= 600)) return Usage("--seconds: (0, 600]");
  if (o.dir.empty()) o.dir = fs::temp_directory_path().string();
  return Run(o);
}
