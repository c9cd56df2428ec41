// Slow clients against the API (issue 22's target: 1,000 slow connections from one source leave
// the API answering other clients within 100 ms). An in-process `serve` (alloc::Service on SQLite
// + api::ApiServer with serve's defaults) on loopback; N connections from 127.0.0.2 each send
// part of a request head and then one more byte every second (a slowloris; over TLS they stall
// their handshakes instead); meanwhile a client
// on 127.0.0.1 makes fresh-connection GET /v1/health and keep-alive GET /v1/leases calls, one at
// a time, and their latencies are measured.
//
//   slow_clients_bench [--slow N] [--seconds S] [--tls]
//
// Ends with one line:
//   slow_clients slow=<n> held=<n> refused=<n> calls=<n> p50_ms=<x> p99_ms=<y> max_ms=<z>
//                transport=<plain|tls>
// held: slow connections the server kept open (the per-source limit refuses the rest).
// Exit status: 0 done, 1 a call failed or took over a second, 2 bad usage.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpuslice/alloc/service.h"
#include "gpuslice/api/server.h"
#include "gpuslice/api/tls.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/store/database.h"

namespace {

using namespace gpuslice;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

int Connect(int port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int Usage(const std::string& message) {
  std::cerr << "slow_clients_bench: " << message
            << "\nusage: slow_clients_bench [--slow N] [--seconds S] [--tls]\n";
  return 2;
}

struct Settings {
  int slow = 1000;
  double seconds = 5;
  bool tls = false;
};

// nullopt once the usage is printed.
std::optional<Settings> ParseArgs(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--slow" && i + 1 < argc) {
      settings.slow = std::atoi(argv[++i]);
    } else if (arg == "--seconds" && i + 1 < argc) {
      settings.seconds = std::atof(argv[++i]);
    } else if (arg == "--tls") {
      settings.tls = true;
    } else {
      Usage("unknown argument " + arg);
      return std::nullopt;
    }
  }
  if (settings.slow < 0 || settings.slow > 20000 ||
      !(settings.seconds > 0 && settings.seconds <= 600)) {
    Usage("bad value");
    return std::nullopt;
  }
  return settings;
}

// What the server is made of: the service on SQLite in `dir`, its admin's token, and with --tls
// a self-signed certificate.
struct Setup {
  std::unique_ptr<alloc::Service> service;
  std::string admin_token;
  std::string cert;
  std::unique_ptr<api::TlsServerContext> context;
  api::ServerOptions options;
};

// "" when set up, else what failed.
std::string SetUp(const Settings& settings, const fs::path& dir, Setup* setup) {
  place::NodeSpec node;
  node.name = "bench/A100-80GB-mig";
  node.model = "A100-80GB";
  node.cpu_milli = 128'000;
  node.memory_mib = 1 << 20;
  node.gpus = 8;
  node.mode = place::GpuMode::kMig;
  node.hardware = hw::Catalog::Builtin().Find("A100-80GB");
  absl::StatusOr<place::Cluster> cluster = place::Cluster::Create({node});
  absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenSqlite((dir / "s.db").string());
  if (!cluster.ok() || !db.ok()) return "setup failed";
  absl::StatusOr<std::unique_ptr<alloc::Service>> service =
      alloc::Service::Open(*std::move(db), *std::move(cluster), {});
  if (!service.ok()) return std::string(service.status().message());
  setup->service = *std::move(service);
  absl::StatusOr<std::optional<std::string>> admin = setup->service->BootstrapAdmin("admin");
  if (!admin.ok() || !admin->has_value()) return "no admin";
  setup->admin_token = **admin;
  setup->options.port = 0;
  setup->cert = (dir / "c.crt").string();
  if (settings.tls) {
    if (!api::MakeSelfSignedCertificate(setup->cert, (dir / "c.key").string(), {"127.0.0.1"})
             .ok()) {
      return "no certificate";
    }
    absl::StatusOr<std::unique_ptr<api::TlsServerContext>> loaded =
        api::TlsServerContext::Load(setup->cert, (dir / "c.key").string());
    if (!loaded.ok()) return "cannot load the certificate";
    setup->context = *std::move(loaded);
    setup->options.tls = setup->context->get();
  }
  return "";
}

