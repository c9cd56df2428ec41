// gpuslice/server/serve_setup.h
//
// What `gpuslice serve` settles before it answers anyone: which GPUs it hands out, and the TLS
// pair it listens with.
//
// The GPUs: this machine's through NVML when a driver answers with GPUs; a simulated fleet only
// where the machine shows no sign of NVIDIA hardware or driver (device::NvidiaTraces, no
// loadable library), or when one is asked for. On a GPU host whose driver fails, serve refuses
// (FailedPrecondition saying why) instead of handing out fake slices. The simulated fleet is kept
// in a state file (`<state_dir>/gpuslice-sim.json`), so a restart, even after kill -9, finds the
// MIG instances its leases hold with their UUIDs, as a real GPU keeps them; a file of another
// fleet (other models) is replaced, and said so on stderr. Its GPUs with MIG are in MIG mode.
//
// TLS: the operator's pair, or the self-signed pair of an earlier start in `dir`, or a new one
// made there (names localhost, this host, 127.0.0.1, ::1); none with `insecure`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/api/tls.h"
#include "gpuslice/device/backend.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::server {

struct Fleet {
  std::shared_ptr<device::Backend> backend;
  std::vector<device::GpuInfo> gpus;  // as the backend lists them
  bool simulated = false;
  std::string source;  // for the banner: "local GPUs through NVML (...)" or "a SIMULATED fleet..."
};

// `sim`: what to simulate on purpose, as every command's --sim names it
// (gpuslice/device/open_machine.h): a fleet spec, kept as above, or the path of an existing
// state file made by `gpuslice sim create`, used as it is and saved to ("" to choose as above;
// the simulated default is 4xH100-80GB,4xA100-80GB). InvalidArgument for a bad spec or an
// unreadable state file; FailedPrecondition for the refusal; other errors from the state file or
// the backend.
absl::StatusOr<Fleet> OpenFleet(const hw::Catalog& catalog, const std::string& sim,
                                const std::string& state_dir);

struct TlsChoice {
  bool insecure = false;
  std::string cert;  // with key: the operator's pair
  std::string key;
  std::string dir;        // where the self-signed pair is kept
  std::string client_ca;  // mutual TLS for agents; empty: none
};

struct ServerTls {
  std::unique_ptr<api::TlsServerContext> context;  // null with `insecure`
  std::string cert_file;                           // absolute, for the banner
  std::string how;  // "the given certificate", "a NEW self-signed certificate", ...
};

// InvalidArgument when only one of cert and key is given; the loader's errors otherwise.
absl::StatusOr<ServerTls> OpenServerTls(const TlsChoice& choice);

}  // namespace gpuslice::server
