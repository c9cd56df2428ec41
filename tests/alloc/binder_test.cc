// The in-process agent (gpuslice/alloc/binder.h) over a simulated machine: MIG claims become a GPU
// instance at the claimed placement with one compute instance spanning it, named by its MIG UUID;
// binding again finds what is there; Unbind destroys the instances unless processes run on them;
// a failed multi-claim bind leaves nothing behind; whole GPUs and shares are named by GPU UUID.
// Then the allocation service with a binder: grants, releases, the queue, reopening on a fresh
// machine, busy instances at release, and no two active leases sharing a device.
#include "gpuslice/alloc/binder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/alloc_test_util.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/store/database.h"

namespace gpuslice::alloc {
namespace {

using device::SimBackend;
using device::sim::SimCi;
using device::sim::SimGi;
using device::sim::SimGpu;
using device::sim::SimMachine;
using device::sim::SimState;
using testing::FakeClock;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::ScratchDir;
using ::testing::SizeIs;
using ::testing::StartsWith;
using Outcome = AcquireResult::Outcome;

constexpr char kHost[] = "sim-host";
constexpr std::int64_t kCpuMilli = 64000;
constexpr std::int64_t kMemoryMib = 262144;

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

// A simulated machine of `fleet`; the MIG-capable GPUs are put in MIG mode.
SimState MigMachine(const std::string& fleet, std::uint64_t seed = 1) {
  absl::StatusOr<SimState> state = device::sim::NewMachine(Catalog(), fleet, seed);
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return SimState{};
  for (SimGpu& gpu : state->gpus) {
    if (gpu.mig_capable) {
      gpu.mig_current = device::MigMode::kEnabled;
      gpu.mig_pending = device::MigMode::kEnabled;
    }
  }
  return *std::move(state);
}

// A simulated machine with its binder and inventory, as `gpuslice serve --sim-fleet` builds them.
struct Machine {
  std::shared_ptr<SimBackend> backend;
  std::vector<device::GpuInfo> gpus;
  std::shared_ptr<DeviceBinder> binder;
  std::optional<place::Cluster> inventory;

  explicit Machine(const std::string& fleet, std::uint64_t seed = 1) {
    backend = std::make_shared<SimBackend>(MigMachine(fleet, seed), Catalog());
    absl::StatusOr<std::vector<device::GpuInfo>> listed = backend->ListGpus();
    EXPECT_TRUE(listed.ok()) << listed.status();
    if (listed.ok()) gpus = *listed;
    binder = MakeBackendBinder(backend, kHost, gpus, /*mig_if_capable=*/false);
    absl::StatusOr<place::Cluster> cluster =
        InventoryFromGpus(kHost, gpus, kCpuMilli, kMemoryMib, /*mig_if_capable=*/false);
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    if (cluster.ok()) inventory = *std::move(cluster);
  }

  const place::Cluster& cluster() const { return *inventory; }

  // The placement node named "<host>/<suffix>", e.g. "A100-80GB-mig"; -1 when there is none.
  int Node(const std::string& suffix) const {
    const std::string name = absl::StrCat(kHost, "/", suffix);
    for (int n = 0; n < inventory->node_count(); ++n) {
      if (inventory->spec(n).name == name) return n;
    }
    ADD_FAILURE() << "no node " << name;
    return -1;
  }

  SimState State() {
    absl::StatusOr<SimState> state = backend->State();
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *state : SimState{};
  }

  // The GPU instances of GPU `gpu` (NVML index), as the simulator has them.
  std::vector<SimGi> Gis(int gpu) {
    SimState state = State();
    if (gpu < 0 || static_cast<size_t>(gpu) >= state.gpus.size()) return {};
    return state.gpus[static_cast<size_t>(gpu)].gis;
  }

  // Every MIG UUID of every compute instance on the machine, with where it is.
  std::map<std::string, std::string> CiUuids() {
    std::map<std::string, std::string> out;
    for (const SimGpu& gpu : State().gpus) {
      for (const SimGi& gi : gpu.gis) {
        for (const SimCi& ci : gi.cis) {
          out[ci.uuid] = absl::StrCat("GPU ", gpu.index, " GI ", gi.id, " start ", gi.start,
                                      " profile ", gi.profile_id, " CI ", ci.id);
        }
      }
    }
    return out;
  }

  int GiCount() {
    int count = 0;
    for (const SimGpu& gpu : State().gpus) count += static_cast<int>(gpu.gis.size());
    return count;
  }

  // Simulates a process on GI `gi`, CI `ci` of GPU `gpu`.
  void AddProcess(int gpu, std::uint32_t pid, int gi, int ci, const std::string& name = "python") {
    absl::Status status = backend->Control("add process", true, [&](SimMachine& machine) {
      return machine.AddProcess(gpu, {pid, name, 1024, gi, ci});
    });
    ASSERT_TRUE(status.ok()) << status;
  }
  void RemoveProcess(std::uint32_t pid) {
    absl::Status status = backend->Control(
        "remove process", true, [&](SimMachine& machine) { return machine.RemoveProcess(pid); });
    ASSERT_TRUE(status.ok()) << status;
  }

