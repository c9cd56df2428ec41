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

}  // namespace

int main(int argc, char** argv) {
  int slow = 1000;
  double seconds = 5;
  bool tls = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--slow" && i + 1 < argc) {
      slow = std::atoi(argv[++i]);
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--tls") {
      tls = true;
    } else {
      return Usage("unknown argument " + arg);
    }
  }
  if (slow < 0 || slow > 20000 || !(seconds > 0 && seconds <= 600)) return Usage("bad value");
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);

  const fs::path dir = fs::temp_directory_path() / ("slow_clients_" + std::to_string(::getpid()));
  fs::create_directories(dir);
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
  if (!cluster.ok() || !db.ok()) return Usage("setup failed");
  absl::StatusOr<std::unique_ptr<alloc::Service>> service =
      alloc::Service::Open(*std::move(db), *std::move(cluster), {});
  if (!service.ok()) return Usage(std::string(service.status().message()));
  absl::StatusOr<std::optional<std::string>> admin = (*service)->BootstrapAdmin("admin");
  if (!admin.ok() || !admin->has_value()) return Usage("no admin");
  api::ServerOptions options;
  options.port = 0;
  std::unique_ptr<api::TlsServerContext> context;
  const std::string cert = (dir / "c.crt").string();
  if (tls) {
    if (!api::MakeSelfSignedCertificate(cert, (dir / "c.key").string(), {"127.0.0.1"}).ok()) {
      return Usage("no certificate");
    }
    absl::StatusOr<std::unique_ptr<api::TlsServerContext>> loaded =
        api::TlsServerContext::Load(cert, (dir / "c.key").string());
    if (!loaded.ok()) return Usage("cannot load the certificate");
    context = *std::move(loaded);
    options.tls = context->get();
  }
  api::ApiServer server(**service, options);
  if (!server.Start().ok()) return Usage("cannot listen");

  // The slow connections: part of a head now, a byte a second after.
  std::vector<int> slow_fds;
  for (int i = 0; i < slow; ++i) {
    const int fd = Connect(server.port(), "127.0.0.2");
    if (fd < 0) break;
    // Over TLS a slow client stalls its handshake (sends nothing): any plain byte would end it.
    if (!tls) ::send(fd, "GET /v1/health HTTP/1.1\r\nX-A: ", 30, MSG_NOSIGNAL | MSG_DONTWAIT);
    slow_fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Which ones the server kept: a refused one has an answer (429) or is closed.
  int held = 0;
  for (int fd : slow_fds) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 0) ++held;
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int fd : slow_fds) {
        if (!tls) ::send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      for (int i = 0; i < 10 && !stop; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  const std::string base =
      (tls ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(server.port());
  httplib::Client keep(base);
  if (tls) {
    keep.enable_server_certificate_verification(true);
    keep.set_ca_cert_path(cert);
  }
  const httplib::Headers auth = {{"Authorization", "Bearer " + **admin}};
  std::vector<double> ms;
  int failures = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  for (int call = 0; Clock::now() < end; ++call) {
    const auto t0 = Clock::now();
    bool ok = false;
    if (call % 2 == 0) {
      httplib::Client fresh(base);  // a new connection each time: accept + (TLS) + request
      if (tls) {
        fresh.enable_server_certificate_verification(true);
        fresh.set_ca_cert_path(cert);
      }
      httplib::Result r = fresh.Get("/v1/health");
      ok = r && r->status == 200;
    } else {
      httplib::Result r = keep.Get("/v1/leases", auth);
      ok = r && r->status == 200;
    }
    const double took = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ms.push_back(took);
    if (!ok || took > 1000) ++failures;
  }
  stop = true;
  trickle.join();
  for (int fd : slow_fds) ::close(fd);
  server.Stop();
  fs::remove_all(dir);
  std::sort(ms.begin(), ms.end());
  const auto pct = [&](double p) {
    return ms.empty() ? 0.0
                      : ms[std::min(ms.size() - 1,
                                    static_cast<std::size_t>(p * static_cast<double>(ms.size())))];
  };
  std::printf(
      "slow_clients slow=%d held=%d refused=%d calls=%zu p50_ms=%.2f p99_ms=%.2f max_ms=%.2f "
      "transport=%s\n",
      slow, held, static_cast<int>(slow_fds.size()) - held, ms.size(), pct(0.5), pct(0.99),
      ms.empty() ? 0.0 : ms.back(), tls ? "tls" : "plain");
  return failures == 0 ? 0 : 1;
}
