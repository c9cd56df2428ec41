// Tests of the GPU catalog: the built-in data against the reference facts
// (../shared/reference/mig-facts.md), name resolution, and the strict loader.
#include "gpuslice/hw/catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "gpuslice/geometry/shape.h"
#include "test_util.h"

namespace gpuslice::hw {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

const Catalog& Builtin() { return Catalog::Builtin(); }

const GpuModel& ModelOrDie(std::string_view id) { return gpuslice::testing::Model(id); }

const GiProfile& ProfileOrDie(const GpuModel& model, std::string_view name) {
  EXPECT_TRUE(model.mig.has_value()) << model.id;
  const GiProfile* profile = model.mig->FindProfile(name);
  if (profile == nullptr) {
    ADD_FAILURE() << model.id << " has no profile " << name;
    std::abort();
  }
  return *profile;
}

std::vector<int> Range(int begin, int end) {
  std::vector<int> out;
  for (int i = begin; i < end; ++i) out.push_back(i);
  return out;
}

// ------------------------------------------------------------------------------------------------
// The built-in catalog: which models exist.

TEST(BuiltinCatalog, LoadsAndHasModels) {
  const Catalog& catalog = Builtin();
  EXPECT_GE(catalog.models().size(), 20u);
  std::set<std::string> ids;
  for (const GpuModel& model : catalog.models()) {
    EXPECT_TRUE(ids.insert(model.id).second) << "duplicate id " << model.id;
  }
}

TEST(BuiltinCatalog, MigModelsExistAndAreMigCapable) {
  for (const char* id :
       {"A100-40GB", "A100-80GB", "A30-24GB", "H100-80GB", "H100-NVL-94GB", "H100-96GB", "H20",
        "H200-141GB", "GH200-144GB", "B200", "GB200", "RTX-PRO-6000-Blackwell"}) {
    SCOPED_TRACE(id);
    const GpuModel* model = Builtin().Find(id);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->id, id);  // canonical ids, not aliases
    EXPECT_TRUE(model->mig_capable());
    EXPECT_FALSE(model->mig->profiles.empty());
  }
}

TEST(BuiltinCatalog, NonMigModelsExistWithMemoryAndSms) {
  // Nominal memory (GB, from the product names) and SM counts from the public product specs.
  struct Expected {
    const char* id;
    int nominal_gb;
    int sms;
  };
  for (const Expected& e :
       {Expected{"RTX-4090", 24, 128}, Expected{"RTX-5090", 32, 170},
        Expected{"RTX-6000-Ada", 48, 142}, Expected{"L4", 24, 58}, Expected{"L40S", 48, 142},
        Expected{"A10", 24, 72}, Expected{"T4", 16, 40}, Expected{"V100-16GB", 16, 80},
        Expected{"V100-32GB", 32, 80}}) {
    SCOPED_TRACE(e.id);
    const GpuModel* model = Builtin().Find(e.id);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->id, e.id);
    EXPECT_FALSE(model->mig_capable());
    // nvidia-smi reports a little less than the nominal size (ECC, reserved memory), never more.
    EXPECT_LE(model->memory_mib, e.nominal_gb * 1024);
    EXPECT_GE(model->memory_mib, e.nominal_gb * 1024 * 92 / 100);
    EXPECT_EQ(model->sms, e.sms);
    EXPECT_FALSE(model->pci_device_ids.empty());
  }
}

// ------------------------------------------------------------------------------------------------
// Name resolution.

TEST(CatalogFind, H100AliasesAndPciIdsResolveToH100_80GB) {
  for (const char* name : {"h100", "H100-80GB", "NVIDIA H100 80GB HBM3", "0x2330", "2330",
                           "0x233010DE", "10de:2330", "h100_80gb", "H100 80GB", "nvidia h100"}) {
    SCOPED_TRACE(name);
    const GpuModel* model = Builtin().Find(name);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->id, "H100-80GB");
    absl::StatusOr<const GpuModel*> resolved = Builtin().Resolve(name);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    EXPECT_EQ((*resolved)->id, "H100-80GB");
  }
}

TEST(CatalogFind, PciIdsOfOtherModels) {
  // PCI device ids from mig-facts.md §2.
  EXPECT_EQ(Builtin().Find("0x20B0")->id, "A100-40GB");
  EXPECT_EQ(Builtin().Find("0x20F1")->id, "A100-40GB");
  EXPECT_EQ(Builtin().Find("0x20B2")->id, "A100-80GB");
  EXPECT_EQ(Builtin().Find("0x20B5")->id, "A100-80GB");
  EXPECT_EQ(Builtin().Find("0x20B7")->id, "A30-24GB");
  EXPECT_EQ(Builtin().Find("0x2331")->id, "H100-80GB");
  EXPECT_EQ(Builtin().Find("0x2321")->id, "H100-NVL-94GB");
  EXPECT_EQ(Builtin().Find("0x2335")->id, "H200-141GB");
  EXPECT_EQ(Builtin().Find("0x2901")->id, "B200");
  EXPECT_EQ(Builtin().Find("0x2941")->id, "GB200");
  EXPECT_EQ(Builtin().Find("0x2BB5")->id, "RTX-PRO-6000-Blackwell");
  EXPECT_EQ(Builtin().Find("0x2BB510DE")->id, "RTX-PRO-6000-Blackwell");
  EXPECT_EQ(Builtin().Find("NVIDIA H100 NVL")->id, "H100-NVL-94GB");
  EXPECT_EQ(Builtin().Find("NVIDIA H200")->id, "H200-141GB");
  EXPECT_EQ(Builtin().Find("NVIDIA B200")->id, "B200");
}

TEST(CatalogFind, UnknownNamesAreNull) {
  EXPECT_EQ(Builtin().Find(""), nullptr);
  EXPECT_EQ(Builtin().Find("H100-81GB"), nullptr);
  EXPECT_EQ(Builtin().Find("0x0000"), nullptr);
  EXPECT_EQ(Builtin().Find("10de:ffff"), nullptr);
}

TEST(CatalogFind, AmbiguousA100IsNotAnAliasButSuggestsBoth) {
  EXPECT_EQ(Builtin().Find("a100"), nullptr);
  const std::vector<std::string> suggestions = Builtin().Suggest("a100");
  EXPECT_THAT(suggestions, Contains("A100-40GB"));
  EXPECT_THAT(suggestions, Contains("A100-80GB"));
  absl::StatusOr<const GpuModel*> resolved = Builtin().Resolve("a100");
  ASSERT_FALSE(resolved.ok());
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(resolved.status().message(), AllOf(HasSubstr("A100-40GB"), HasSubstr("A100-80GB")));
}

TEST(CatalogFind, SuggestRespectsLimit) {
  EXPECT_LE(Builtin().Suggest("a100", 1).size(), 1u);
  EXPECT_THAT(Builtin().Suggest("h100-80gb", 1), ElementsAre("H100-80GB"));
}

TEST(CatalogResolve, TypoIsNotFoundAndSuggestsClosest) {
  absl::StatusOr<const GpuModel*> resolved = Builtin().Resolve("H100-81GB");
  ASSERT_FALSE(resolved.ok());
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(resolved.status().message(), HasSubstr("H100-81GB"));
  EXPECT_THAT(resolved.status().message(), HasSubstr("H100-80GB"));
  EXPECT_THAT(Builtin().Suggest("H100-81GB"), Contains("H100-80GB"));
  EXPECT_EQ(Builtin().Suggest("H100-81GB").front(), "H100-80GB");
}