  // The nvidia-smi id of profile `name` on GPU `gpu`.
  int SmiId(int gpu, const std::string& name) const {
    const hw::GiProfile* profile = gpus[static_cast<size_t>(gpu)].model->mig->FindProfile(name);
    EXPECT_NE(profile, nullptr) << name;
    return profile == nullptr ? -1 : profile->smi_id;
  }
};

// A MIG claim of profile `name` at `start` on GPU `gpu` of MIG node `node`.
place::GpuClaim MigClaim(const place::Cluster& cluster, int node, int gpu, const std::string& name,
                         int start) {
  const geometry::Shape* shape = cluster.shape(node);
  EXPECT_NE(shape, nullptr);
  place::GpuClaim claim;
  claim.gpu = gpu;
  claim.milli = 0;
  if (shape != nullptr) {
    const hw::GiProfile* profile = shape->mig().FindProfile(name);
    EXPECT_NE(profile, nullptr) << name;
    if (profile != nullptr) claim.mig_profile = shape->mig().IndexOf(*profile);
  }
  claim.mig_start = start;
  return claim;
}

// ---------------------------------------------------------------------------------------------
// DeviceBinder over the simulator.

TEST(BinderTest, MigClaimCreatesOneInstanceAtItsPlacementNamedByMigUuid) {
  Machine m("2xA100-80GB");
  const int node = m.Node("A100-80GB-mig");
  ASSERT_GE(node, 0);
  absl::StatusOr<std::vector<BoundDevice>> bound =
      m.binder->Bind(m.cluster(), node, {MigClaim(m.cluster(), node, 1, "2g.20gb", 4)}, false);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_THAT(*bound, SizeIs(1));
  const BoundDevice& device = (*bound)[0];
  EXPECT_THAT(device.uuid, StartsWith("MIG-"));
  EXPECT_EQ(device.gpu_uuid, m.gpus[1].uuid);
  EXPECT_EQ(device.gpu_index, 1);
  EXPECT_EQ(device.vram_mib, 0);
  EXPECT_EQ(device.share_milli, 0);

  // Nothing on GPU 0; on GPU 1 exactly one GI: the claimed profile at the claimed start, with one
  // CI spanning it whose UUID is the one returned.
  EXPECT_THAT(m.Gis(0), IsEmpty());
  const std::vector<SimGi> gis = m.Gis(1);
  ASSERT_THAT(gis, SizeIs(1));
  EXPECT_EQ(gis[0].profile_id, m.SmiId(1, "2g.20gb"));
  EXPECT_EQ(gis[0].start, 4);
  EXPECT_EQ(gis[0].id, device.gi);
  ASSERT_THAT(gis[0].cis, SizeIs(1));
  EXPECT_EQ(gis[0].cis[0].id, device.ci);
  EXPECT_EQ(gis[0].cis[0].uuid, device.uuid);
  EXPECT_EQ(gis[0].cis[0].start, 0);
  EXPECT_EQ(gis[0].cis[0].size, 2);  // all compute slices of the 2g GI
}

// Wave 1 granted a whole GPU in MIG mode as its bare UUID, which CUDA cannot use while MIG is on
// and no instance exists. Now it is the instance that spans the GPU.
TEST(BinderTest, AWholeGpuInMigModeIsTheInstanceThatSpansIt) {
  Machine m("1xA100-80GB");
  const int node = m.Node("A100-80GB-mig");
  ASSERT_GE(node, 0);
  place::GpuClaim whole;
  whole.gpu = 0;
  whole.whole = true;
  whole.milli = place::kMilliPerGpu;
  absl::StatusOr<std::vector<BoundDevice>> bound =
      m.binder->Bind(m.cluster(), node, {whole}, false);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_THAT(*bound, SizeIs(1));
  EXPECT_THAT((*bound)[0].uuid, StartsWith("MIG-"));
  const std::vector<SimGi> gis = m.Gis(0);
  ASSERT_THAT(gis, SizeIs(1));
  EXPECT_EQ(gis[0].profile_id, m.SmiId(0, "7g.80gb"));
  EXPECT_EQ(gis[0].start, 0);
  ASSERT_TRUE(m.binder->Unbind(*bound).ok());
  EXPECT_THAT(m.Gis(0), IsEmpty());
}

TEST(BinderTest, BindingAgainFindsTheSameInstanceAndCreatesNothing) {
  Machine m("2xA100-80GB");
  const int node = m.Node("A100-80GB-mig");
  const std::vector<place::GpuClaim> claims = {MigClaim(m.cluster(), node, 0, "1g.10gb", 3)};
  absl::StatusOr<std::vector<BoundDevice>> first = m.binder->Bind(m.cluster(), node, claims, false);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::uint64_t uuids_made = m.State().uuid_counter;

  absl::StatusOr<std::vector<BoundDevice>> again = m.binder->Bind(m.cluster(), node, claims, true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(m.State().uuid_counter, uuids_made);  // no new instance got a UUID
  const std::vector<SimGi> gis = m.Gis(0);
  ASSERT_THAT(gis, SizeIs(1));
  EXPECT_THAT(gis[0].cis, SizeIs(1));
}

TEST(BinderTest, UnbindDestroysTheComputeAndGpuInstances) {
  Machine m("2xA100-80GB");
  const int node = m.Node("A100-80GB-mig");
  absl::StatusOr<std::vector<BoundDevice>> bound = m.binder->Bind(
      m.cluster(), node,
      {MigClaim(m.cluster(), node, 0, "3g.40gb", 4), MigClaim(m.cluster(), node, 1, "1g.10gb", 6)},
      false);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_THAT(*bound, SizeIs(2));
  EXPECT_NE((*bound)[0].uuid, (*bound)[1].uuid);
  EXPECT_EQ(m.GiCount(), 2);

  absl::Status unbound = m.binder->Unbind(*bound);
  ASSERT_TRUE(unbound.ok()) << unbound;
  EXPECT_EQ(m.GiCount(), 0);
  EXPECT_THAT(m.CiUuids(), IsEmpty());
}

TEST(BinderTest, UnbindLeavesABusyInstanceAndNamesTheProcess) {
  Machine m("2xA100-80GB");
  const int node = m.Node("A100-80GB-mig");
  absl::StatusOr<std::vector<BoundDevice>> bound =
      m.binder->Bind(m.cluster(), node, {MigClaim(m.cluster(), node, 0, "1g.10gb", 2)}, false);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const BoundDevice device = (*bound)[0];
  m.AddProcess(0, 4242, device.gi, device.ci, "trainer");

  absl::Status unbound = m.binder->Unbind(*bound);
  EXPECT_TRUE(absl::IsFailedPrecondition(unbound)) << unbound;
  EXPECT_THAT(unbound.message(), HasSubstr("4242"));
  EXPECT_THAT(unbound.message(), HasSubstr("trainer"));
  EXPECT_THAT(unbound.message(), HasSubstr(device.uuid));
  // Left as it was: the GI and its CI with the same UUID.
  const std::vector<SimGi> gis = m.Gis(0);
  ASSERT_THAT(gis, SizeIs(1));
  EXPECT_EQ(gis[0].id, device.gi);
  ASSERT_THAT(gis[0].cis, SizeIs(1));
  EXPECT_EQ(gis[0].cis[0].uuid, device.uuid);

  // Once the process is gone, Unbind succeeds.
  m.RemoveProcess(4242);
  absl::Status later = m.binder->Unbind(*bound);
  EXPECT_TRUE(later.ok()) << later;
  EXPECT_EQ(m.GiCount(), 0);
}

TEST(BinderTest, ANewLeaseIsRefusedWhereABusyInstanceWasLeft) {
  Machine m("2xA100-80GB");
  const int node = m.Node("A100-80GB-mig");
  const std::vector<place::GpuClaim> claims = {MigClaim(m.cluster(), node, 1, "1g.10gb", 5)};
  absl::StatusOr<std::vector<BoundDevice>> bound = m.binder->Bind(m.cluster(), node, claims, false);
  ASSERT_TRUE(bound.ok()) << bound.status();
  m.AddProcess(1, 777, (*bound)[0].gi, (*bound)[0].ci, "stray");
  ASSERT_TRUE(absl::IsFailedPrecondition(m.binder->Unbind(*bound)));

  absl::StatusOr<std::vector<BoundDevice>> next = m.binder->Bind(m.cluster(), node, claims, false);
  EXPECT_TRUE(absl::IsFailedPrecondition(next.status())) << next.status();
  EXPECT_THAT(next.status().message(), HasSubstr("777"));
  // The busy instance is untouched and nothing was added.
  const std::vector<SimGi> gis = m.Gis(1);
  ASSERT_THAT(gis, SizeIs(1));
  ASSERT_THAT(gis[0].cis, SizeIs(1));
  EXPECT_EQ(gis[0].cis[0].uuid, (*bound)[0].uuid);

  // The lease that holds it (bound again after a restart) still finds it.
  absl::StatusOr<std::vector<BoundDevice>> again = m.binder->Bind(m.cluster(), node, claims, true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *bound);

  // An idle instance left at the placement is reused by a new lease.
  m.RemoveProcess(777);
  absl::StatusOr<std::vector<BoundDevice>> reused =
      m.binder->Bind(m.cluster(), node, claims, false);
  ASSERT_TRUE(reused.ok()) << reused.status();
  EXPECT_EQ((*reused)[0].uuid, (*bound)[0].uuid);
  EXPECT_THAT(m.Gis(1), SizeIs(1));
}

TEST(BinderTest, AFailedSecondClaimLeavesNothingBehind) {
  Machine m("2xA100-80GB");
  const int node = m.Node("A100-80GB-mig");
  // GPU 1 has a 2g.20gb instance at 0 (someone else's), so a 1g.10gb at 1 cannot be made there.
  absl::StatusOr<device::GpuInstanceInfo> other =
      m.backend->CreateGpuInstance(1, m.SmiId(1, "2g.20gb"), 0);
  ASSERT_TRUE(other.ok()) << other.status();

  absl::StatusOr<std::vector<BoundDevice>> bound = m.binder->Bind(
      m.cluster(), node,
      {MigClaim(m.cluster(), node, 0, "3g.40gb", 0), MigClaim(m.cluster(), node, 1, "1g.10gb", 1)},
      false);
  EXPECT_FALSE(bound.ok());
  EXPECT_THAT(bound.status().message(), HasSubstr("1g.10gb"));
  // The first claim's instance was undone; the other profile's instance is untouched.
  EXPECT_THAT(m.Gis(0), IsEmpty());
  const std::vector<SimGi> gis = m.Gis(1);
  ASSERT_THAT(gis, SizeIs(1));
  EXPECT_EQ(gis[0].id, other->id);
  EXPECT_EQ(gis[0].profile_id, m.SmiId(1, "2g.20gb"));
  EXPECT_THAT(gis[0].cis, IsEmpty());

  // A claim on a GPU the node does not have fails the same way, after a good first claim.
  absl::StatusOr<std::vector<BoundDevice>> missing = m.binder->Bind(
      m.cluster(), node,
      {MigClaim(m.cluster(), node, 0, "1g.10gb", 0), MigClaim(m.cluster(), node, 5, "1g.10gb", 0)},
      false);
  EXPECT_TRUE(absl::IsOutOfRange(missing.status())) << missing.status();
  EXPECT_THAT(m.Gis(0), IsEmpty());
}

// A claim that reuses an idle GPU instance found at its placement but creates the compute
// instance in it owns only that CI: when a later claim fails, the CI goes and the GI stays.
TEST(BinderTest, AFailedSecondClaimAlsoUndoesAComputeInstanceMadeInAReusedGpuInstance) {
  Machine m("2xA100-80GB");
  const int node = m.Node("A100-80GB-mig");
  // An idle GI without a CI at the first claim's placement (left by a crash, say).
  absl::StatusOr<device::GpuInstanceInfo> idle =
      m.backend->CreateGpuInstance(0, m.SmiId(0, "1g.10gb"), 2);
  ASSERT_TRUE(idle.ok()) << idle.status();
  // The second claim's placement is taken by another profile.
  ASSERT_TRUE(m.backend->CreateGpuInstance(1, m.SmiId(1, "2g.20gb"), 0).ok());

  absl::StatusOr<std::vector<BoundDevice>> bound = m.binder->Bind(
      m.cluster(), node,
      {MigClaim(m.cluster(), node, 0, "1g.10gb", 2), MigClaim(m.cluster(), node, 1, "1g.10gb", 0)},
      false);
  EXPECT_FALSE(bound.ok());
  const std::vector<SimGi> gis = m.Gis(0);
  ASSERT_THAT(gis, SizeIs(1));
  EXPECT_EQ(gis[0].id, idle->id);
  EXPECT_THAT(gis[0].cis, IsEmpty()) << "the compute instance Bind made for the first claim "
                                        "was left behind after the second claim failed";
}

TEST(BinderTest, WholeAndSharedGpusAreNamedByGpuUuidWithTheShareLimits) {
  Machine m("1xA100-80GB,2xL4");
  const int mig = m.Node("A100-80GB-mig");
  const int whole = m.Node("L4");
  ASSERT_GE(mig, 0);
  ASSERT_GE(whole, 0);
  ASSERT_EQ(m.gpus.size(), 3u);

  place::GpuClaim full;
  full.gpu = 1;  // the second GPU of the L4 group: NVML index 2
  full.milli = 1000;
  full.whole = true;
  absl::StatusOr<std::vector<BoundDevice>> bound =
      m.binder->Bind(m.cluster(), whole, {full}, false);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_THAT(*bound, SizeIs(1));
  EXPECT_EQ((*bound)[0].uuid, m.gpus[2].uuid);
  EXPECT_THAT((*bound)[0].uuid, StartsWith("GPU-"));
  EXPECT_EQ((*bound)[0].gpu_uuid, m.gpus[2].uuid);
  EXPECT_EQ((*bound)[0].gpu_index, 2);
  EXPECT_EQ((*bound)[0].gi, -1);
  EXPECT_EQ((*bound)[0].ci, -1);
  EXPECT_EQ((*bound)[0].vram_mib, 0);
  EXPECT_EQ((*bound)[0].share_milli, 0);

  place::GpuClaim share;
  share.gpu = 0;  // NVML index 1
  share.milli = 250;
  share.vram_mib = 8192;
  absl::StatusOr<std::vector<BoundDevice>> shared =
      m.binder->Bind(m.cluster(), whole, {share}, false);
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_THAT(*shared, SizeIs(1));
  EXPECT_EQ((*shared)[0].uuid, m.gpus[1].uuid);
  EXPECT_EQ((*shared)[0].gpu_index, 1);
  EXPECT_EQ((*shared)[0].share_milli, 250);
  EXPECT_EQ((*shared)[0].vram_mib, 8192);

  // Neither touched the GPUs; unbinding them is a no-op.
  EXPECT_EQ(m.GiCount(), 0);
  EXPECT_TRUE(m.binder->Unbind(*bound).ok());
  EXPECT_TRUE(m.binder->Unbind(*shared).ok());

  // The environment a share's process gets carries its limits.
  Lease lease;
  lease.id = 12;
  lease.bound = *shared;
  const std::map<std::string, std::string> env = LeaseEnvironment(lease);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), m.gpus[1].uuid);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), m.gpus[1].uuid);
  EXPECT_EQ(env.at("GPUSLICE_LEASE"), "12");
  EXPECT_EQ(env.at("GPUSLICE_VRAM_LIMIT_MIB"), "8192");
  EXPECT_EQ(env.at("GPUSLICE_COMPUTE_SHARE_MILLI"), "250");
  EXPECT_EQ(env.at("GPUSLICE_SLICE"), "lease-12") << "one accounting for the lease's processes";
  lease.bound = *bound;
  EXPECT_FALSE(LeaseEnvironment(lease).contains("GPUSLICE_VRAM_LIMIT_MIB"));
  EXPECT_FALSE(LeaseEnvironment(lease).contains("GPUSLICE_SLICE"));
}

