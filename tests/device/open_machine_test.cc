// One way to name a machine (gpuslice/device/open_machine.h): a state file, a fleet, or NVML.
#include "gpuslice/device/open_machine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "gpuslice/device/sim_store.h"

namespace gpuslice::device {
namespace {

using ::testing::HasSubstr;

TEST(OpenMachine, AFleetIsANewMachineWithMigOnWherePossible) {
  const hw::Catalog& catalog = hw::Catalog::Builtin();
  EXPECT_EQ(KindOf("2xH100-80GB,1xL4"), MachineKind::kFleet);
  absl::StatusOr<std::unique_ptr<Backend>> machine =
      OpenMachine("2xH100-80GB,1xL4", catalog, /*seed=*/7);
  ASSERT_TRUE(machine.ok()) << machine.status();
  absl::StatusOr<std::vector<GpuInfo>> gpus = (*machine)->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[0].model->id, "H100-80GB");
  EXPECT_EQ((*gpus)[0].mig_current, MigMode::kEnabled);
  EXPECT_EQ((*gpus)[2].model->id, "L4");
  EXPECT_EQ((*gpus)[2].mig_current, MigMode::kDisabled);  // no MIG on an L4
  // Another seed, other UUIDs; the same seed, the same ones.
  absl::StatusOr<std::unique_ptr<Backend>> same = OpenMachine("2xH100-80GB,1xL4", catalog, 7);
  absl::StatusOr<std::unique_ptr<Backend>> other = OpenMachine("2xH100-80GB,1xL4", catalog, 9);
  ASSERT_TRUE(same.ok() && other.ok());
  EXPECT_EQ((*(*same)->ListGpus())[0].uuid, (*gpus)[0].uuid);
  EXPECT_NE((*(*other)->ListGpus())[0].uuid, (*gpus)[0].uuid);
}

TEST(OpenMachine, AnExistingFileIsAStateFileAndItsChangesAreKept) {
  const hw::Catalog& catalog = hw::Catalog::Builtin();
  const std::string path = ::testing::TempDir() + "/open_machine_state.json";
  absl::StatusOr<sim::SimState> state = sim::NewMachine(catalog, "1xA100-40GB", 3);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(sim::SimStore::Create(path, *state, /*overwrite=*/true).ok());
  EXPECT_EQ(KindOf(path), MachineKind::kStateFile);
  {
    absl::StatusOr<std::unique_ptr<Backend>> machine = OpenMachine(path, catalog);
    ASSERT_TRUE(machine.ok()) << machine.status();
    ASSERT_TRUE((*machine)->SetMigMode(0, MigMode::kEnabled).ok());
  }
  absl::StatusOr<std::unique_ptr<Backend>> again = OpenMachine(path, catalog);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*(*again)->ListGpus())[0].mig_pending, MigMode::kEnabled);
  std::filesystem::remove(path);
}

TEST(OpenMachine, TextThatIsNeitherSaysBoth) {
  absl::StatusOr<std::unique_ptr<Backend>> machine =
      OpenMachine("/no/such/machine.json", hw::Catalog::Builtin());
  ASSERT_FALSE(machine.ok());
  EXPECT_EQ(machine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(machine.status().message(), HasSubstr("no such state file"));
  EXPECT_THAT(machine.status().message(), HasSubstr("not a fleet spec"));
  EXPECT_EQ(KindOf(""), MachineKind::kLocalGpus);
}

}  // namespace
}  // namespace gpuslice::device