TEST(NormalizeName, DropsSeparatorsCaseAndNvidiaPrefix) {
  EXPECT_EQ(NormalizeName("NVIDIA H100_PCIe"), "h100pcie");
  EXPECT_EQ(NormalizeName("h100-pcie"), "h100pcie");
  EXPECT_EQ(NormalizeName("H100 PCIe"), "h100pcie");
  EXPECT_EQ(NormalizeName("1g.10gb"), "1g10gb");
}

TEST(ProfileLookup, FindProfileByNameAliasAndId) {
  const MigSpec& a100 = *ModelOrDie("A100-80GB").mig;
  // mig-facts §0.5: A100-80GB 7g.80gb is called 7g.79gb by some drivers.
  ASSERT_NE(a100.FindProfile("7g.79gb"), nullptr);
  EXPECT_EQ(a100.FindProfile("7g.79gb")->name, "7g.80gb");
  EXPECT_EQ(a100.FindProfile("MIG 3g.40gb")->name, "3g.40gb");
  EXPECT_EQ(a100.FindProfile("3G.40GB")->name, "3g.40gb");
  EXPECT_EQ(a100.FindProfile("3g.20gb"), nullptr);
  EXPECT_EQ(a100.FindProfileBySmiId(9)->name, "3g.40gb");
  EXPECT_EQ(a100.FindProfileBySmiId(1), nullptr);
  // GB200 renamed 1g.24gb to 1g.23gb (mig-facts §0.5, §2.9).
  const MigSpec& gb200 = *ModelOrDie("GB200").mig;
  ASSERT_NE(gb200.FindProfile("1g.24gb"), nullptr);
  EXPECT_EQ(gb200.FindProfile("1g.24gb")->name, "1g.23gb");
  EXPECT_EQ(gb200.IndexOf(*gb200.FindProfile("1g.23gb")), 0);
}

// ------------------------------------------------------------------------------------------------
// Exact profile facts, mig-facts.md §2.

struct ProfileFact {
  const char* name;
  int smi_id;
  int nvml_const;
  std::int64_t memory_mib;
  int sms;
  int max_instances;
  std::vector<int> starts;
  int placement_size;
};

void ExpectProfile(const GpuModel& model, const ProfileFact& fact) {
  SCOPED_TRACE(model.id + " " + fact.name);
  const GiProfile& p = ProfileOrDie(model, fact.name);
  EXPECT_EQ(p.name, fact.name);
  EXPECT_EQ(p.smi_id, fact.smi_id);
  EXPECT_EQ(p.nvml_const, fact.nvml_const);
  if (fact.memory_mib > 0) {
    EXPECT_EQ(p.memory_mib, fact.memory_mib);
  }
  if (fact.sms > 0) {
    EXPECT_EQ(p.sms, fact.sms);
  }
  EXPECT_EQ(p.max_instances, fact.max_instances);
  EXPECT_EQ(p.starts, fact.starts);
  EXPECT_EQ(p.placement_size, fact.placement_size);
}

TEST(ProfileFacts, A100_40GB) {
  const GpuModel& m = ModelOrDie("A100-40GB");
  ASSERT_TRUE(m.mig);
  EXPECT_EQ(m.mig->compute_slices, 7);
  EXPECT_EQ(m.mig->placement_units, 8);
  EXPECT_EQ(m.mig->sms, 98);
  EXPECT_EQ(m.mig->profiles.size(), 7u);
  ExpectProfile(m, {"1g.5gb", 19, 0, 4864, 14, 7, Range(0, 7), 1});
  ExpectProfile(m, {"1g.5gb+me", 20, 7, 4864, 14, 1, Range(0, 7), 1});
  ExpectProfile(m, {"1g.10gb", 15, 9, 9856, 14, 4, {0, 2, 4, 6}, 2});
  ExpectProfile(m, {"2g.10gb", 14, 1, 9856, 28, 3, {0, 2, 4}, 2});
  ExpectProfile(m, {"3g.20gb", 9, 2, 19968, 42, 2, {0, 4}, 4});
  ExpectProfile(m, {"4g.20gb", 5, 3, 19968, 56, 1, {0}, 4});
  ExpectProfile(m, {"7g.40gb", 0, 4, 40192, 98, 1, {0}, 8});
  const GiProfile& full = ProfileOrDie(m, "7g.40gb");
  EXPECT_EQ(full.engines.copy, 7);
  EXPECT_EQ(full.engines.decoder, 5);
  EXPECT_EQ(full.engines.jpeg, 1);
  EXPECT_EQ(full.engines.ofa, 1);
  const GiProfile& me = ProfileOrDie(m, "1g.5gb+me");
  EXPECT_EQ(me.engines.jpeg, 1);
  EXPECT_EQ(me.engines.ofa, 1);
  EXPECT_EQ(me.variant, MediaVariant::kMe);
  EXPECT_EQ(me.nvml_const_name, "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1");
  // Driver minima (mig-facts §2.1, §7).
  EXPECT_EQ(me.min_driver_branch, 470);
  EXPECT_EQ(ProfileOrDie(m, "1g.10gb").min_driver_branch, 525);
  EXPECT_EQ(ProfileOrDie(m, "1g.5gb").min_driver_branch, 0);
  EXPECT_EQ(m.mig->min_driver_branch, 450);
  // Default (no-placement) order, mig-facts §0.8.
  EXPECT_THAT(ProfileOrDie(m, "1g.5gb").default_order, ElementsAre(6, 4, 5, 0, 1, 2, 3));
  EXPECT_EQ(ProfileOrDie(m, "3g.20gb").default_order.front(), 4);
  // Older-driver memory (mig-facts §2.1).
  const GiProfile& two = ProfileOrDie(m, "2g.10gb");
  ASSERT_EQ(two.memory_alt.size(), 1u);
  EXPECT_EQ(two.memory_alt[0].mib, 9984);
  EXPECT_THAT(m.pci_device_ids, AllOf(Contains(0x20B0), Contains(0x20F1)));
}

TEST(ProfileFacts, A100_80GB) {
  const GpuModel& m = ModelOrDie("A100-80GB");
  ExpectProfile(m, {"1g.10gb", 19, 0, 9728, 14, 7, Range(0, 7), 1});
  ExpectProfile(m, {"1g.20gb", 15, 9, 0, 0, 4, {0, 2, 4, 6}, 2});
  ExpectProfile(m, {"2g.20gb", 14, 1, 19968, 28, 3, {0, 2, 4}, 2});
  ExpectProfile(m, {"7g.80gb", 0, 4, 81152, 98, 1, {0}, 8});
  EXPECT_EQ(ProfileOrDie(m, "1g.10gb").engines.decoder, 0);  // "DEC 0" on real hardware
}