TEST(BinderTest, ANodeOfAnotherMachineIsNotFound) {
  Machine m("2xA100-80GB");
  absl::StatusOr<place::Cluster> other =
      InventoryFromGpus("elsewhere", m.gpus, kCpuMilli, kMemoryMib, /*mig_if_capable=*/false);
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<std::vector<BoundDevice>> bound =
      m.binder->Bind(*other, 0, {MigClaim(*other, 0, 0, "1g.10gb", 0)}, false);
  EXPECT_TRUE(absl::IsNotFound(bound.status())) << bound.status();
  EXPECT_EQ(m.GiCount(), 0);
}

// ---------------------------------------------------------------------------------------------
// The service with a binder.

class ServiceBinderTest : public ::testing::Test {
 protected:
  std::string DbPath() const { return dir_.path() + "/alloc.db"; }

  // Opens the service on the store with `machine`'s inventory and binder.
  std::unique_ptr<Service> OpenOn(Machine& machine) {
    absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenSqlite(DbPath());
    EXPECT_TRUE(db.ok()) << db.status();
    if (!db.ok()) return nullptr;
    ServiceOptions options;
    options.clock = clock_.Function();
    options.binder = machine.binder;
    absl::StatusOr<std::unique_ptr<Service>> service =
        Service::Open(*std::move(db), machine.cluster(), options);
    EXPECT_TRUE(service.ok()) << service.status();
    return service.ok() ? *std::move(service) : nullptr;
  }