// The slow connections, and how many of them the server kept.
struct SlowClients {
  std::vector<int> fds;
  int held = 0;
};

// `count` slow connections from 127.0.0.2: part of a head now (nothing over TLS).
SlowClients OpenSlowClients(int port, int count, bool tls) {
  SlowClients slow;
  for (int i = 0; i < count; ++i) {
    const int fd = Connect(port, "127.0.0.2");
    if (fd < 0) break;
    // Over TLS a slow client stalls its handshake (sends nothing): any plain byte would end it.
    if (!tls) ::send(fd, "GET /v1/health HTTP/1.1\r\nX-A: ", 30, MSG_NOSIGNAL | MSG_DONTWAIT);
    slow.fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Which ones the server kept: a refused one has an answer (429) or is closed.
  for (int fd : slow.fds) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 0) ++slow.held;
  }
  return slow;
}

// The other client's calls: their latencies and how many failed or took over a second.
struct Calls {
  std::vector<double> ms;  // sorted once measured
  int failures = 0;
};

// Fresh-connection GET /v1/health and keep-alive GET /v1/leases in turn, for `seconds`.
Calls MeasureCalls(const std::string& base, const Setup& setup, bool tls, double seconds) {
  httplib::Client keep(base);
  if (tls) {
    keep.enable_server_certificate_verification(true);
    keep.set_ca_cert_path(setup.cert);
  }
  const httplib::Headers auth = {{"Authorization", "Bearer " + setup.admin_token}};
  Calls calls;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  for (int call = 0; Clock::now() < end; ++call) {
    const auto t0 = Clock::now();
    bool ok = false;
    if (call % 2 == 0) {
      httplib::Client fresh(base);  // a new connection each time: accept + (TLS) + request
      if (tls) {
        fresh.enable_server_certificate_verification(true);
        fresh.set_ca_cert_path(setup.cert);
      }
      httplib::Result r = fresh.Get("/v1/health");
      ok = r && r->status == 200;
    } else {
      httplib::Result r = keep.Get("/v1/leases", auth);
      ok = r && r->status == 200;
    }
    const double took = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    calls.ms.push_back(took);
    if (!ok || took > 1000) ++calls.failures;
  }
  return calls;
}

void Report(const Settings& settings, const SlowClients& slow, const Calls& calls) {
  const std::vector<double>& ms = calls.ms;
  const auto pct = [&](double p) {
    return ms.empty() ? 0.0
                      : ms[std::min(ms.size() - 1,
                                    static_cast<std::size_t>(p * static_cast<double>(ms.size())))];
  };
  std::printf(
      "slow_clients slow=%d held=%d refused=%d calls=%zu p50_ms=%.2f p99_ms=%.2f max_ms=%.2f "
      "transport=%s\n",
      settings.slow, slow.held, static_cast<int>(slow.fds.size()) - slow.held, ms.size(), pct(0.5),
      pct(0.99), ms.empty() ? 0.0 : ms.back(), settings.tls ? "tls" : "plain");
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Settings> settings = ParseArgs(argc, argv);
  if (!settings) return 2;
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);

  const fs::path dir = fs::temp_directory_path() / ("slow_clients_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Setup setup;
  if (const std::string error = SetUp(*settings, dir, &setup); !error.empty()) return Usage(error);
  api::ApiServer server(*setup.service, setup.options);
  if (!server.Start().ok()) return Usage("cannot listen");

  // The slow connections: part of a head now, a byte a second after.
  const SlowClients slow = OpenSlowClients(server.port(), settings->slow, settings->tls);
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int fd : slow.fds) {
        if (!settings->tls) ::send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      for (int i = 0; i < 10 && !stop; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const std::string base =
      (settings->tls ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(server.port());
  Calls calls = MeasureCalls(base, setup, settings->tls, settings->seconds);
  stop = true;
  trickle.join();
  for (int fd : slow.fds) ::close(fd);
  server.Stop();
  fs::remove_all(dir);
  std::sort(calls.ms.begin(), calls.ms.end());
  Report(*settings, slow, calls);
  return calls.failures == 0 ? 0 : 1;
}