TEST(ProfileFacts, A30) {
  const GpuModel& m = ModelOrDie("A30-24GB");
  ASSERT_TRUE(m.mig);
  EXPECT_EQ(m.mig->compute_slices, 4);
  EXPECT_EQ(m.mig->placement_units, 4);
  EXPECT_EQ(m.mig->sms, 56);
  EXPECT_EQ(m.mig->min_driver_branch, 460);
  ASSERT_EQ(m.mig->profiles.size(), 5u);
  std::vector<int> ids;
  for (const GiProfile& p : m.mig->profiles) ids.push_back(p.smi_id);
  EXPECT_THAT(ids, ElementsAre(14, 21, 5, 6, 0));
  ExpectProfile(m, {"1g.6gb", 14, 0, 5952, 14, 4, {0, 1, 2, 3}, 1});
  ExpectProfile(m, {"1g.6gb+me", 21, 7, 5952, 14, 1, {0, 1, 2, 3}, 1});
  ExpectProfile(m, {"2g.12gb", 5, 1, 11968, 28, 2, {0, 2}, 2});
  ExpectProfile(m, {"2g.12gb+me", 6, 8, 11968, 28, 1, {0, 2}, 2});
  ExpectProfile(m, {"4g.24gb", 0, 3, 0, 56, 1, {0}, 4});
  const std::int64_t full = ProfileOrDie(m, "4g.24gb").memory_mib;
  EXPECT_TRUE(full == 24000 || full == 24064) << full;  // both captured
  EXPECT_EQ(ProfileOrDie(m, "2g.12gb+me").min_driver_branch, 525);
  EXPECT_EQ(ProfileOrDie(m, "1g.6gb+me").min_driver_branch, 470);
}

TEST(ProfileFacts, H100_80GB) {
  const GpuModel& m = ModelOrDie("H100-80GB");
  EXPECT_EQ(m.mig->min_driver_branch, 525);
  EXPECT_EQ(m.mig->sms, 132);
  ExpectProfile(m, {"1g.10gb", 19, 0, 9984, 16, 7, Range(0, 7), 1});
  ExpectProfile(m, {"1g.10gb+me", 20, 7, 9984, 16, 1, Range(0, 7), 1});
  ExpectProfile(m, {"1g.20gb", 15, 9, 20096, 26, 4, {0, 2, 4, 6}, 2});
  ExpectProfile(m, {"2g.20gb", 14, 1, 20096, 32, 3, {0, 2, 4}, 2});
  ExpectProfile(m, {"3g.40gb", 9, 2, 40448, 60, 2, {0, 4}, 4});
  ExpectProfile(m, {"4g.40gb", 5, 3, 40448, 64, 1, {0}, 4});
  ExpectProfile(m, {"7g.80gb", 0, 4, 81152, 132, 1, {0}, 8});
  const GiProfile& full = ProfileOrDie(m, "7g.80gb");
  EXPECT_EQ(full.engines.copy, 8);
  EXPECT_EQ(full.engines.decoder, 7);
  EXPECT_EQ(full.engines.jpeg, 7);
  EXPECT_EQ(full.engines.ofa, 1);
  EXPECT_EQ(full.engines.encoder, 0);
  const GiProfile& one = ProfileOrDie(m, "1g.10gb");
  ASSERT_EQ(one.memory_alt.size(), 1u);
  EXPECT_EQ(one.memory_alt[0].mib, 9856);
  EXPECT_EQ(m.memory_mib, 81559);
}

TEST(ProfileFacts, H100_NVL) {
  const GpuModel& m = ModelOrDie("H100-NVL-94GB");
  ExpectProfile(m, {"1g.12gb", 19, 0, 11008, 16, 7, Range(0, 7), 1});
  ExpectProfile(m, {"1g.12gb+me", 20, 7, 11008, 16, 1, Range(0, 7), 1});
  ExpectProfile(m, {"1g.24gb", 15, 9, 22144, 26, 4, {0, 2, 4, 6}, 2});
  ExpectProfile(m, {"2g.24gb", 14, 1, 22144, 32, 3, {0, 2, 4}, 2});
  ExpectProfile(m, {"3g.47gb", 9, 2, 47488, 60, 2, {0, 4}, 4});
  ExpectProfile(m, {"4g.47gb", 5, 3, 47488, 64, 1, {0}, 4});
  ExpectProfile(m, {"7g.94gb", 0, 4, 95360, 132, 1, {0}, 8});
  EXPECT_EQ(m.memory_mib, 95830);
}

TEST(ProfileFacts, H200) {
  const GpuModel& m = ModelOrDie("H200-141GB");
  EXPECT_EQ(m.mig->min_driver_branch, 550);
  ExpectProfile(m, {"1g.18gb", 19, 0, 16384, 16, 7, Range(0, 7), 1});
  ExpectProfile(m, {"1g.35gb", 15, 9, 33024, 26, 4, {0, 2, 4, 6}, 2});
  ExpectProfile(m, {"2g.35gb", 14, 1, 33024, 32, 3, {0, 2, 4}, 2});
  ExpectProfile(m, {"3g.71gb", 9, 2, 71168, 60, 2, {0, 4}, 4});
  ExpectProfile(m, {"7g.141gb", 0, 4, 143104, 132, 1, {0}, 8});
}

TEST(ProfileFacts, B200AndGB200CapturedRows) {
  const GpuModel& b200 = ModelOrDie("B200");
  EXPECT_EQ(b200.mig->min_driver_branch, 570);
  EXPECT_EQ(b200.memory_mib, 183359);
  ExpectProfile(b200, {"1g.23gb", 19, 0, 22528, 18, 7, Range(0, 7), 1});
  ExpectProfile(b200, {"1g.45gb", 15, 9, 45312, 30, 4, {0, 2, 4, 6}, 2});
  ExpectProfile(b200, {"2g.45gb", 14, 1, 45312, 36, 3, {0, 2, 4}, 2});
  const GiProfile& b2g = ProfileOrDie(b200, "2g.45gb");
  EXPECT_EQ(b2g.engines.copy, 4);  // the lgip row wins over the guide's CE 3
  EXPECT_EQ(b2g.engines.decoder, 2);
  EXPECT_EQ(b2g.engines.jpeg, 2);
  const GiProfile& b1g = ProfileOrDie(b200, "1g.23gb");
  ASSERT_EQ(b1g.memory_alt.size(), 1u);
  EXPECT_EQ(b1g.memory_alt[0].mib, 20992);

  const GpuModel& gb200 = ModelOrDie("GB200");
  EXPECT_EQ(gb200.mig->min_driver_branch, 570);
  ExpectProfile(gb200, {"1g.23gb", 19, 0, 22528, 18, 7, Range(0, 7), 1});
  ExpectProfile(gb200, {"1g.47gb", 15, 9, 46592, 32, 4, {0, 2, 4, 6}, 2});
  ExpectProfile(gb200, {"2g.47gb", 14, 1, 46592, 38, 3, {0, 2, 4}, 2});
  const GiProfile& g1g = ProfileOrDie(gb200, "1g.23gb");
  ASSERT_EQ(g1g.memory_alt.size(), 1u);
  EXPECT_EQ(g1g.memory_alt[0].mib, 20480);
}