  void Start(const std::string& fleet = "2xA100-80GB") {
    machine_ = std::make_unique<Machine>(fleet);
    service_ = OpenOn(*machine_);
    ASSERT_NE(service_, nullptr);
    absl::StatusOr<std::optional<std::string>> token = service_->BootstrapAdmin("root");
    ASSERT_TRUE(token.ok()) << token.status();
    ASSERT_TRUE(token->has_value());
    absl::StatusOr<Caller> admin = service_->Authenticate(**token);
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *admin;
  }

  Caller AddTenant(const TenantSpec& spec) {
    absl::Status put = service_->PutTenant(admin_, spec);
    EXPECT_TRUE(put.ok()) << put;
    absl::StatusOr<std::string> token =
        service_->CreateUser(admin_, spec.name + "-user", spec.name, Role::kTenant);
    EXPECT_TRUE(token.ok()) << token.status();
    if (!token.ok()) return Caller{};
    absl::StatusOr<Caller> caller = service_->Authenticate(*token);
    EXPECT_TRUE(caller.ok()) << caller.status();
    return caller.ok() ? *caller : Caller{};
  }
  Caller AddTenant(const std::string& name) {
    TenantSpec spec;
    spec.name = name;
    return AddTenant(spec);
  }

  static AcquireRequest Request(const std::string& class_name, const std::string& purpose,
                                bool wait = true) {
    AcquireRequest request;
    request.class_name = class_name;
    request.purpose = purpose;
    request.wait = wait;
    return request;
  }

