// Monitoring benchmark: the cost of one GET /metrics scrape of a machine of 8 H100-80GB GPUs in
// MIG mode, each cut into 7 1g.10gb instances with one process in each (56 instances, 56
// processes), on the in-memory simulator (device::SimBackend), with a lease holding each
// instance:
//   BM_Scrape    metrics::Collect + metrics::Families + metrics::Write: what serve and the agent
//                do per scrape (the target: under 5 ms);
//   BM_Collect   Collect alone (the device queries);
//   BM_Families  Families alone (building the families from the figures);
//   BM_Write     Write alone (the text, from families built once).
//
//   build/bench/scrape_bench [--benchmark_filter=...] [--benchmark_min_time=...]
//
// The simulator answers from memory, so this measures gpuslice's own work; through NVML each
// query costs what the driver takes on top.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/metrics/collector.h"
#include "gpuslice/metrics/exposition.h"

namespace {

using namespace gpuslice;

constexpr int kGpus = 8;
constexpr int kInstancesPerGpu = 7;
constexpr int kGi1g10gb = 19;  // nvidia-smi GI profile id of 1g.10gb on H100-80GB
constexpr int kCi1Slice = 0;   // the full CI of a 1-slice GI

void Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "scrape_bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

struct Machine {
  std::unique_ptr<device::SimBackend> backend;
  std::vector<metrics::Holder> holders;
};

// The machine, built once: 8 GPUs × 7 instances, a process and a lease on each instance.
Machine& TheMachine() {
  static Machine* machine = [] {
    auto* m = new Machine;
    absl::StatusOr<device::sim::SimState> state =
        device::sim::NewMachine(hw::Catalog::Builtin(), "8xH100-80GB", 7);
    if (!state.ok()) Fail("NewMachine", state.status());
    for (device::sim::SimGpu& gpu : state->gpus) {
      gpu.mig_current = device::MigMode::kEnabled;
      gpu.mig_pending = device::MigMode::kEnabled;
    }
    m->backend = std::make_unique<device::SimBackend>(*std::move(state), hw::Catalog::Builtin());
    std::uint32_t pid = 1000;
    std::int64_t lease = 1;
    for (int gpu = 0; gpu < kGpus; ++gpu) {
      for (int i = 0; i < kInstancesPerGpu; ++i) {
        absl::StatusOr<device::GpuInstanceInfo> gi =
            m->backend->CreateGpuInstance(gpu, kGi1g10gb, i);
        if (!gi.ok()) Fail("CreateGpuInstance", gi.status());
        absl::StatusOr<device::ComputeInstanceInfo> ci =
            m->backend->CreateComputeInstance(gpu, gi->id, kCi1Slice, 0);
        if (!ci.ok()) Fail("CreateComputeInstance", ci.status());
        const std::uint32_t this_pid = pid++;
        absl::Status added =
            m->backend->Control("add process", true, [&](device::sim::SimMachine& sim) {
              return sim.AddProcess(gpu, {this_pid, "python", 2048 + 64 * i, gi->id, ci->id});
            });
        if (!added.ok()) Fail("AddProcess", added);
        m->holders.push_back({ci->uuid, lease, "team-" + std::to_string(lease % 4),
                              lease % 2 == 0 ? "small" : "notebook", lease % 3 == 0 ? 0 : 120, 0});
        ++lease;
      }
    }
    return m;
  }();
  return *machine;
}

void BM_Scrape(benchmark::State& state) {
  Machine& m = TheMachine();
  std::size_t bytes = 0;
  for (auto _ : state) {
    const metrics::MachineFigures figures = metrics::Collect(*m.backend, "node-7");
    absl::StatusOr<std::string> text = metrics::Write(metrics::Families(figures, m.holders));
    if (!text.ok()) Fail("Write", text.status());
    bytes = text->size();
    benchmark::DoNotOptimize(text->data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Scrape)->Unit(benchmark::kMicrosecond);

void BM_Collect(benchmark::State& state) {
  Machine& m = TheMachine();
  std::size_t instances = 0;
  for (auto _ : state) {
    const metrics::MachineFigures figures = metrics::Collect(*m.backend, "node-7");
    instances = 0;
    for (const metrics::GpuFigures& gpu : figures.gpus) instances += gpu.instances.size();
    benchmark::DoNotOptimize(instances);
  }
  state.counters["instances"] = static_cast<double>(instances);
}
BENCHMARK(BM_Collect)->Unit(benchmark::kMicrosecond);

void BM_Families(benchmark::State& state) {
  Machine& m = TheMachine();
  const metrics::MachineFigures figures = metrics::Collect(*m.backend, "node-7");
  for (auto _ : state) {
    std::vector<metrics::Family> families = metrics::Families(figures, m.holders);
    benchmark::DoNotOptimize(families.data());
  }
}
BENCHMARK(BM_Families)->Unit(benchmark::kMicrosecond);

void BM_Write(benchmark::State& state) {
  Machine& m = TheMachine();
  const std::vector<metrics::Family> families =
      metrics::Families(metrics::Collect(*m.backend, "node-7"), m.holders);
  std::size_t samples = 0;
  for (const metrics::Family& family : families) samples += family.samples.size();
  for (auto _ : state) {
    absl::StatusOr<std::string> text = metrics::Write(families);
    if (!text.ok()) Fail("Write", text.status());
    benchmark::DoNotOptimize(text->data());
  }
  state.counters["samples"] = static_cast<double>(samples);
}
BENCHMARK(BM_Write)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