TEST(ProfileFacts, RtxPro6000) {
  const GpuModel& m = ModelOrDie("RTX-PRO-6000-Blackwell");
  ASSERT_TRUE(m.mig);
  EXPECT_EQ(m.mig->compute_slices, 4);
  EXPECT_EQ(m.mig->placement_units, 12);
  EXPECT_EQ(m.mig->sms, 188);
  EXPECT_EQ(m.mig->min_driver_branch, 575);
  std::vector<int> ids;
  for (const GiProfile& p : m.mig->profiles) ids.push_back(p.smi_id);
  EXPECT_THAT(ids, ElementsAre(14, 21, 47, 65, 67, 5, 35, 64, 66, 0, 32));
  ExpectProfile(m, {"1g.24gb", 14, 0x00, 24192, 46, 4, {0, 3, 6, 9}, 3});
  ExpectProfile(m, {"1g.24gb+me", 21, 0x07, 24192, 46, 1, {0, 3, 6, 9}, 3});
  ExpectProfile(m, {"1g.24gb+gfx", 47, 0x0A, 24192, 46, 4, {0, 3, 6, 9}, 3});
  ExpectProfile(m, {"1g.24gb+me.all", 65, 0x0F, 24192, 46, 1, {0, 3, 6, 9}, 3});
  ExpectProfile(m, {"1g.24gb-me", 67, 0x0D, 24192, 46, 4, {0, 3, 6, 9}, 3});
  ExpectProfile(m, {"2g.48gb", 5, 0x01, 48512, 94, 2, {0, 6}, 6});
  ExpectProfile(m, {"2g.48gb+gfx", 35, 0x0B, 48512, 94, 2, {0, 6}, 6});
  ExpectProfile(m, {"2g.48gb+me.all", 64, 0x10, 48512, 94, 1, {0, 6}, 6});
  ExpectProfile(m, {"2g.48gb-me", 66, 0x0E, 48512, 94, 2, {0, 6}, 6});
  ExpectProfile(m, {"4g.96gb", 0, 0x03, 97408, 188, 1, {0}, 12});
  ExpectProfile(m, {"4g.96gb+gfx", 32, 0x0C, 97408, 188, 1, {0}, 12});
  EXPECT_EQ(ProfileOrDie(m, "1g.24gb+me.all").variant, MediaVariant::kMeAll);
  EXPECT_EQ(ProfileOrDie(m, "2g.48gb+me.all").variant, MediaVariant::kMeAll);
  EXPECT_EQ(ProfileOrDie(m, "1g.24gb-me").variant, MediaVariant::kNoMe);
  EXPECT_EQ(ProfileOrDie(m, "2g.48gb-me").variant, MediaVariant::kNoMe);
  EXPECT_EQ(ProfileOrDie(m, "1g.24gb+gfx").variant, MediaVariant::kGfx);
  EXPECT_EQ(ProfileOrDie(m, "1g.24gb+me").variant, MediaVariant::kMe);
  EXPECT_EQ(ProfileOrDie(m, "1g.24gb").variant, MediaVariant::kStandard);
  const GiProfile& all = ProfileOrDie(m, "1g.24gb+me.all");
  EXPECT_EQ(all.engines.decoder, 4);
  EXPECT_EQ(all.engines.encoder, 4);
  EXPECT_EQ(all.engines.jpeg, 4);
  EXPECT_EQ(all.engines.ofa, 1);
  const GiProfile& none = ProfileOrDie(m, "1g.24gb-me");
  EXPECT_EQ(none.engines.decoder + none.engines.encoder + none.engines.jpeg + none.engines.ofa, 0);
}

// mig-facts §0.1/§0.2/§2.5: every 7-slice part shares the profile IDs and placements of the same
// NVML constant.
TEST(ProfileFacts, SevenSlicePartsShareIdsAndPlacements) {
  struct Shape7 {
    int nvml_const;
    int smi_id;
    int max;
    std::vector<int> starts;
    int size;
  };
  const std::vector<Shape7> expected = {
      {0, 19, 7, Range(0, 7), 1}, {7, 20, 1, Range(0, 7), 1}, {9, 15, 4, {0, 2, 4, 6}, 2},
      {1, 14, 3, {0, 2, 4}, 2},   {2, 9, 2, {0, 4}, 4},       {3, 5, 1, {0}, 4},
      {4, 0, 1, {0}, 8}};
  int seven_slice_models = 0;
  for (const GpuModel& model : Builtin().models()) {
    if (!model.mig || model.mig->compute_slices != 7) continue;
    ++seven_slice_models;
    SCOPED_TRACE(model.id);
    EXPECT_EQ(model.mig->placement_units, 8);
    ASSERT_EQ(model.mig->profiles.size(), expected.size());
    for (const Shape7& e : expected) {
      const auto it =
          std::find_if(model.mig->profiles.begin(), model.mig->profiles.end(),
                       [&](const GiProfile& p) { return p.nvml_const == e.nvml_const; });
      ASSERT_NE(it, model.mig->profiles.end()) << "NVML const " << e.nvml_const;
      EXPECT_EQ(it->smi_id, e.smi_id) << it->name;
      EXPECT_EQ(it->max_instances, e.max) << it->name;
      EXPECT_EQ(it->starts, e.starts) << it->name;
      EXPECT_EQ(it->placement_size, e.size) << it->name;
    }
  }
  EXPECT_GE(seven_slice_models, 10);
}

// go-nvlib's naming rule (mig-facts §5.3): GB = round(ceil(8 * mem / total) / 8 * ceil(total /
// GiB)). Every profile's "<N>gb" must follow from its memory and the model's framebuffer total, so
// an estimated memory value cannot silently contradict the published name.
TEST(CatalogData, ProfileNamesFollowFromMemory) {
  for (const GpuModel& model : Builtin().models()) {
    if (!model.mig) continue;
    const std::int64_t total = model.memory_mib;
    const std::int64_t total_gib = (total + 1023) / 1024;
    for (const GiProfile& profile : model.mig->profiles) {
      SCOPED_TRACE(model.id + " " + profile.name);
      const std::int64_t eighths = (8 * profile.memory_mib + total - 1) / total;
      const double gb = std::round(static_cast<double>(eighths * total_gib) / 8.0);
      const size_t dot = profile.name.find('.');
      const size_t gb_end = profile.name.find("gb");
      ASSERT_NE(dot, std::string::npos);
      ASSERT_NE(gb_end, std::string::npos);
      EXPECT_EQ(profile.name.substr(dot + 1, gb_end - dot - 1),
                std::to_string(static_cast<std::int64_t>(gb)));
    }
  }
}