  AcquireResult Acquire(const Caller& caller, const AcquireRequest& request) {
    absl::StatusOr<AcquireResult> result = service_->Acquire(caller, request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : AcquireResult{};
  }
  Lease Grant(const Caller& caller, const AcquireRequest& request) {
    AcquireResult result = Acquire(caller, request);
    EXPECT_EQ(result.outcome, Outcome::kGranted) << request.purpose << ": " << result.reason;
    return result.lease;
  }
  Lease LeaseOf(std::int64_t id) {
    absl::StatusOr<Lease> lease = service_->GetLease(admin_, id);
    EXPECT_TRUE(lease.ok()) << lease.status();
    return lease.ok() ? *lease : Lease{};
  }
  std::vector<Lease> Active() {
    absl::StatusOr<std::vector<Lease>> leases = service_->Leases(admin_);
    EXPECT_TRUE(leases.ok()) << leases.status();
    return leases.ok() ? *leases : std::vector<Lease>{};
  }
  std::vector<AuditEvent> Audit() {
    absl::StatusOr<std::vector<AuditEvent>> events = service_->Audit(admin_, AuditQuery{});
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? *events : std::vector<AuditEvent>{};
  }

  // Checks that each MIG device of `lease` is a real compute instance in the simulator, in a GI of
  // the lease's claimed profile at its claimed start, on the claimed GPU.
  void ExpectRealInstances(const Lease& lease) {
    ASSERT_EQ(lease.bound.size(), lease.claims.size()) << lease.id;
    const int node = machine_->Node(absl::StrCat("A100-80GB-mig"));
    const geometry::Shape* shape = machine_->cluster().shape(node);
    ASSERT_NE(shape, nullptr);
    for (size_t i = 0; i < lease.claims.size(); ++i) {
      const place::GpuClaim& claim = lease.claims[i];
      const BoundDevice& device = lease.bound[i];
      ASSERT_GE(claim.mig_profile, 0);
      EXPECT_THAT(device.uuid, StartsWith("MIG-"));
      EXPECT_EQ(device.gpu_index, machine_->gpus[static_cast<size_t>(claim.gpu)].index);
      EXPECT_EQ(device.gpu_uuid, machine_->gpus[static_cast<size_t>(claim.gpu)].uuid);
      bool found = false;
      for (const SimGi& gi : machine_->Gis(device.gpu_index)) {
        for (const SimCi& ci : gi.cis) {
          if (ci.uuid != device.uuid) continue;
          found = true;
          EXPECT_EQ(gi.id, device.gi);
          EXPECT_EQ(ci.id, device.ci);
          EXPECT_EQ(gi.start, claim.mig_start) << "lease " << lease.id;
          EXPECT_EQ(gi.profile_id, shape->profile(claim.mig_profile).smi_id)
              << "lease " << lease.id;
          EXPECT_EQ(ci.size, shape->profile(claim.mig_profile).compute_slices);
        }
      }
      EXPECT_TRUE(found) << "lease " << lease.id << ": no compute instance " << device.uuid;
    }
  }

  ScratchDir dir_;
  FakeClock clock_;
  std::unique_ptr<Machine> machine_;
  std::unique_ptr<Service> service_;
  Caller admin_;
};

TEST_F(ServiceBinderTest, AGrantedLeaseIsAnInstanceNamedInItsEnvironmentAndReleaseDestroysIt) {
  Start();
  const Caller ann = AddTenant("team-a");
  const Lease lease = Grant(ann, Request("small", "notebook"));
  ASSERT_THAT(lease.claims, SizeIs(1));
  ASSERT_THAT(lease.bound, SizeIs(1));
  ExpectRealInstances(lease);
  EXPECT_EQ(machine_->GiCount(), 1);
  EXPECT_EQ(lease.from_queue, 0);

  // What the service keeps and hands out is the same.
  const Lease stored = LeaseOf(lease.id);
  EXPECT_EQ(stored.bound, lease.bound);

  const std::map<std::string, std::string> env = LeaseEnvironment(stored);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), lease.bound[0].uuid);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), lease.bound[0].uuid);
  EXPECT_EQ(env.at("GPUSLICE_LEASE"), absl::StrCat(lease.id));
  EXPECT_FALSE(env.contains("GPUSLICE_VRAM_LIMIT_MIB"));
  EXPECT_FALSE(env.contains("GPUSLICE_SLICE")) << "a MIG instance needs no interposer";
  const std::vector<std::string> docker = DockerArgs(stored);
  ASSERT_GE(docker.size(), 2u);
  EXPECT_EQ(docker[0], "--gpus");
  EXPECT_EQ(docker[1], absl::StrCat("\"device=", lease.bound[0].uuid, "\""));

  ASSERT_TRUE(service_->Release(ann, lease.id).ok());
  EXPECT_EQ(machine_->GiCount(), 0);
  EXPECT_THAT(machine_->CiUuids(), IsEmpty());
  const Lease released = LeaseOf(lease.id);
  EXPECT_EQ(released.state, "released");
  bool audited = false;
  for (const AuditEvent& event : Audit()) {
    if (event.action == "release" && event.subject == absl::StrCat("lease ", lease.id)) {
      audited = true;
      EXPECT_THAT(event.detail, ::testing::Not(HasSubstr("devices_left")));
    }
  }
  EXPECT_TRUE(audited);
}

