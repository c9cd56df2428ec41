#include "gpuslice/server/serve_setup.h"

#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/open_machine.h"
#include "gpuslice/device/presence.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/device/sim_store.h"
#include "gpuslice/util/this_machine.h"

namespace gpuslice::server {
namespace {

constexpr char kDefaultSimulatedFleet[] = "4xH100-80GB,4xA100-80GB";

// The simulated fleet kept in DIR/gpuslice-sim.json: the file's when it holds the same models,
// else `fresh`, written there.
absl::StatusOr<std::shared_ptr<device::Backend>> KeptSimulatedFleet(
    const std::string& state_dir, const device::sim::SimState& fresh, const hw::Catalog& catalog) {
  const std::string file =
      (state_dir.empty() ? std::string(".") : state_dir) + "/gpuslice-sim.json";
  absl::StatusOr<std::unique_ptr<device::SimBackend>> kept =
      device::SimBackend::OpenFile(file, catalog);
  if (kept.ok()) {
    absl::StatusOr<std::vector<device::GpuInfo>> gpus = (*kept)->ListGpus();
    bool same = gpus.ok() && gpus->size() == fresh.gpus.size();
    for (std::size_t i = 0; same && i < fresh.gpus.size(); ++i) {
      same = (*gpus)[i].model != nullptr && (*gpus)[i].model->id == fresh.gpus[i].model_id;
    }
    if (same) return std::shared_ptr<device::Backend>(*std::move(kept));
    std::cerr << "gpuslice serve: " << file
              << " holds another simulated fleet; starting it afresh\n";
  }
  if (absl::Status st = device::sim::SimStore::Create(file, fresh, /*overwrite=*/true); !st.ok()) {
    return st;
  }
  absl::StatusOr<std::unique_ptr<device::SimBackend>> made =
      device::SimBackend::OpenFile(file, catalog);
  if (!made.ok()) return made.status();
  return std::shared_ptr<device::Backend>(*std::move(made));
}

// This machine's GPUs through NVML: a fleet when the driver lists GPUs; nullopt where the
// machine shows no sign of NVIDIA hardware or driver; the refusal otherwise.
absl::StatusOr<std::optional<Fleet>> LocalGpus(const hw::Catalog& catalog) {
  absl::StatusOr<std::vector<device::GpuInfo>> listed;
  absl::StatusOr<std::unique_ptr<device::NvmlBackend>> nvml = device::NvmlBackend::Load(catalog);
  if (nvml.ok()) listed = (*nvml)->ListGpus();
  const bool no_library = !nvml.ok() && !device::NvmlBackend::LibraryLoadable();
  const std::vector<std::string> traces = device::NvidiaTraces();
  if (nvml.ok() && listed.ok() && !listed->empty()) {
    Fleet fleet;
    fleet.gpus = *listed;
    fleet.source = absl::StrCat("local GPUs through NVML (", (*nvml)->Describe(), ")");
    fleet.backend = *std::move(nvml);
    return fleet;
  }
  if (no_library && traces.empty()) return std::nullopt;
  const std::string why = !nvml.ok()     ? std::string(nvml.status().message())
                          : !listed.ok() ? std::string(listed.status().message())
                                         : "NVML lists no GPU";
  return absl::FailedPreconditionError(absl::StrCat(
      "this machine has NVIDIA ", no_library ? "devices" : "driver library",
      traces.empty() ? "" : absl::StrCat(" (", absl::StrJoin(traces, "; "), ")"),
      " but its GPUs cannot be used: ", why,
      ". Refusing to hand out a simulated fleet on a GPU host; fix the driver (see `gpuslice "
      "doctor`), or pass --sim SPEC to serve a simulated fleet on purpose"));
}

// The simulated machine in a state file made by `gpuslice sim create`, saved to it as it changes.
absl::StatusOr<Fleet> StateFileFleet(const hw::Catalog& catalog, const std::string& file) {
  absl::StatusOr<std::unique_ptr<device::SimBackend>> opened =
      device::SimBackend::OpenFile(file, catalog);
  if (!opened.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--sim ", file, ": ", opened.status().message()));
  Fleet fleet;
  fleet.backend = std::shared_ptr<device::Backend>(*std::move(opened));
  absl::StatusOr<std::vector<device::GpuInfo>> listed = fleet.backend->ListGpus();
  if (!listed.ok()) return absl::InternalError(listed.status().message());
  fleet.gpus = *std::move(listed);
  fleet.simulated = true;
  fleet.source = absl::StrCat("a SIMULATED machine (state file ", file, ")");
  return fleet;
}

}  // namespace

absl::StatusOr<Fleet> OpenFleet(const hw::Catalog& catalog, const std::string& sim,
                                const std::string& state_dir) {
  if (sim.empty()) {
    absl::StatusOr<std::optional<Fleet>> local = LocalGpus(catalog);
    if (!local.ok()) return local.status();
    if (local->has_value()) return **std::move(local);
  }
  if (device::KindOf(sim) == device::MachineKind::kStateFile) return StateFileFleet(catalog, sim);
  const std::string spec = sim.empty() ? kDefaultSimulatedFleet : sim;
  // Seeded by the host name, so that simulated machines have distinct UUIDs. The simulated GPUs
  // that have MIG are in MIG mode, so slices become real instances.
  absl::StatusOr<device::sim::SimState> state =
      device::NewMigMachine(catalog, spec, std::hash<std::string>{}(util::Hostname()) | 1);
  if (!state.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sim ", spec, ": no such state file, and not a fleet spec like 4xH100-80GB either: ",
        state.status().message()));
  }
  absl::StatusOr<std::shared_ptr<device::Backend>> kept =
      KeptSimulatedFleet(state_dir, *state, catalog);
  if (!kept.ok()) return absl::InternalError(kept.status().message());
  Fleet fleet;
  fleet.backend = *std::move(kept);
  absl::StatusOr<std::vector<device::GpuInfo>> listed = fleet.backend->ListGpus();
  if (!listed.ok()) return absl::InternalError(listed.status().message());
  fleet.gpus = *std::move(listed);
  fleet.simulated = true;
  fleet.source =
      absl::StrCat("a SIMULATED fleet (", spec, ")", sim.empty() ? ": no NVIDIA driver found" : "");
  return fleet;
}

absl::StatusOr<ServerTls> OpenServerTls(const TlsChoice& choice) {
  ServerTls tls;
  if (choice.insecure) return tls;
  if (choice.cert.empty() != choice.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  std::string cert = choice.cert;
  std::string key = choice.key;
  tls.how = "the given certificate";
  if (cert.empty()) {
    const std::string dir = choice.dir.empty() ? "." : choice.dir;
    cert = dir + "/gpuslice-tls.crt";
    key = dir + "/gpuslice-tls.key";
    tls.how = "the self-signed certificate of an earlier start";
    if (!std::filesystem::exists(cert) || !std::filesystem::exists(key)) {
      if (absl::Status st = api::MakeSelfSignedCertificate(
              cert, key, {"localhost", util::Hostname(), "127.0.0.1", "::1"});
          !st.ok()) {
        return st;
      }
      tls.how = "a NEW self-signed certificate";
    }
  }
  tls.cert_file = std::filesystem::absolute(cert).lexically_normal().string();
  absl::StatusOr<std::unique_ptr<api::TlsServerContext>> context =
      api::TlsServerContext::Load(cert, key, choice.client_ca);
  if (!context.ok()) return context.status();
  tls.context = *std::move(context);
  return tls;
}

}  // namespace gpuslice::server