// Invariants the loader and docs/CATALOG.md promise for every model of the built-in data.
TEST(CatalogData, MigModelsAreConsistent) {
  for (const GpuModel& model : Builtin().models()) {
    if (!model.mig) continue;
    SCOPED_TRACE(model.id);
    const MigSpec& mig = *model.mig;
    EXPECT_LE(mig.placement_units, geometry::kMaxUnits);
    EXPECT_LE(mig.profiles.size(), static_cast<size_t>(geometry::kMaxProfiles));
    EXPECT_GE(mig.min_driver_branch, 450);
    EXPECT_FALSE(model.MigPartedDeviceFilters().empty());
    std::set<int> ids;
    std::set<int> consts;
    for (const GiProfile& p : mig.profiles) {
      SCOPED_TRACE(p.name);
      EXPECT_TRUE(ids.insert(p.smi_id).second) << "duplicate smi_id";
      EXPECT_TRUE(consts.insert(p.nvml_const).second) << "duplicate NVML constant";
      EXPECT_EQ(p.name.substr(0, p.name.find('g')), std::to_string(p.compute_slices));
      EXPECT_LE(p.compute_slices, mig.compute_slices);
      EXPECT_TRUE(std::is_sorted(p.starts.begin(), p.starts.end()));
      for (int start : p.starts) EXPECT_LE(start + p.placement_size, mig.placement_units);
      std::vector<int> order = p.default_order;
      std::sort(order.begin(), order.end());
      EXPECT_EQ(order, p.starts) << "default_order must be a permutation of starts";
      EXPECT_EQ(p.memory_mib % 64, 0) << "memorySizeMB values are multiples of 64 (§0.10)";
      EXPECT_GE(p.max_instances, 1);
      EXPECT_LE(p.max_instances * p.placement_size, mig.placement_units);
      EXPECT_TRUE(p.nvml_const_name.starts_with("NVML_GPU_INSTANCE_PROFILE_"));
      // CI table present with exactly one default per GI size.
      const std::vector<CiProfile>& cis = mig.CiProfilesFor(p.compute_slices);
      ASSERT_FALSE(cis.empty());
      EXPECT_EQ(
          std::count_if(cis.begin(), cis.end(), [](const CiProfile& c) { return c.is_default; }),
          1);
    }
    // The full-GPU profile has all compute slices and all SMs of MIG mode.
    const auto full = std::max_element(
        mig.profiles.begin(), mig.profiles.end(),
        [](const GiProfile& a, const GiProfile& b) { return a.placement_size < b.placement_size; });
    EXPECT_EQ(full->placement_size, mig.placement_units);
    EXPECT_EQ(full->compute_slices, mig.compute_slices);
    EXPECT_EQ(full->sms, mig.sms);
    for (const std::string& name : mig.balanced) EXPECT_NE(mig.FindProfile(name), nullptr) << name;
  }
}

TEST(CatalogData, NamesAndPciIdsAreUniqueAcrossModels) {
  std::map<std::string, std::string> names;
  std::map<int, std::string> pci;
  for (const GpuModel& model : Builtin().models()) {
    std::vector<std::string> all = {model.id, model.display_name};
    all.insert(all.end(), model.aliases.begin(), model.aliases.end());
    all.insert(all.end(), model.nvml_names.begin(), model.nvml_names.end());
    for (const std::string& name : all) {
      auto [it, inserted] = names.emplace(NormalizeName(name), model.id);
      EXPECT_TRUE(inserted || it->second == model.id)
          << name << " of " << model.id << " also names " << it->second;
      // Every name resolves back to its own model.
      ASSERT_NE(Builtin().Find(name), nullptr) << name;
      EXPECT_EQ(Builtin().Find(name)->id, model.id) << name;
    }
    for (std::uint16_t id : model.pci_device_ids) {
      auto [it, inserted] = pci.emplace(id, model.id);
      EXPECT_TRUE(inserted) << model.id << " and " << it->second << " share a PCI id";
    }
  }
}

TEST(CatalogData, BalancedLayoutsMatchMigParted) {
  // mig-facts §5.1 (all-balanced per device filter).
  EXPECT_THAT(ModelOrDie("A100-40GB").mig->balanced,
              ElementsAre("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"));
  EXPECT_THAT(ModelOrDie("H100-80GB").mig->balanced,
              ElementsAre("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"));
  EXPECT_THAT(ModelOrDie("A30-24GB").mig->balanced, ElementsAre("1g.6gb", "1g.6gb", "2g.12gb"));
  EXPECT_THAT(ModelOrDie("RTX-PRO-6000-Blackwell").mig->balanced,
              ElementsAre("1g.24gb", "1g.24gb", "2g.48gb"));
  EXPECT_THAT(ModelOrDie("B200").mig->balanced,
              ElementsAre("1g.23gb", "1g.23gb", "2g.45gb", "3g.90gb"));
  EXPECT_THAT(ModelOrDie("GB200").mig->balanced,
              ElementsAre("1g.23gb", "1g.23gb", "2g.47gb", "3g.93gb"));
  EXPECT_THAT(ModelOrDie("H200-141GB").mig->balanced,
              ElementsAre("1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"));
  EXPECT_THAT(ModelOrDie("H100-NVL-94GB").mig->balanced,
              ElementsAre("1g.12gb", "1g.12gb", "2g.24gb", "3g.47gb"));
  for (const char* id : {"H100-96GB", "H20"}) {
    EXPECT_THAT(ModelOrDie(id).mig->balanced,
                ElementsAre("1g.12gb", "1g.12gb", "2g.24gb", "3g.48gb"));
  }
  EXPECT_THAT(ModelOrDie("GH200-144GB").mig->balanced,
              ElementsAre("1g.18gb", "1g.18gb", "2g.36gb", "3g.72gb"));
}

TEST(CatalogData, MigPartedDeviceFilters) {
  EXPECT_THAT(ModelOrDie("H100-80GB").MigPartedDeviceFilters(), Contains("0x233010DE"));
  EXPECT_THAT(ModelOrDie("RTX-PRO-6000-Blackwell").MigPartedDeviceFilters(),
              Contains("0x2BB510DE"));
}

// ------------------------------------------------------------------------------------------------
// Confidence.

TEST(Confidence, ParseAndOrder) {
  EXPECT_EQ(ParseConfidence("confirmed"), Confidence::kConfirmed);
  EXPECT_EQ(ParseConfidence("partial"), Confidence::kPartial);
  EXPECT_EQ(ParseConfidence("unconfirmed"), Confidence::kUnconfirmed);
  EXPECT_EQ(ParseConfidence("Confirmed"), std::nullopt);
  EXPECT_EQ(ToString(Confidence::kPartial), "partial");
  EXPECT_EQ(Weakest(Confidence::kConfirmed, Confidence::kPartial), Confidence::kPartial);
  EXPECT_EQ(Weakest(Confidence::kUnconfirmed, Confidence::kPartial), Confidence::kUnconfirmed);
  ProfileConfidence mixed;
  mixed.memory = Confidence::kPartial;
  EXPECT_EQ(mixed.Overall(), Confidence::kPartial);
  mixed.placements = Confidence::kUnconfirmed;
  EXPECT_EQ(mixed.Overall(), Confidence::kUnconfirmed);
}

TEST(Confidence, ModelsAndProfiles) {
  EXPECT_EQ(ModelOrDie("A30-24GB").confidence, Confidence::kConfirmed);
  EXPECT_EQ(ModelOrDie("A100-40GB").confidence, Confidence::kConfirmed);
  EXPECT_EQ(ModelOrDie("H100-80GB").confidence, Confidence::kConfirmed);
  EXPECT_EQ(ModelOrDie("B200").confidence, Confidence::kPartial);
  EXPECT_EQ(ModelOrDie("A100-80GB").confidence, Confidence::kPartial);
  // B200 3g.90gb has no lgip row (mig-facts §2.8): its memory is an estimate.
  const GiProfile& b3g = ProfileOrDie(ModelOrDie("B200"), "3g.90gb");
  EXPECT_EQ(b3g.confidence.memory, Confidence::kUnconfirmed);
  EXPECT_EQ(b3g.confidence.Overall(), Confidence::kUnconfirmed);
  // The captured B200 1g row: IDs confirmed, memory moved between drivers.
  const GiProfile& b1g = ProfileOrDie(ModelOrDie("B200"), "1g.23gb");
  EXPECT_EQ(b1g.confidence.ids, Confidence::kConfirmed);
  EXPECT_EQ(b1g.confidence.memory, Confidence::kPartial);
  // A fully confirmed profile.
  EXPECT_EQ(ProfileOrDie(ModelOrDie("A100-40GB"), "3g.20gb").confidence.Overall(),
            Confidence::kConfirmed);
  // Memory overridden per fact.
  EXPECT_EQ(ModelOrDie("A100-40GB").memory_confidence, Confidence::kPartial);
  EXPECT_EQ(ModelOrDie("A100-40GB").sms_confidence, Confidence::kConfirmed);
}