TEST_F(ServiceBinderTest, ALeaseGrantedFromTheQueueIsBound) {
  Start();
  const Caller ann = AddTenant("team-a");
  // Both GPUs taken by a 7g instance each: a small one has to wait.
  AcquireRequest seven;
  seven.profile = "7g.80gb";
  seven.purpose = "a";
  const Lease first = Grant(ann, seven);
  const Lease second = Grant(ann, seven);
  ExpectRealInstances(first);
  ExpectRealInstances(second);
  AcquireResult queued = Acquire(ann, Request("small", "waits"));
  ASSERT_EQ(queued.outcome, Outcome::kQueued) << queued.reason;
  const std::int64_t queue_id = queued.queued.id;

  ASSERT_TRUE(service_->Release(ann, second.id).ok());
  absl::StatusOr<int> ticked = service_->Tick();
  ASSERT_TRUE(ticked.ok()) << ticked.status();
  std::optional<Lease> granted;
  for (const Lease& lease : Active()) {
    if (lease.from_queue == queue_id) granted = lease;
  }
  ASSERT_TRUE(granted.has_value()) << "the queued request was not granted";
  EXPECT_EQ(granted->class_name, "small");
  ASSERT_THAT(granted->bound, SizeIs(1));
  ExpectRealInstances(*granted);
  EXPECT_EQ(LeaseEnvironment(*granted).at("CUDA_VISIBLE_DEVICES"), granted->bound[0].uuid);
  EXPECT_EQ(LeaseOf(granted->id).from_queue, queue_id);
}

