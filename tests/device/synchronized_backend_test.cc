// SynchronizedBackend: many threads share one simulated machine through it (as serve's binder,
// layout rounds and metrics do) and every call is serialised: all creations and destructions
// succeed, the state ends empty, and ASan sees no race on the simulator's memory. Lock() holds
// the backend for a sequence: another thread's call waits until it is released.
#include "gpuslice/device/synchronized_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::device {
namespace {

constexpr int kGi1g10gb = 19;  // nvidia-smi profile id on H100-80GB
constexpr int kCi1Slice = 0;   // NVML compute-instance profile constant

std::shared_ptr<SynchronizedBackend> FourMigGpus() {
  absl::StatusOr<sim::SimState> state = sim::NewMachine(hw::Catalog::Builtin(), "4xH100-80GB", 5);
  EXPECT_TRUE(state.ok()) << state.status();
  for (sim::SimGpu& gpu : state->gpus) {
    gpu.mig_current = MigMode::kEnabled;
    gpu.mig_pending = MigMode::kEnabled;
  }
  return std::make_shared<SynchronizedBackend>(
      std::make_shared<SimBackend>(*std::move(state), hw::Catalog::Builtin()));
}

TEST(SynchronizedBackendTest, ThreadsSharingTheBackendAllSucceed) {
  std::shared_ptr<SynchronizedBackend> backend = FourMigGpus();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int gpu = 0; gpu < 4; ++gpu) {
    threads.emplace_back([&, gpu] {
      for (int round = 0; round < 100; ++round) {
        absl::StatusOr<GpuInstanceInfo> gi = backend->CreateGpuInstance(gpu, kGi1g10gb, round % 7);
        if (!gi.ok()) {
          ++failures;
          continue;
        }
        absl::StatusOr<ComputeInstanceInfo> ci =
            backend->CreateComputeInstance(gpu, gi->id, kCi1Slice, 0);
        if (!ci.ok() || !backend->ListProcesses(gpu).ok() ||
            !backend->GetMemory(gpu, gi->id, ci->id).ok() ||
            !backend->DestroyComputeInstance(gpu, gi->id, ci->id).ok() ||
            !backend->DestroyGpuInstance(gpu, gi->id).ok()) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int gpu = 0; gpu < 4; ++gpu) {
    absl::StatusOr<std::vector<GpuInstanceInfo>> gis = backend->ListGpuInstances(gpu);
    ASSERT_TRUE(gis.ok()) << gis.status();
    EXPECT_TRUE(gis->empty()) << "GPU " << gpu;
  }
  EXPECT_EQ(backend->Describe(), "simulator (in memory)");
}

TEST(SynchronizedBackendTest, LockHoldsOffOtherThreadsAndIsReentrant) {
  std::shared_ptr<SynchronizedBackend> backend = FourMigGpus();
  std::atomic<bool> listed{false};
  std::thread other;
  {
    std::unique_lock<std::recursive_mutex> hold = backend->Lock();
    ASSERT_TRUE(backend->ListGpus().ok());  // the holder's own calls go through
    other = std::thread([&] {
      (void)backend->ListGpus();
      listed = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(listed.load()) << "a call went through while another thread held the backend";
  }
  other.join();
  EXPECT_TRUE(listed.load());
}

}  // namespace
}  // namespace gpuslice::device