// ------------------------------------------------------------------------------------------------
// Compute-instance profiles, mig-facts §2.11.

void ExpectCi(const CiProfile& ci, const char* name, int id, int max, std::vector<int> starts,
              bool is_default) {
  SCOPED_TRACE(name);
  EXPECT_EQ(ci.name, name);
  EXPECT_EQ(ci.id, id);
  EXPECT_EQ(ci.max_instances, max);
  EXPECT_EQ(ci.starts, starts);
  EXPECT_EQ(ci.is_default, is_default);
  EXPECT_EQ(ci.slices, std::stoi(name));
}

TEST(ComputeInstanceProfiles, TablesPerGiSize) {
  const MigSpec& mig = *ModelOrDie("A100-40GB").mig;
  const std::vector<CiProfile>& one = mig.CiProfilesFor(1);
  ASSERT_EQ(one.size(), 1u);
  ExpectCi(one[0], "1c", 0, 1, {0}, true);
  const std::vector<CiProfile>& two = mig.CiProfilesFor(2);
  ASSERT_EQ(two.size(), 2u);
  ExpectCi(two[0], "1c", 0, 2, {0, 1}, false);
  ExpectCi(two[1], "2c", 1, 1, {0}, true);
  const std::vector<CiProfile>& three = mig.CiProfilesFor(3);
  ASSERT_EQ(three.size(), 3u);
  ExpectCi(three[0], "1c", 0, 3, {0, 1, 2}, false);
  ExpectCi(three[1], "2c", 1, 1, {0}, false);
  ExpectCi(three[2], "3c", 2, 1, {0}, true);
  const std::vector<CiProfile>& four = mig.CiProfilesFor(4);
  ASSERT_EQ(four.size(), 3u);
  ExpectCi(four[0], "1c", 0, 4, {0, 1, 2, 3}, false);
  ExpectCi(four[1], "2c", 1, 2, {0, 2}, false);
  ExpectCi(four[2], "4c", 3, 1, {0}, true);
  const std::vector<CiProfile>& seven = mig.CiProfilesFor(7);
  ASSERT_EQ(seven.size(), 5u);
  ExpectCi(seven[0], "1c", 0, 7, Range(0, 7), false);
  ExpectCi(seven[1], "2c", 1, 3, {0, 2, 4}, false);
  ExpectCi(seven[2], "3c", 2, 2, {0, 4}, false);
  ExpectCi(seven[3], "4c", 3, 1, {0}, false);
  ExpectCi(seven[4], "7c", 4, 1, {0}, true);
  EXPECT_THAT(mig.CiProfilesFor(0), IsEmpty());
  EXPECT_THAT(mig.CiProfilesFor(5), IsEmpty());
  EXPECT_THAT(mig.CiProfilesFor(99), IsEmpty());
}

TEST(ComputeInstanceProfiles, ConfirmedOnRaisesConfidenceOnlyForListedModels) {
  // 4c inside a 7-slice GI is only shown by A100 sources (§2.11): partial there, unconfirmed else.
  auto four_c = [](const GpuModel& model) {
    for (const CiProfile& ci : model.mig->CiProfilesFor(7)) {
      if (ci.name == "4c") return ci.confidence;
    }
    ADD_FAILURE() << model.id << " has no 4c CI in a 7-slice GI";
    return Confidence::kConfirmed;
  };
  EXPECT_EQ(four_c(ModelOrDie("A100-40GB")), Confidence::kPartial);
  EXPECT_EQ(four_c(ModelOrDie("A100-80GB")), Confidence::kPartial);
  EXPECT_EQ(four_c(ModelOrDie("H100-80GB")), Confidence::kUnconfirmed);
  // The A100 3g -lcip capture confirms the 3-slice table.
  for (const CiProfile& ci : ModelOrDie("H100-80GB").mig->CiProfilesFor(3)) {
    EXPECT_EQ(ci.confidence, Confidence::kConfirmed) << ci.name;
  }
}

TEST(ComputeInstanceProfiles, A30AndRtxProHaveNoSevenSliceTable) {
  EXPECT_THAT(ModelOrDie("A30-24GB").mig->CiProfilesFor(7), IsEmpty());
  EXPECT_THAT(ModelOrDie("RTX-PRO-6000-Blackwell").mig->CiProfilesFor(4), Not(IsEmpty()));
}

// ------------------------------------------------------------------------------------------------
// The strict loader, on small inline catalogs.

// A minimal valid catalog: one MIG model (2 units) and, optionally, a second non-MIG model.
const char* const kModel = R"(version: 1
gpus:
- id: TEST-GPU
  display_name: "Test GPU"
  aliases: [testgpu-alias]
  nvml_names: ["Test NVML Name"]
  pci_device_ids: ["0xABC0"]
  architecture: Testarch
  chip: T100
  compute_capability: "9.0"
  memory_mib: 16384
  sms: 100
  confidence: confirmed
  sources: ["unit test"]
  mig:
    compute_slices: 2
    placement_units: 2
    sms: 100
    min_driver: "525.85.12"
    default_placement: {confidence: unconfirmed, note: "test"}
    balanced: ["1g.8gb", "1g.8gb"]
    profiles:
    - {name: 1g.8gb, smi_id: 19, nvml_const: 1_SLICE, compute_slices: 1, placement_size: 1, memory_mib: 8128, sms: 50,
       engines: {ce: 1, dec: 0, enc: 0, jpeg: 0, ofa: 0}, max_instances: 2, starts: [0, 1], confidence: confirmed}
    - {name: 2g.16gb, smi_id: 14, nvml_const: 2_SLICE, compute_slices: 2, placement_size: 2, memory_mib: 16256, sms: 100,
       engines: {ce: 2, dec: 1, enc: 0, jpeg: 1, ofa: 1}, max_instances: 1, starts: [0],
       confidence: {default: confirmed, memory: partial}}
)";

const char* const kSecondModel = R"(- id: TEST-GPU-2
  display_name: "Test GPU Two"
  aliases: [other-alias]
  nvml_names: ["Test NVML Two"]
  pci_device_ids: ["0xABC1"]
  architecture: Testarch
  chip: T200
  compute_capability: "9.0"
  memory_mib: 8192
  sms: 50
  confidence: partial
  sources: ["unit test"]
)";

// `text` with the first occurrence of `from` replaced by `to` (the test fails if absent).
std::string Replace(std::string text, std::string_view from, std::string_view to) {
  const size_t at = text.find(from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "'" << from << "' not in the test YAML";
    return text;
  }
  return text.replace(at, from.size(), to);
}