TEST_F(ServiceBinderTest, ReopeningOnAFreshMachineBindsActiveLeasesAgainAndStoresTheNewUuids) {
  Start();
  const Caller ann = AddTenant("team-a");
  const Lease small = Grant(ann, Request("small", "one"));
  const Lease medium = Grant(ann, Request("medium", "two"));
  const Lease gone = Grant(ann, Request("small", "three"));
  ASSERT_TRUE(service_->Release(ann, gone.id).ok());
  ExpectRealInstances(small);
  ExpectRealInstances(medium);

  // The machine restarts (instances gone, new UUIDs: another seed); the service reopens on it.
  service_.reset();
  machine_ = std::make_unique<Machine>("2xA100-80GB", /*seed=*/2);
  ASSERT_EQ(machine_->GiCount(), 0);
  service_ = OpenOn(*machine_);
  ASSERT_NE(service_, nullptr);

  const std::vector<Lease> active = Active();
  ASSERT_THAT(active, SizeIs(2));
  std::map<std::int64_t, Lease> by_id;
  for (const Lease& lease : active) by_id[lease.id] = lease;
  ASSERT_TRUE(by_id.contains(small.id));
  ASSERT_TRUE(by_id.contains(medium.id));
  for (const Lease* before : {&small, &medium}) {
    const Lease& after = by_id[before->id];
    EXPECT_EQ(after.state, "active");
    EXPECT_EQ(after.claims.size(), before->claims.size());
    ASSERT_THAT(after.bound, SizeIs(1));
    EXPECT_NE(after.bound[0].uuid, before->bound[0].uuid) << "lease " << before->id;
    EXPECT_NE(after.bound[0].gpu_uuid, before->bound[0].gpu_uuid);
    ExpectRealInstances(after);
  }
  EXPECT_EQ(machine_->GiCount(), 2);  // the released lease's instance was not made again

  // The new UUIDs are in the store: a third opening (the same machine) reads them back as they
  // are and changes nothing.
  const std::uint64_t uuids_made = machine_->State().uuid_counter;
  service_.reset();
  service_ = OpenOn(*machine_);
  ASSERT_NE(service_, nullptr);
  for (const Lease& lease : Active()) {
    EXPECT_EQ(lease.bound, by_id[lease.id].bound) << "lease " << lease.id;
  }
  EXPECT_EQ(machine_->State().uuid_counter, uuids_made);
  EXPECT_EQ(machine_->GiCount(), 2);
  // Read straight from the store: the bound column holds the new UUIDs.
  absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenSqlite(DbPath());
  ASSERT_TRUE(db.ok()) << db.status();
  const std::vector<store::Value> params = {store::Value(small.id)};
  absl::StatusOr<store::Result> rows =
      (*db)->Query("SELECT bound FROM leases WHERE id = ?", params);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_THAT(rows->rows, SizeIs(1));
  EXPECT_THAT(store::AsText(rows->rows[0][0]), HasSubstr(by_id[small.id].bound[0].uuid));
  EXPECT_THAT(store::AsText(rows->rows[0][0]), ::testing::Not(HasSubstr(small.bound[0].uuid)));

  // Releasing after the restart destroys the re-created instances.
  ASSERT_TRUE(service_->Release(ann, small.id).ok());
  ASSERT_TRUE(service_->Release(ann, medium.id).ok());
  EXPECT_EQ(machine_->GiCount(), 0);
}

TEST_F(ServiceBinderTest, AReleaseWhileAProcessRunsEndsTheLeaseAndAuditsTheDevicesLeft) {
  Start();
  const Caller ann = AddTenant("team-a");
  const Lease lease = Grant(ann, Request("small", "busy"));
  ASSERT_THAT(lease.bound, SizeIs(1));
  const BoundDevice device = lease.bound[0];
  machine_->AddProcess(device.gpu_index, 5150, device.gi, device.ci, "train.py");

  absl::Status released = service_->Release(ann, lease.id);
  ASSERT_TRUE(released.ok()) << released;
  EXPECT_EQ(LeaseOf(lease.id).state, "released");
  EXPECT_THAT(Active(), IsEmpty());
  // The instance stays while the process runs.
  EXPECT_TRUE(machine_->CiUuids().contains(device.uuid));
  std::optional<AuditEvent> release;
  for (const AuditEvent& event : Audit()) {
    if (event.action == "release" && event.subject == absl::StrCat("lease ", lease.id)) {
      release = event;
    }
  }
  ASSERT_TRUE(release.has_value());
  // detail is JSON: {"class":..., "devices_left":"left in place, still in use: MIG-… used by
  // 5150 (train.py)", ...}
  EXPECT_THAT(release->detail, HasSubstr("\"devices_left\":"));
  EXPECT_THAT(release->detail, HasSubstr("5150 (train.py)"));
  EXPECT_THAT(release->detail, HasSubstr(device.uuid));
}

// A release that leaves a busy instance behind keeps its slots taken (the lease drains): the next
// request goes to a free placement, and once the processes are gone a Tick frees the slots.
TEST_F(ServiceBinderTest, ABusyInstanceLeftBehindDoesNotRefuseTheNextRequestWhileThereIsRoom) {
  Start();
  const Caller ann = AddTenant("team-a");
  const Lease lease = Grant(ann, Request("small", "busy"));
  ASSERT_THAT(lease.bound, SizeIs(1));
  const BoundDevice device = lease.bound[0];
  machine_->AddProcess(device.gpu_index, 5151, device.gi, device.ci, "stray");
  ASSERT_TRUE(service_->Release(ann, lease.id).ok());

  AcquireResult next = Acquire(ann, Request("small", "next"));
  EXPECT_EQ(next.outcome, Outcome::kGranted) << next.reason;
  if (next.outcome == Outcome::kGranted) {
    ASSERT_THAT(next.lease.bound, SizeIs(1));
    EXPECT_NE(next.lease.bound[0].uuid, device.uuid);
    ExpectRealInstances(next.lease);
  }
  // While the process runs, a Tick leaves the instance; once it is gone, the instance goes too.
  ASSERT_TRUE(service_->Tick().ok());
  EXPECT_TRUE(machine_->backend->ListComputeInstances(device.gpu_index, device.gi).ok());
  machine_->RemoveProcess(5151);
  ASSERT_TRUE(service_->Tick().ok());
  absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis =
      machine_->backend->ListGpuInstances(device.gpu_index);
  ASSERT_TRUE(gis.ok());
  for (const device::GpuInstanceInfo& gi : *gis) EXPECT_NE(gi.id, device.gi);
}