// 1-based line of the first occurrence of `needle`.
int LineOf(const std::string& text, std::string_view needle) {
  const size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  return 1 + static_cast<int>(
                 std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

absl::Status LoadError(const std::string& yaml) {
  absl::StatusOr<Catalog> catalog = Catalog::FromYaml(yaml, "test.yaml");
  return catalog.status();
}

TEST(CatalogLoader, MinimalCatalogLoads) {
  absl::StatusOr<Catalog> catalog = Catalog::FromYaml(std::string(kModel) + kSecondModel, "t.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  ASSERT_EQ(catalog->models().size(), 2u);
  const GpuModel& model = catalog->models()[0];
  EXPECT_EQ(model.id, "TEST-GPU");
  EXPECT_THAT(model.pci_device_ids, ElementsAre(0xABC0));
  EXPECT_EQ(model.memory_mib, 16384);
  ASSERT_TRUE(model.mig);
  EXPECT_EQ(model.mig->placement_units, 2);
  EXPECT_EQ(model.mig->min_driver_branch, 525);
  EXPECT_EQ(model.mig->min_driver, "525.85.12");
  EXPECT_EQ(model.mig->default_placement_confidence, Confidence::kUnconfirmed);
  ASSERT_EQ(model.mig->profiles.size(), 2u);
  // Absent default_order means "lowest free start first".
  EXPECT_THAT(model.mig->profiles[0].default_order, ElementsAre(0, 1));
  EXPECT_EQ(model.mig->profiles[1].confidence.memory, Confidence::kPartial);
  EXPECT_EQ(model.mig->profiles[1].confidence.ids, Confidence::kConfirmed);
  EXPECT_EQ(model.mig->profiles[1].nvml_const_name, "NVML_GPU_INSTANCE_PROFILE_2_SLICE");
  // Without its own CI table, a user file gets the built-in one.
  ASSERT_EQ(model.mig->CiProfilesFor(2).size(), 2u);
  EXPECT_TRUE(model.mig->CiProfilesFor(2)[1].is_default);
  EXPECT_FALSE(catalog->models()[1].mig_capable());
  EXPECT_EQ(catalog->models()[1].confidence, Confidence::kPartial);
  EXPECT_EQ(catalog->Find("0xabc1")->id, "TEST-GPU-2");
  EXPECT_EQ(catalog->Find("testgpu alias")->id, "TEST-GPU");
}

TEST(CatalogLoader, UnknownKeyNamesLineAndPath) {
  const std::string yaml = Replace(kModel, "  chip: T100\n", "  chip: T100\n  colour: red\n");
  const absl::Status status = LoadError(yaml);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("test.yaml:" + std::to_string(LineOf(yaml, "colour"))));
  EXPECT_THAT(status.message(), HasSubstr("gpus[0].colour"));
  EXPECT_THAT(status.message(), HasSubstr("unknown field"));
}

TEST(CatalogLoader, UnknownKeyInsideProfile) {
  const std::string yaml = Replace(kModel, "memory_mib: 16256,", "memory_mib: 16256, bogus: 3,");
  const absl::Status status = LoadError(yaml);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("gpus[0].mig.profiles[1].bogus"));
  EXPECT_THAT(status.message(), HasSubstr("test.yaml:" + std::to_string(LineOf(yaml, "bogus"))));
}

TEST(CatalogLoader, UnknownTopLevelKey) {
  const std::string yaml = Replace(kModel, "version: 1\n", "version: 1\nextras: true\n");
  const absl::Status status = LoadError(yaml);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), AllOf(HasSubstr("test.yaml:2"), HasSubstr("extras")));
}

TEST(CatalogLoader, WrongTypes) {
  {
    const std::string yaml = Replace(kModel, "memory_mib: 16384", "memory_mib: lots");
    const absl::Status status = LoadError(yaml);
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("gpus[0].memory_mib"));
    EXPECT_THAT(status.message(), HasSubstr("lots"));
    EXPECT_THAT(status.message(),
                HasSubstr("test.yaml:" + std::to_string(LineOf(yaml, "memory_mib: lots"))));
  }
  {
    const absl::Status status =
        LoadError(Replace(kModel, "aliases: [testgpu-alias]", "aliases: 5"));
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("gpus[0].aliases"));
  }
  {
    const absl::Status status =
        LoadError(Replace(kModel, "max_instances: 2", "max_instances: [2]"));
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("gpus[0].mig.profiles[0].max_instances"));
  }
  {
    const absl::Status status = LoadError(
        Replace(kModel, "confidence: confirmed\n  sources", "confidence: sure\n  sources"));
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("gpus[0].confidence"));
  }
}

TEST(CatalogLoader, MissingRequiredField) {
  const absl::Status status = LoadError(Replace(kModel, "  chip: T100\n", ""));
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), AllOf(HasSubstr("gpus[0].chip"), HasSubstr("missing")));
}

TEST(CatalogLoader, PlacementPastTheGrid) {
  const std::string yaml = Replace(kModel,
                                   "placement_size: 2, memory_mib: 16256, sms: 100,\n"
                                   "       engines: {ce: 2, dec: 1, enc: 0, jpeg: 1, ofa: 1}, "
                                   "max_instances: 1, starts: [0]",
                                   "placement_size: 2, memory_mib: 16256, sms: 100,\n"
                                   "       engines: {ce: 2, dec: 1, enc: 0, jpeg: 1, ofa: 1}, "
                                   "max_instances: 1, starts: [0, 1]");
  const absl::Status status = LoadError(yaml);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("gpus[0].mig.profiles[1].starts"));
  EXPECT_THAT(status.message(), HasSubstr("runs past"));
}

TEST(CatalogLoader, StartOutsideTheGrid) {
  const absl::Status status = LoadError(Replace(kModel, "starts: [0, 1]", "starts: [0, 2]"));
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("gpus[0].mig.profiles[0].starts"));
}

TEST(CatalogLoader, DefaultOrderMustBePermutationOfStarts) {
  for (const char* order : {"[1]", "[1, 1]", "[0, 1, 1]"}) {
    SCOPED_TRACE(order);
    const absl::Status status = LoadError(Replace(
        kModel, "starts: [0, 1],", std::string("starts: [0, 1], default_order: ") + order + ","));
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), AllOf(HasSubstr("gpus[0].mig.profiles[0].default_order"),
                                        HasSubstr("permutation")));
  }
  absl::StatusOr<Catalog> ok = Catalog::FromYaml(
      Replace(kModel, "starts: [0, 1],", "starts: [0, 1], default_order: [1, 0],"), "t.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(ok->models()[0].mig->profiles[0].default_order, ElementsAre(1, 0));
}

TEST(CatalogLoader, DuplicateAliasAcrossModels) {
  for (const char* alias : {"testgpu-alias", "TESTGPU_ALIAS", "Test GPU"}) {
    SCOPED_TRACE(alias);
    const std::string second = Replace(kSecondModel, "aliases: [other-alias]",
                                       std::string("aliases: [\"") + alias + "\"]");
    const absl::Status status = LoadError(std::string(kModel) + second);
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("TEST-GPU-2"), HasSubstr("already used by TEST-GPU")));
  }
}

TEST(CatalogLoader, PciIdCollision) {
  const std::string second = Replace(kSecondModel, "\"0xABC1\"", "\"0xabc0\"");
  const absl::Status status = LoadError(std::string(kModel) + second);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), AllOf(HasSubstr("0xABC0"), HasSubstr("TEST-GPU")));
}

TEST(CatalogLoader, BadPciId) {
  const absl::Status status = LoadError(Replace(kModel, "\"0xABC0\"", "\"0xABC\""));
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("pci_device_ids"));
}

TEST(CatalogLoader, NvmlConstMustMatchMediaVariant) {
  {
    // A "+me" name needs a *_REV1 constant.
    const absl::Status status = LoadError(Replace(kModel, "name: 1g.8gb,", "name: 1g.8gb+me,"));
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("gpus[0].mig.profiles[0].nvml_const"), HasSubstr("1g.8gb+me")));
  }
  {
    // And a plain name may not use one.
    const absl::Status status =
        LoadError(Replace(kModel, "nvml_const: 1_SLICE,", "nvml_const: 1_SLICE_REV1,"));
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("nvml_const"));
  }
  {
    const absl::Status status =
        LoadError(Replace(kModel, "nvml_const: 1_SLICE,", "nvml_const: 9_SLICE,"));
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("unknown NVML"));
  }
  // "+me" with the REV1 constant is fine and is a kMe profile.
  const std::string me = Replace(Replace(kModel, "name: 1g.8gb,", "name: 1g.8gb+me,"),
                                 "nvml_const: 1_SLICE,", "nvml_const: 1_SLICE_REV1,");
  absl::StatusOr<Catalog> ok = Catalog::FromYaml(
      Replace(me, "balanced: [\"1g.8gb\", \"1g.8gb\"]", "balanced: [\"2g.16gb\"]"), "t.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->models()[0].mig->profiles[0].variant, MediaVariant::kMe);
  EXPECT_EQ(ok->models()[0].mig->profiles[0].nvml_const, 7);
  // A balanced layout naming a profile the model does not have is an error.
  const absl::Status balanced = LoadError(me);
  ASSERT_EQ(balanced.code(), absl::StatusCode::kInvalidArgument) << balanced;
  EXPECT_THAT(balanced.message(), AllOf(HasSubstr("gpus[0].mig.balanced"), HasSubstr("1g.8gb")));
}

TEST(CatalogLoader, UnsupportedVersion) {
  for (const char* version : {"version: 2\n", "version: 0\n"}) {
    const absl::Status status = LoadError(Replace(kModel, "version: 1\n", version));
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("version"));
  }
}

TEST(CatalogLoader, InvalidYamlSyntax) {
  const absl::Status status =
      LoadError(Replace(kModel, "aliases: [testgpu-alias]", "aliases: [oops"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("test.yaml"));
}

TEST(CatalogLoader, DuplicateProfileNameOrIdWithinModel) {
  const absl::Status same_id = LoadError(Replace(kModel, "smi_id: 14", "smi_id: 19"));
  ASSERT_EQ(same_id.code(), absl::StatusCode::kInvalidArgument) << same_id;
  EXPECT_THAT(same_id.message(), HasSubstr("smi_id"));
  const absl::Status more_slices = LoadError(Replace(kModel, "compute_slices: 2, placement_size: 2",
                                                     "compute_slices: 3, placement_size: 2"));
  EXPECT_EQ(more_slices.code(), absl::StatusCode::kInvalidArgument) << more_slices;
}

TEST(CatalogLoader, CiTableNeedsExactlyOneDefault) {
  const std::string table = R"(compute_instance_profiles:
  "1":
    - {name: 1c, id: 0, slices: 1, max: 1, starts: [0], confidence: confirmed}
  "2":
    - {name: 1c, id: 0, slices: 1, max: 2, starts: [0, 1], confidence: partial}
    - {name: 2c, id: 1, slices: 2, max: 1, starts: [0], default: true, confidence: confirmed}
)";
  const std::string yaml = Replace(kModel, "gpus:\n", table + "gpus:\n");
  const absl::Status status = LoadError(yaml);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("compute_instance_profiles.1"), HasSubstr("default")));
  // With a default on the 1-slice table it loads and uses this table.
  absl::StatusOr<Catalog> ok =
      Catalog::FromYaml(Replace(yaml, "starts: [0], confidence: confirmed}",
                                "starts: [0], default: true, confidence: confirmed}"),
                        "t.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->models()[0].mig->CiProfilesFor(1).size(), 1u);
}

// ------------------------------------------------------------------------------------------------
// Merge.

TEST(CatalogMerge, ExistingIdReplacesModel) {
  Catalog catalog = Builtin();
  const size_t before = catalog.models().size();
  const auto position = [](const Catalog& c, std::string_view id) {
    for (size_t i = 0; i < c.models().size(); ++i) {
      if (c.models()[i].id == id) return i;
    }
    return c.models().size();
  };
  const size_t a100_at = position(catalog, "A100-40GB");
  const std::string yaml =
      Replace(Replace(kModel, "id: TEST-GPU", "id: A100-40GB"), "\"0xABC0\"", "\"0x20B0\"");
  absl::StatusOr<Catalog> user = Catalog::FromYaml(yaml, "user.yaml");
  ASSERT_TRUE(user.ok()) << user.status();
  ASSERT_TRUE(catalog.Merge(*user).ok());
  EXPECT_EQ(catalog.models().size(), before);
  EXPECT_EQ(position(catalog, "A100-40GB"), a100_at);
  const GpuModel* replaced = catalog.Find("A100-40GB");
  ASSERT_NE(replaced, nullptr);
  EXPECT_EQ(replaced->memory_mib, 16384);
  EXPECT_EQ(replaced->mig->profiles.size(), 2u);
  EXPECT_EQ(catalog.Find("0x20B0"), replaced);
  // The old entry's aliases went with it; the built-in catalog is unchanged.
  EXPECT_EQ(catalog.Find("a100-sxm4-40gb"), nullptr);
  EXPECT_EQ(Builtin().Find("A100-40GB")->memory_mib, 40960);
}

TEST(CatalogMerge, NewIdIsAdded) {
  Catalog catalog = Builtin();
  const size_t before = catalog.models().size();
  absl::StatusOr<Catalog> user = Catalog::FromYaml(kModel, "user.yaml");
  ASSERT_TRUE(user.ok()) << user.status();
  ASSERT_TRUE(catalog.Merge(*user).ok());
  EXPECT_EQ(catalog.models().size(), before + 1);
  ASSERT_NE(catalog.Find("TEST-GPU"), nullptr);
  EXPECT_EQ(catalog.Find("0xABC0")->id, "TEST-GPU");
  EXPECT_EQ(catalog.Find("h100")->id, "H100-80GB");
}

TEST(CatalogMerge, CollisionFailsAndLeavesCatalogUnchanged) {
  Catalog catalog = Builtin();
  const size_t before = catalog.models().size();
  {
    absl::StatusOr<Catalog> user =
        Catalog::FromYaml(Replace(kModel, "aliases: [testgpu-alias]", "aliases: [h100]"), "u.yaml");
    ASSERT_TRUE(user.ok()) << user.status();
    const absl::Status status = catalog.Merge(*user);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("H100-80GB"));
  }
  {
    absl::StatusOr<Catalog> user =
        Catalog::FromYaml(Replace(kModel, "\"0xABC0\"", "\"0x2330\""), "u.yaml");
    ASSERT_TRUE(user.ok()) << user.status();
    EXPECT_FALSE(catalog.Merge(*user).ok());
  }
  EXPECT_EQ(catalog.models().size(), before);
  EXPECT_EQ(catalog.Find("TEST-GPU"), nullptr);
  EXPECT_EQ(catalog.Find("h100")->id, "H100-80GB");
}

}  // namespace
}  // namespace gpuslice::hw