TEST_F(ServiceBinderTest, NoTwoActiveLeasesEverShareADevice) {
  Start();
  const Caller ann = AddTenant("team-a");
  const std::vector<std::string> classes = {"small", "small", "small", "medium", "large"};
  std::uint64_t rng = 12345;
  auto next = [&rng](std::uint64_t bound) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (rng >> 33) % bound;
  };
  std::vector<std::int64_t> held;
  for (int step = 0; step < 120; ++step) {
    if (!held.empty() && next(3) == 0) {
      const size_t pick = static_cast<size_t>(next(held.size()));
      ASSERT_TRUE(service_->Release(ann, held[pick]).ok()) << "step " << step;
      held.erase(held.begin() + static_cast<long>(pick));
    } else {
      const std::string& class_name = classes[static_cast<size_t>(next(classes.size()))];
      AcquireResult result = Acquire(ann, Request(class_name, "loop", /*wait=*/false));
      if (result.outcome == Outcome::kGranted) {
        held.push_back(result.lease.id);
      } else {
        EXPECT_EQ(result.outcome, Outcome::kRefused);
        EXPECT_THAT(result.reason, ::testing::Not(HasSubstr("could not be set up")))
            << "step " << step;
      }
    }
    // Every active lease has its own devices, each a real instance where its claim says.
    const std::vector<Lease> active = Active();
    ASSERT_EQ(active.size(), held.size()) << "step " << step;
    std::set<std::string> uuids;
    for (const Lease& lease : active) {
      ASSERT_THAT(lease.bound, SizeIs(lease.claims.size()));
      for (const BoundDevice& device : lease.bound) {
        EXPECT_TRUE(uuids.insert(device.uuid).second)
            << "step " << step << ": " << device.uuid << " is bound to two leases";
      }
      ExpectRealInstances(lease);
    }
    // And no instance is left that no lease holds.
    EXPECT_EQ(machine_->CiUuids().size(), uuids.size()) << "step " << step;
    if (::testing::Test::HasFailure()) return;
  }
  for (std::int64_t id : held) ASSERT_TRUE(service_->Release(ann, id).ok());
  EXPECT_EQ(machine_->GiCount(), 0);
}

}  // namespace
}  // namespace gpuslice::alloc

namespace gpuslice::alloc {
namespace {

// Idle reclaim from the device backend: a small lease (idle timeout 3600 s by default) is taken
// back only after an hour with no process on its instance; a process resets the count.
TEST_F(ServiceBinderTest, IdleLeasesAreReclaimedFromTheDevicesProcesses) {
  Start();
  const Caller ann = AddTenant("team-a");
  const Lease idle = Grant(ann, Request("small", "notebook left open"));
  const Lease busy = Grant(ann, Request("small", "training"));
  ASSERT_THAT(busy.bound, SizeIs(1));
  machine_->AddProcess(busy.bound[0].gpu_index, 7001, busy.bound[0].gi, busy.bound[0].ci);
  IdleTracker tracker(machine_->binder);
  auto probe = [&](const Lease& lease) {
    return tracker.IdleSeconds(lease.id, lease.node, lease.bound, clock_.now());
  };
  ASSERT_TRUE(service_->Tick(probe).ok());  // both first seen now
  EXPECT_EQ(probe(LeaseOf(busy.id)), 0);
  clock_.Advance(1800);
  EXPECT_EQ(probe(LeaseOf(idle.id)), 1800);
  ASSERT_TRUE(service_->Tick(probe).ok());
  EXPECT_EQ(LeaseOf(idle.id).state, "active");  // half an hour is not enough
  // A process on the idle one resets its count.
  machine_->AddProcess(idle.bound[0].gpu_index, 7002, idle.bound[0].gi, idle.bound[0].ci);
  ASSERT_TRUE(service_->Tick(probe).ok());
  machine_->RemoveProcess(7002);
  clock_.Advance(1800);
  ASSERT_TRUE(service_->Tick(probe).ok());
  EXPECT_EQ(LeaseOf(idle.id).state, "active");  // idle for 0 s of the last 1800
  clock_.Advance(3600);
  ASSERT_TRUE(service_->Tick(probe).ok());
  EXPECT_EQ(LeaseOf(idle.id).state, "reclaimed");
  EXPECT_EQ(LeaseOf(busy.id).state, "active");  // its process kept it
  // A lease of another machine, or without devices, is unknown to the tracker.
  EXPECT_EQ(tracker.IdleSeconds(99, "elsewhere/H100-80GB-mig", busy.bound, clock_.now()), -1);
  EXPECT_EQ(tracker.IdleSeconds(99, busy.node, {}, clock_.now()), -1);
}

}  // namespace
}  // namespace gpuslice::alloc
