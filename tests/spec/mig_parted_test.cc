// Tests of the mig-parted config format: parsing (with every error located), writing and reading
// back, selecting a config and the entry of a GPU, and resolving entries against the built-in
// catalog.
#include "gpuslice/spec/mig_parted.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gpuslice/hw/catalog.h"
#include "test_util.h"

namespace gpuslice::spec {
namespace {

using gpuslice::testing::Model;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The example of ../shared/reference/mig-facts.md §5.1.
constexpr std::string_view kFactsExample = R"(version: v1
mig-configs:
  inference-mix:
    - device-filter: ["0x233010DE"]   # H100 SXM5 only
      devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    - devices: [2, 3]
      mig-enabled: false
)";

// The structure of mig-parted's shipped deployments/systemd/config-default.yaml (own fixture):
// all-disabled, all-enabled, per-profile all-<profile> configs (one with a device filter per GPU
// family because the count differs) and all-balanced with one entry per device-filter group.
constexpr std::string_view kDefaultConfigs = R"(version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  # A100-40GB
  all-1g.5gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7

  all-1g.10gb:
    # H100-80GB, H800-80GB, A100-80GB, A800-80GB: seven single-slice instances
    - device-filter: ["0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE", "0x232410DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7

    # A100-40GB, A800-40GB: the double-memory 1g, four of them
    - device-filter: ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 4

  all-1g.10gb.me:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb+me": 1

  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2

  all-7g.80gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "7g.80gb": 1

  all-1g.6gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.6gb": 4

  all-balanced:
    # H100 NVL, H800 NVL
    - device-filter: ["0x232110DE", "0x233A10DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.12gb": 2
        "2g.24gb": 1
        "3g.47gb": 1

    # H100-80GB, H800-80GB, A100-80GB, A800-80GB
    - device-filter: ["0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE", "0x232410DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1

    # A100-40GB, A800-40GB
    - device-filter: ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1

    # A30-24GB (a single filter written as a string)
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.6gb": 2
        "2g.12gb": 1
)";

MigConfigFile MustParse(std::string_view text) {
  absl::StatusOr<MigConfigFile> file = ParseMigPartedConfig(text, "test.yaml");
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *std::move(file) : MigConfigFile{};
}

const std::vector<ConfigEntry>& MustSelect(const MigConfigFile& file, std::string_view name) {
  absl::StatusOr<const std::vector<ConfigEntry>*> entries = SelectConfig(file, name);
  EXPECT_TRUE(entries.ok()) << entries.status();
  static const std::vector<ConfigEntry> kEmpty;
  return entries.ok() ? **entries : kEmpty;
}

// Equality of two files, ignoring the line numbers.
void ExpectSameFile(const MigConfigFile& a, const MigConfigFile& b) {
  ASSERT_EQ(a.configs.size(), b.configs.size());
  for (size_t c = 0; c < a.configs.size(); ++c) {
    EXPECT_EQ(a.configs[c].first, b.configs[c].first);
    ASSERT_EQ(a.configs[c].second.size(), b.configs[c].second.size()) << a.configs[c].first;
    for (size_t e = 0; e < a.configs[c].second.size(); ++e) {
      const ConfigEntry& x = a.configs[c].second[e];
      const ConfigEntry& y = b.configs[c].second[e];
      SCOPED_TRACE(a.configs[c].first + "[" + std::to_string(e) + "]");
      EXPECT_EQ(x.device_filter, y.device_filter);
      EXPECT_EQ(x.devices, y.devices);
      EXPECT_EQ(x.mig_enabled, y.mig_enabled);
      EXPECT_EQ(x.mig_devices, y.mig_devices);
      EXPECT_EQ(x.placements, y.placements);
    }
  }
}

// Profile names of resolved GIs, e.g. {"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"}.
std::vector<std::string> GiNames(const hw::GpuModel& model, const std::vector<DesiredGi>& gis) {
  std::vector<std::string> names;
  for (const DesiredGi& gi : gis) {
    names.push_back(model.mig->profiles[static_cast<size_t>(gi.profile)].name);
  }
  return names;
}

int CiIndex(const hw::GpuModel& model, int gi_slices, std::string_view name) {
  const auto& cis = model.mig->CiProfilesFor(gi_slices);
  for (size_t i = 0; i < cis.size(); ++i) {
    if (cis[i].name == name) return static_cast<int>(i);
  }
  ADD_FAILURE() << "no CI profile " << name;
  return -1;
}

ConfigEntry Enabled(std::vector<MigDevice> devices, std::vector<std::string> placements = {}) {
  ConfigEntry entry;
  entry.devices.all = true;
  entry.mig_enabled = true;
  entry.mig_devices = std::move(devices);
  entry.placements = std::move(placements);
  entry.line = 42;
  return entry;
}

// ------------------------------------------------------------------------------------ parsing

TEST(MigPartedParse, FactsExample) {
  const MigConfigFile file = MustParse(kFactsExample);
  ASSERT_EQ(file.configs.size(), 1u);
  EXPECT_EQ(file.configs[0].first, "inference-mix");
  const std::vector<ConfigEntry>& entries = file.configs[0].second;
  ASSERT_EQ(entries.size(), 2u);

  EXPECT_THAT(entries[0].device_filter, ElementsAre(0x233010DEu));
  EXPECT_FALSE(entries[0].devices.all);
  EXPECT_THAT(entries[0].devices.indices, ElementsAre(0, 1));
  EXPECT_TRUE(entries[0].mig_enabled);
  EXPECT_THAT(entries[0].mig_devices, ElementsAre(MigDevice{"3g.40gb", 1}, MigDevice{"2g.20gb", 1},
                                                  MigDevice{"1g.10gb", 2}));
  EXPECT_TRUE(entries[0].placements.empty());
  EXPECT_EQ(entries[0].line, 4);

  EXPECT_TRUE(entries[1].device_filter.empty());
  EXPECT_THAT(entries[1].devices.indices, ElementsAre(2, 3));
  EXPECT_FALSE(entries[1].mig_enabled);
  EXPECT_TRUE(entries[1].mig_devices.empty());
  EXPECT_EQ(entries[1].line, 8);
}

TEST(MigPartedParse, DefaultConfigsStructure) {
  const MigConfigFile file = MustParse(kDefaultConfigs);
  std::vector<std::string> names;
  for (const auto& [name, entries] : file.configs) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("all-disabled", "all-enabled", "all-1g.5gb", "all-1g.10gb",
                                 "all-1g.10gb.me", "all-3g.40gb", "all-7g.80gb", "all-1g.6gb",
                                 "all-balanced"));
  const ConfigEntry& disabled = MustSelect(file, "all-disabled")[0];
  EXPECT_TRUE(disabled.devices.all);
  EXPECT_FALSE(disabled.mig_enabled);
  const ConfigEntry& enabled = MustSelect(file, "all-enabled")[0];
  EXPECT_TRUE(enabled.mig_enabled);
  EXPECT_TRUE(enabled.mig_devices.empty());
  const std::vector<ConfigEntry>& balanced = MustSelect(file, "all-balanced");
  ASSERT_EQ(balanced.size(), 4u);
  EXPECT_EQ(balanced[1].device_filter.size(), 8u);
  EXPECT_THAT(balanced[3].device_filter, ElementsAre(0x20B710DEu));  // the string form
  EXPECT_EQ(MustSelect(file, "all-1g.10gb.me")[0].mig_devices[0].name, "1g.10gb+me");
}

TEST(MigPartedParse, AcceptsJsonAndFilterSpellings) {
  const MigConfigFile file = MustParse(R"({
  "version": "v1",
  "mig-configs": {
    "custom": [
      {"device-filter": ["0x233010de", "0X20B710DE"], "devices": [3], "mig-enabled": true,
       "mig-devices": {"1c.3g.40gb": 3, "4g.40gb": 1}, "gpuslice-placements": ["4g.40gb@0", "3g.40gb@4"]},
      {"device-filter": 0x232110DE, "devices": "all", "mig-enabled": false, "mig-devices": {}}
    ]
  }
})");
  const std::vector<ConfigEntry>& entries = MustSelect(file, "custom");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_THAT(entries[0].device_filter, ElementsAre(0x233010DEu, 0x20B710DEu));
  EXPECT_THAT(entries[0].mig_devices,
              ElementsAre(MigDevice{"1c.3g.40gb", 3}, MigDevice{"4g.40gb", 1}));
  EXPECT_THAT(entries[0].placements, ElementsAre("4g.40gb@0", "3g.40gb@4"));
  EXPECT_EQ(entries[0].line, 5);
  EXPECT_THAT(entries[1].device_filter, ElementsAre(0x232110DEu));
  EXPECT_TRUE(entries[1].devices.all);
  EXPECT_FALSE(entries[1].mig_enabled);
  EXPECT_EQ(entries[1].line, 7);
}

TEST(MigPartedParse, ProfileNameSyntax) {
  for (std::string_view good :
       {"1g.5gb", "1g.10gb", "7g.80gb", "1g.10gb+me", "1g.24gb+me.all", "2g.48gb+gfx", "1g.24gb-me",
        "1c.3g.40gb", "2c.7g.80gb", "1c.1g.10gb+me", "4g.96gb+gfx", "7g.278gb"}) {
    EXPECT_TRUE(IsValidMigDeviceName(good)) << good;
  }
  for (std::string_view bad : {"",
                               "1g",
                               "1g.10",
                               "1g.10gbb",
                               "1g10gb",
                               "g.10gb",
                               "1g.10gb+",
                               "1g.10gb+foo",
                               "1g.10gb+me.",
                               "1g.10gb+me.all.x",
                               "1g.10gb-gfx",
                               "c1.1g.10gb",
                               "1c1g.10gb",
                               "1c.1g",
                               "0g.5gb",
                               "01g.5gb",
                               "1g.0gb",
                               "1g.10GB",
                               "MIG 1g.10gb",
                               " 1g.10gb",
                               "1g.10gb ",
                               "1c.2c.3g.40gb",
                               "-1g.10gb"}) {
    EXPECT_FALSE(IsValidMigDeviceName(bad)) << bad;
  }
}

TEST(MigPartedParse, DeviceFilterIds) {
  EXPECT_EQ(ParseDeviceFilterId("0x233010DE"), 0x233010DEu);
  EXPECT_EQ(ParseDeviceFilterId("0x233010de"), 0x233010DEu);
  EXPECT_EQ(ParseDeviceFilterId("0X20b710De"), 0x20B710DEu);
  for (std::string_view bad : {"", "0x", "0x2330", "233010DE", "0x233010DEE", "0x233010DG",
                               "0x 33010DE", "1x233010DE", "0x233010DE:0x00001234"}) {
    EXPECT_FALSE(ParseDeviceFilterId(bad).has_value()) << bad;
  }
  EXPECT_EQ(FormatDeviceFilterId(0x20b710de), "0x20B710DE");
  EXPECT_EQ(FullDeviceId(0x2330), 0x233010DEu);
}

// Each case: the text, then the exact start of the error message (origin:line: field: ...) and a
// part of the explanation.
struct ErrorCase {
  std::string text;
  std::string location;
  std::string message;
};

constexpr std::string_view kHead = "version: v1\nmig-configs:\n  c:\n";  // entries start at line 4

ErrorCase Entry(std::string entry_lines, std::string location, std::string message) {
  return {std::string(kHead) + entry_lines, std::move(location), std::move(message)};
}

TEST(MigPartedParse, ErrorsNameTheLineAndField) {
  const std::vector<ErrorCase> cases = {
      // Top level.
      {"", "test.yaml: ", "expected a mapping with 'version: v1'"},
      {"mig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n",
       "test.yaml:1: version:", "required field is missing"},
      {"version: v2\nmig-configs: {}\n", "test.yaml:1: version:", "unsupported version 'v2'"},
      {"version: 1\nmig-configs: {}\n", "test.yaml:1: version:", "unsupported version '1'"},
      {"version: v1\nmig-config: {}\n", "test.yaml:2: mig-config:", "unknown field"},
      {"version: v1\n", "test.yaml:1: mig-configs:", "required field is missing"},
      {"version: v1\nmig-configs: []\n", "test.yaml:2: mig-configs:", "expected a mapping"},
      {"version: v1\nmig-configs: {}\n", "test.yaml:2: mig-configs:", "at least one config"},
      {"version: v1\nmig-configs:\n  c: []\n",
       "test.yaml:3: mig-configs.c:", "at least one entry is required"},
      {"version: v1\nmig-configs:\n  c:\n", "test.yaml:3: mig-configs.c:", "expected a list"},
      {"version: v1\nmig-configs:\n  c: {devices: all}\n",
       "test.yaml:3: mig-configs.c:", "expected a list"},
      {"version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n"
       "  c:\n    - devices: all\n      mig-enabled: false\n",
       "test.yaml:6: mig-configs.c:", "duplicate key"},
      {"version: v1\nmig-configs: [\n", "test.yaml:", ""},
      // Entries.
      Entry("    - devices: all\n      mig-enabled: false\n      mig-device: {}\n",
            "test.yaml:6: mig-configs.c[0].mig-device:", "unknown field"),
      Entry("    - devices: all\n      mig-enabled: false\n    - devices: all\n"
            "      mig-enabled: true\n      mig-devices: {}\n      extra: 1\n",
            "test.yaml:9: mig-configs.c[1].extra:", "unknown field"),
      Entry("    - mig-enabled: false\n",
            "test.yaml:4: mig-configs.c[0].devices:", "required field is missing"),
      Entry("    - devices: some\n      mig-enabled: false\n",
            "test.yaml:4: mig-configs.c[0].devices:", "expected 'all' or a list"),
      Entry("    - devices: {a: 1}\n      mig-enabled: false\n",
            "test.yaml:4: mig-configs.c[0].devices:", "expected 'all' or a list"),
      Entry("    - devices:\n        - 0\n        - -1\n      mig-enabled: false\n",
            "test.yaml:6: mig-configs.c[0].devices[1]:", "outside"),
      Entry("    - devices: [0, x]\n      mig-enabled: false\n",
            "test.yaml:4: mig-configs.c[0].devices[1]:", "expected an integer"),
      Entry("    - devices:\n        - 1\n        - 1\n      mig-enabled: false\n",
            "test.yaml:6: mig-configs.c[0].devices[1]:", "listed twice"),
      Entry("    - devices: all\n",
            "test.yaml:4: mig-configs.c[0].mig-enabled:", "required field is missing"),
      Entry("    - devices: all\n      mig-enabled: maybe\n",
            "test.yaml:5: mig-configs.c[0].mig-enabled:", "expected true or false"),
      Entry("    - devices: all\n      mig-enabled: true\n",
            "test.yaml:4: mig-configs.c[0].mig-devices:", "required when mig-enabled is true"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices:\n",
            "test.yaml:6: mig-configs.c[0].mig-devices:", "required when mig-enabled is true"),
      Entry("    - devices: all\n      mig-enabled: false\n      mig-devices:\n"
            "        \"1g.10gb\": 1\n",
            "test.yaml:7: mig-configs.c[0].mig-devices:", "must be absent or empty"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices: [\"1g.10gb\"]\n",
            "test.yaml:6: mig-configs.c[0].mig-devices:", "expected a mapping"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
            "        \"1g.10gb\": 0\n",
            "test.yaml:7: mig-configs.c[0].mig-devices.1g.10gb:", "positive integer, got 0"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
            "        \"2g.20gb\": 1\n        \"1g.10gb\": -2\n",
            "test.yaml:8: mig-configs.c[0].mig-devices.1g.10gb:", "positive integer, got -2"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
            "        \"1g.10gb\": two\n",
            "test.yaml:7: mig-configs.c[0].mig-devices.1g.10gb:", "expected an integer"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
            "        \"1g.10gb\": 1\n        \"1g.10gbb\": 1\n",
            "test.yaml:8: mig-configs.c[0].mig-devices.1g.10gbb:", "invalid MIG device name"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
            "        \"1g.10gb+mee\": 1\n",
            "test.yaml:7: mig-configs.c[0].mig-devices.1g.10gb+mee:", "invalid MIG device name"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
            "        \"1g.10gb\": 1\n        \"1g.10gb\": 2\n",
            "test.yaml:8: mig-configs.c[0].mig-devices.1g.10gb:", "duplicate key"),
      Entry("    - device-filter: \"0x2330\"\n      devices: all\n      mig-enabled: false\n",
            "test.yaml:4: mig-configs.c[0].device-filter:", "invalid device id '0x2330'"),
      Entry("    - device-filter:\n        - \"0x233010DE\"\n        - \"233110DE\"\n"
            "      devices: all\n      mig-enabled: false\n",
            "test.yaml:6: mig-configs.c[0].device-filter[1]:", "invalid device id '233110DE'"),
      Entry("    - device-filter: [\"0x233010DE\", \"0x233010de\"]\n      devices: all\n"
            "      mig-enabled: false\n",
            "test.yaml:4: mig-configs.c[0].device-filter[1]:", "listed twice"),
      Entry("    - device-filter: {id: \"0x233010DE\"}\n      devices: all\n"
            "      mig-enabled: false\n",
            "test.yaml:4: mig-configs.c[0].device-filter:", "expected a device id or a list"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 1}\n"
            "      gpuslice-placements: [\"3g.40gb\"]\n",
            "test.yaml:7: mig-configs.c[0].gpuslice-placements[0]:", "invalid placement"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1c.3g.40gb\": 1}\n"
            "      gpuslice-placements: [\"1c.3g.40gb@0\"]\n",
            "test.yaml:7: mig-configs.c[0].gpuslice-placements[0]:", "invalid placement"),
      Entry("    - devices: all\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 1}\n"
            "      gpuslice-placements: \"3g.40gb@0\"\n",
            "test.yaml:7: mig-configs.c[0].gpuslice-placements:", "expected a list"),
      Entry("    - devices: all\n      mig-enabled: false\n"
            "      gpuslice-placements: [\"3g.40gb@0\"]\n",
            "test.yaml:6: mig-configs.c[0].gpuslice-placements:", "must be absent or empty"),
  };
  for (const ErrorCase& error_case : cases) {
    SCOPED_TRACE(error_case.text);
    absl::StatusOr<MigConfigFile> file = ParseMigPartedConfig(error_case.text, "test.yaml");
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(file.status().message());
    EXPECT_EQ(message.substr(0, error_case.location.size()), error_case.location) << message;
    EXPECT_THAT(message, HasSubstr(error_case.message));
  }
}

TEST(MigPartedParse, DisabledEntryMayHaveEmptyMigDevices) {
  const MigConfigFile file = MustParse(
      "version: v1\nmig-configs:\n  c:\n    - devices: []\n      mig-enabled: false\n"
      "      mig-devices: {}\n");
  const ConfigEntry& entry = MustSelect(file, "c")[0];
  EXPECT_FALSE(entry.devices.all);
  EXPECT_TRUE(entry.devices.indices.empty());
  EXPECT_TRUE(entry.mig_devices.empty());
}

// ------------------------------------------------------------------------------------ writing

TEST(MigPartedWrite, RoundTripsYamlAndJson) {
  for (std::string_view text : {kFactsExample, kDefaultConfigs}) {
    const MigConfigFile file = MustParse(text);
    for (OutputFormat format : {OutputFormat::kYaml, OutputFormat::kJson}) {
      const std::string written = WriteMigPartedConfig(file, format);
      SCOPED_TRACE(written);
      const MigConfigFile again = MustParse(written);
      ExpectSameFile(file, again);
      EXPECT_EQ(WriteMigPartedConfig(again, format), written);
    }
  }
}

TEST(MigPartedWrite, YamlLooksLikeMigParted) {
  const MigConfigFile file = MustParse(kDefaultConfigs);
  const std::string yaml = WriteMigPartedConfig(file, OutputFormat::kYaml);
  EXPECT_EQ(yaml.substr(0, 25), "version: v1\nmig-configs:\n");
  EXPECT_THAT(yaml, HasSubstr("  all-disabled:\n    - devices: all\n      mig-enabled: false\n"));
  EXPECT_THAT(yaml, HasSubstr("      mig-devices: {}\n"));
  EXPECT_THAT(yaml, HasSubstr("    - device-filter: \"0x20B710DE\"\n"));
  EXPECT_THAT(yaml,
              HasSubstr("      mig-devices:\n        \"1g.6gb\": 2\n        \"2g.12gb\": 1\n"));
  const std::string json = WriteMigPartedConfig(file, OutputFormat::kJson);
  EXPECT_THAT(json, HasSubstr("\"version\": \"v1\""));
  EXPECT_THAT(json, HasSubstr("\"device-filter\": [\"0x20B010DE\", \"0x20B110DE\""));
}

TEST(MigPartedWrite, QuotesConfigNamesThatNeedIt) {
  MigConfigFile file;
  ConfigEntry off;
  off.devices.indices = {0, 3};
  for (std::string name : {"true", "7g", "a: b", "with \"quote\"", "no", "#x", "ok-name.1"}) {
    file.configs.emplace_back(name, std::vector<ConfigEntry>{off});
  }
  for (OutputFormat format : {OutputFormat::kYaml, OutputFormat::kJson}) {
    const std::string written = WriteMigPartedConfig(file, format);
    SCOPED_TRACE(written);
    ExpectSameFile(file, MustParse(written));
  }
}

// The distinct values of `values`, in first-seen order.
template <typename T>
std::vector<T> Unique(const std::vector<T>& values) {
  std::vector<T> out;
  for (const T& value : values) {
    if (std::find(out.begin(), out.end(), value) == out.end()) out.push_back(value);
  }
  return out;
}

// Random files survive Write -> Parse in both formats.
RC_GTEST_PROP(MigPartedWrite, RandomFilesRoundTrip, ()) {
  const auto name_gen =
      rc::gen::container<std::string>(rc::gen::elementOf(std::string("abz09-._ :\"#'")));
  const auto device_name_gen = rc::gen::map(
      rc::gen::tuple(
          rc::gen::inRange(0, 4), rc::gen::inRange(1, 8), rc::gen::inRange(1, 300),
          rc::gen::elementOf(std::vector<std::string>{"", "+me", "+me.all", "+gfx", "-me"})),
      [](const std::tuple<int, int, int, std::string>& t) {
        const auto& [c, g, gb, suffix] = t;
        return (c > 0 ? std::to_string(c) + "c." : "") + std::to_string(g) + "g." +
               std::to_string(gb) + "gb" + suffix;
      });
  MigConfigFile file;
  const int config_count = *rc::gen::inRange(1, 4);
  std::set<std::string> used_names;
  for (int c = 0; c < config_count; ++c) {
    std::string name = *rc::gen::suchThat(
        name_gen, [&](const std::string& n) { return !n.empty() && used_names.count(n) == 0; });
    used_names.insert(name);
    std::vector<ConfigEntry> entries;
    const int entry_count = *rc::gen::inRange(1, 4);
    for (int e = 0; e < entry_count; ++e) {
      ConfigEntry entry;
      entry.device_filter = Unique(*rc::gen::container<std::vector<std::uint32_t>>(
          static_cast<size_t>(*rc::gen::inRange(0, 4)), rc::gen::arbitrary<std::uint32_t>()));
      entry.devices.all = *rc::gen::arbitrary<bool>();
      if (!entry.devices.all) {
        entry.devices.indices = Unique(*rc::gen::container<std::vector<int>>(
            static_cast<size_t>(*rc::gen::inRange(0, 5)), rc::gen::inRange(0, 64)));
      }
      entry.mig_enabled = *rc::gen::arbitrary<bool>();
      if (entry.mig_enabled) {
        const auto names = Unique(*rc::gen::container<std::vector<std::string>>(
            static_cast<size_t>(*rc::gen::inRange(0, 5)), device_name_gen));
        for (const std::string& device : names) {
          entry.mig_devices.push_back({device, *rc::gen::inRange(1, 8)});
        }
        if (*rc::gen::arbitrary<bool>()) entry.placements = {"3g.40gb@4", "1g.10gb+me@0"};
      }
      entries.push_back(entry);
    }
    file.configs.emplace_back(name, std::move(entries));
  }
  for (OutputFormat format : {OutputFormat::kYaml, OutputFormat::kJson}) {
    const std::string written = WriteMigPartedConfig(file, format);
    absl::StatusOr<MigConfigFile> again = ParseMigPartedConfig(written, "written");
    RC_ASSERT(again.ok());
    RC_ASSERT(again->configs.size() == file.configs.size());
    for (size_t c = 0; c < file.configs.size(); ++c) {
      RC_ASSERT(again->configs[c].first == file.configs[c].first);
      RC_ASSERT(again->configs[c].second.size() == file.configs[c].second.size());
      for (size_t e = 0; e < file.configs[c].second.size(); ++e) {
        const ConfigEntry& x = file.configs[c].second[e];
        const ConfigEntry& y = again->configs[c].second[e];
        RC_ASSERT(x.device_filter == y.device_filter);
        RC_ASSERT(x.devices == y.devices);
        RC_ASSERT(x.mig_enabled == y.mig_enabled);
        RC_ASSERT(x.mig_devices == y.mig_devices);
        RC_ASSERT(x.placements == y.placements);
      }
    }
  }
}

// ------------------------------------------------------------------------------------ selecting

TEST(MigPartedSelect, ByNameAndDefault) {
  const MigConfigFile file = MustParse(kDefaultConfigs);
  EXPECT_EQ(MustSelect(file, "all-balanced").size(), 4u);
  absl::StatusOr<const std::vector<ConfigEntry>*> missing = SelectConfig(file, "all-balance");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'all-balance'"));
  EXPECT_THAT(missing.status().message(), HasSubstr("all-disabled, all-enabled, all-1g.5gb"));
  absl::StatusOr<const std::vector<ConfigEntry>*> unnamed = SelectConfig(file, "");
  ASSERT_FALSE(unnamed.ok());
  EXPECT_EQ(unnamed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unnamed.status().message(), HasSubstr("9 MIG configs"));

  const MigConfigFile single = MustParse(kFactsExample);
  absl::StatusOr<const std::vector<ConfigEntry>*> only = SelectConfig(single, "");
  ASSERT_TRUE(only.ok()) << only.status();
  EXPECT_EQ(*only, &single.configs[0].second);
}

TEST(MigPartedSelect, EntryForGpuFollowsDevicesAndFilter) {
  const MigConfigFile facts = MustParse(kFactsExample);
  const std::vector<ConfigEntry>& mix = MustSelect(facts, "inference-mix");
  auto entry = [&](int index, std::uint16_t pci) -> const ConfigEntry* {
    absl::StatusOr<const ConfigEntry*> found = EntryForGpu(mix, index, pci);
    EXPECT_TRUE(found.ok()) << found.status();
    return found.ok() ? *found : nullptr;
  };
  EXPECT_EQ(entry(0, 0x2330), &mix[0]);
  EXPECT_EQ(entry(1, 0x2330), &mix[0]);
  EXPECT_EQ(entry(0, 0x2331), nullptr);  // filtered out: the GPU is left alone
  EXPECT_EQ(entry(2, 0x2331), &mix[1]);
  EXPECT_EQ(entry(3, 0x2330), &mix[1]);
  EXPECT_EQ(entry(4, 0x2330), nullptr);
}

TEST(MigPartedSelect, OverlappingEntriesAreAnError) {
  const MigConfigFile file = MustParse(R"(version: v1
mig-configs:
  c:
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
    - devices: [0, 1]
      mig-enabled: false
)");
  const std::vector<ConfigEntry>& entries = MustSelect(file, "c");
  absl::StatusOr<const ConfigEntry*> clash = EntryForGpu(entries, 1, 0x2330);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(clash.status().message(), HasSubstr("GPU 1"));
  EXPECT_THAT(clash.status().message(), HasSubstr("lines 4 and 8"));
  // No clash where only one applies.
  absl::StatusOr<const ConfigEntry*> other = EntryForGpu(entries, 1, 0x20B7);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, &entries[1]);
  absl::StatusOr<const ConfigEntry*> h100 = EntryForGpu(entries, 5, 0x2330);
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(*h100, &entries[0]);
}

// ------------------------------------------------------------------------------------ resolving

const ConfigEntry& EntryOf(const MigConfigFile& file, std::string_view config, int index,
                           std::uint16_t pci) {
  absl::StatusOr<const ConfigEntry*> entry = EntryForGpu(MustSelect(file, config), index, pci);
  EXPECT_TRUE(entry.ok()) << entry.status();
  static const ConfigEntry kNone;
  if (!entry.ok() || *entry == nullptr) {
    ADD_FAILURE() << config << " has no entry for " << std::hex << pci;
    return kNone;
  }
  return **entry;
}

std::vector<std::string> Resolved(const ConfigEntry& entry, std::string_view model_id) {
  const hw::GpuModel& model = Model(model_id);
  absl::StatusOr<std::vector<DesiredGi>> gis = ResolveEntry(entry, model);
  EXPECT_TRUE(gis.ok()) << gis.status();
  return gis.ok() ? GiNames(model, *gis) : std::vector<std::string>{};
}

TEST(MigPartedResolve, DefaultConfigsOnCatalogModels) {
  const MigConfigFile file = MustParse(kDefaultConfigs);
  EXPECT_THAT(Resolved(EntryOf(file, "all-balanced", 0, 0x2330), "H100-80GB"),
              ElementsAre("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"));
  EXPECT_THAT(Resolved(EntryOf(file, "all-balanced", 2, 0x20B0), "A100-40GB"),
              ElementsAre("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"));
  EXPECT_THAT(Resolved(EntryOf(file, "all-balanced", 0, 0x20B7), "A30-24GB"),
              ElementsAre("1g.6gb", "1g.6gb", "2g.12gb"));
  // all-1g.10gb: 7 instances on 80GB parts, 4 (the double-memory profile) on A100-40GB.
  const std::vector<std::string> seven(7, "1g.10gb");
  const std::vector<std::string> four(4, "1g.10gb");
  EXPECT_EQ(Resolved(EntryOf(file, "all-1g.10gb", 0, 0x2330), "H100-80GB"), seven);
  EXPECT_EQ(Resolved(EntryOf(file, "all-1g.10gb", 0, 0x20B2), "A100-80GB"), seven);
  EXPECT_EQ(Resolved(EntryOf(file, "all-1g.10gb", 0, 0x20B0), "A100-40GB"), four);
  const hw::GpuModel& a100 = Model("A100-40GB");
  EXPECT_EQ(a100.mig->FindProfile("1g.10gb")->placement_size, 2);
  EXPECT_EQ(Resolved(EntryOf(file, "all-1g.10gb.me", 0, 0x2330), "H100-80GB"),
            std::vector<std::string>{"1g.10gb+me"});
  // A GPU outside every filter of all-balanced is left alone.
  absl::StatusOr<const ConfigEntry*> none =
      EntryForGpu(MustSelect(file, "all-balanced"), 0, 0x2684);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  // all-disabled resolves to nothing; all-enabled to MIG on without instances.
  const ConfigEntry& disabled = EntryOf(file, "all-disabled", 0, 0x2330);
  EXPECT_FALSE(disabled.mig_enabled);
  EXPECT_TRUE(Resolved(disabled, "H100-80GB").empty());
  EXPECT_TRUE(Resolved(disabled, "L4").empty());  // not MIG-capable: fine when disabled
  const ConfigEntry& enabled = EntryOf(file, "all-enabled", 0, 0x2330);
  EXPECT_TRUE(enabled.mig_enabled);
  EXPECT_TRUE(Resolved(enabled, "H100-80GB").empty());
}

TEST(MigPartedResolve, UnknownProfileNamesModelLineAndProfiles) {
  const MigConfigFile file = MustParse(kDefaultConfigs);
  const ConfigEntry& entry = EntryOf(file, "all-3g.40gb", 0, 0x20B0);
  absl::StatusOr<std::vector<DesiredGi>> gis = ResolveEntry(entry, Model("A100-40GB"));
  ASSERT_FALSE(gis.ok());
  EXPECT_EQ(gis.status().code(), absl::StatusCode::kNotFound);
  const std::string message(gis.status().message());
  EXPECT_THAT(message, HasSubstr("A100-40GB"));
  EXPECT_THAT(message, HasSubstr("'3g.40gb'"));
  EXPECT_THAT(message, HasSubstr("line " + std::to_string(entry.line)));
  EXPECT_THAT(message, HasSubstr("1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"));
  EXPECT_GT(entry.line, 0);

  // An enabled entry on a model without MIG.
  absl::StatusOr<std::vector<DesiredGi>> l4 = ResolveEntry(entry, Model("L4"));
  ASSERT_FALSE(l4.ok());
  EXPECT_EQ(l4.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MigPartedResolve, AcceptsAliases) {
  const hw::GpuModel& a100 = Model("A100-80GB");
  absl::StatusOr<std::vector<DesiredGi>> gis = ResolveEntry(Enabled({{"7g.79gb", 1}}), a100);
  ASSERT_TRUE(gis.ok()) << gis.status();
  EXPECT_THAT(GiNames(a100, *gis), ElementsAre("7g.80gb"));
}

TEST(MigPartedResolve, CountsMustBePositive) {
  absl::StatusOr<std::vector<DesiredGi>> gis =
      ResolveEntry(Enabled({{"1g.10gb", 0}}), Model("H100-80GB"));
  ASSERT_FALSE(gis.ok());
  EXPECT_EQ(gis.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gis.status().message(), HasSubstr("line 42"));
}

TEST(MigPartedResolve, ComputeInstanceSplits) {
  const hw::GpuModel& h100 = Model("H100-80GB");
  const int g3 = h100.mig->IndexOf(*h100.mig->FindProfile("3g.40gb"));
  const int c1 = CiIndex(h100, 3, "1c");
  const int c2 = CiIndex(h100, 3, "2c");

  // Six 1c CIs of 3g fill two GIs with three each.
  absl::StatusOr<std::vector<DesiredGi>> six = ResolveEntry(Enabled({{"1c.3g.40gb", 6}}), h100);
  ASSERT_TRUE(six.ok()) << six.status();
  EXPECT_THAT(*six, ElementsAre(DesiredGi{g3, {c1, c1, c1}, std::nullopt},
                                DesiredGi{g3, {c1, c1, c1}, std::nullopt}));

  // 1c + 2c share one GI (largest first, as mig-parted creates them).
  absl::StatusOr<std::vector<DesiredGi>> mixed =
      ResolveEntry(Enabled({{"1c.3g.40gb", 1}, {"2c.3g.40gb", 1}}), h100);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_THAT(*mixed, ElementsAre(DesiredGi{g3, {c2, c1}, std::nullopt}));

  // Four 1c: one full GI of three and a second GI holding one.
  absl::StatusOr<std::vector<DesiredGi>> four = ResolveEntry(Enabled({{"1c.3g.40gb", 4}}), h100);
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_THAT(*four, ElementsAre(DesiredGi{g3, {c1, c1, c1}, std::nullopt},
                                 DesiredGi{g3, {c1}, std::nullopt}));

  // 3c.3g.40gb is the whole GI: the same as 3g.40gb. A plain GI never takes split CIs.
  absl::StatusOr<std::vector<DesiredGi>> whole =
      ResolveEntry(Enabled({{"1c.3g.40gb", 1}, {"3c.3g.40gb", 1}}), h100);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_THAT(*whole,
              ElementsAre(DesiredGi{g3, {}, std::nullopt}, DesiredGi{g3, {c1}, std::nullopt}));

  // Two 2c do not fit one 3g GI.
  absl::StatusOr<std::vector<DesiredGi>> twos = ResolveEntry(Enabled({{"2c.3g.40gb", 2}}), h100);
  ASSERT_TRUE(twos.ok()) << twos.status();
  EXPECT_EQ(twos->size(), 2u);

  // Splits of a 7g GI: 3c + 3c + 1c fill it.
  const int c3_7 = CiIndex(h100, 7, "3c");
  const int c1_7 = CiIndex(h100, 7, "1c");
  const int g7 = h100.mig->IndexOf(*h100.mig->FindProfile("7g.80gb"));
  absl::StatusOr<std::vector<DesiredGi>> seven =
      ResolveEntry(Enabled({{"1c.7g.80gb", 1}, {"3c.7g.80gb", 2}}), h100);
  ASSERT_TRUE(seven.ok()) << seven.status();
  EXPECT_THAT(*seven, ElementsAre(DesiredGi{g7, {c3_7, c3_7, c1_7}, std::nullopt}));

  // Unknown CI profiles are NotFound and list the ones that exist.
  for (std::string_view bad : {"5c.7g.80gb", "4c.3g.40gb"}) {
    absl::StatusOr<std::vector<DesiredGi>> gis =
        ResolveEntry(Enabled({{std::string(bad), 1}}), h100);
    ASSERT_FALSE(gis.ok()) << bad;
    EXPECT_EQ(gis.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(gis.status().message(), HasSubstr("H100-80GB"));
    EXPECT_THAT(gis.status().message(), HasSubstr("line 42"));
    EXPECT_THAT(gis.status().message(), HasSubstr("1c, 2c"));
  }
}

TEST(MigPartedResolve, GroupsByProfileInOrderOfFirstAppearance) {
  const hw::GpuModel& h100 = Model("H100-80GB");
  absl::StatusOr<std::vector<DesiredGi>> gis = ResolveEntry(
      Enabled({{"3g.40gb", 1}, {"1g.10gb", 1}, {"1c.3g.40gb", 2}, {"1g.10gb+me", 1}}), h100);
  ASSERT_TRUE(gis.ok()) << gis.status();
  EXPECT_THAT(GiNames(h100, *gis), ElementsAre("3g.40gb", "3g.40gb", "1g.10gb", "1g.10gb+me"));
  EXPECT_TRUE((*gis)[0].cis.empty());
  EXPECT_EQ((*gis)[1].cis.size(), 2u);
}

TEST(MigPartedResolve, Placements) {
  const hw::GpuModel& h100 = Model("H100-80GB");
  const std::vector<MigDevice> balanced = {{"1g.10gb", 2}, {"2g.20gb", 1}, {"3g.40gb", 1}};
  absl::StatusOr<std::vector<DesiredGi>> placed =
      ResolveEntry(Enabled(balanced, {"3g.40gb@0", "1g.10gb@6", "2g.20gb@4", "1g.10gb@5"}), h100);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->size(), 4u);
  EXPECT_EQ((*placed)[0].start, 6);  // the first 1g.10gb gets the first 1g.10gb placement
  EXPECT_EQ((*placed)[1].start, 5);
  EXPECT_EQ((*placed)[2].start, 4);
  EXPECT_EQ((*placed)[3].start, 0);

  struct Bad {
    std::vector<std::string> placements;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {{"3g.40gb@0", "2g.20gb@4", "1g.10gb@6"},
       absl::StatusCode::kInvalidArgument,
       "not placed: 1 x 1g.10gb"},
      {{"3g.40gb@0", "2g.20gb@4", "1g.10gb@6", "1g.10gb@5", "1g.10gb@3"},
       absl::StatusCode::kInvalidArgument,
       "places more 1g.10gb GPU instances"},
      {{"3g.40gb@0", "2g.20gb@4", "1g.10gb@6", "4g.40gb@0"},
       absl::StatusCode::kInvalidArgument,
       "places more 4g.40gb"},
      {{"3g.40gb@2", "2g.20gb@4", "1g.10gb@6", "1g.10gb@5"},
       absl::StatusCode::kInvalidArgument,
       "3g.40gb cannot start at 2 on H100-80GB (allowed starts: 0, 4)"},
      {{"3g.20gb@0", "2g.20gb@4", "1g.10gb@6", "1g.10gb@5"},
       absl::StatusCode::kNotFound,
       "no MIG profile '3g.20gb'"},
      {{"3g.40gb", "2g.20gb@4", "1g.10gb@6", "1g.10gb@5"},
       absl::StatusCode::kInvalidArgument,
       "invalid placement '3g.40gb'"},
  };
  for (const Bad& b : bad) {
    absl::StatusOr<std::vector<DesiredGi>> gis =
        ResolveEntry(Enabled(balanced, b.placements), h100);
    ASSERT_FALSE(gis.ok()) << b.message;
    EXPECT_EQ(gis.status().code(), b.code) << gis.status();
    EXPECT_THAT(gis.status().message(), HasSubstr(b.message));
    EXPECT_THAT(gis.status().message(), HasSubstr("line 42"));
  }
}

TEST(MigPartedResolve, PlacementsFromTheFile) {
  const MigConfigFile file = MustParse(R"(version: v1
mig-configs:
  pinned:
    - devices: all
      mig-enabled: true
      mig-devices: {"1c.3g.40gb": 3, "3g.40gb": 1}
      gpuslice-placements: ["3g.40gb@4", "3g.40gb@0"]
)");
  const hw::GpuModel& h100 = Model("H100-80GB");
  absl::StatusOr<std::vector<DesiredGi>> gis = ResolveEntry(MustSelect(file, "pinned")[0], h100);
  ASSERT_TRUE(gis.ok()) << gis.status();
  ASSERT_EQ(gis->size(), 2u);
  EXPECT_TRUE((*gis)[0].cis.empty());
  EXPECT_EQ((*gis)[0].start, 4);
  EXPECT_EQ((*gis)[1].cis.size(), 3u);
  EXPECT_EQ((*gis)[1].start, 0);
}

TEST(MigPartedExport, MigDevicesOf) {
  const hw::GpuModel& h100 = Model("H100-80GB");
  const int c1 = CiIndex(h100, 3, "1c");
  const int c2 = CiIndex(h100, 3, "2c");
  const int c3 = CiIndex(h100, 3, "3c");
  const int g3 = h100.mig->IndexOf(*h100.mig->FindProfile("3g.40gb"));
  const int g1 = h100.mig->IndexOf(*h100.mig->FindProfile("1g.10gb"));
  const std::vector<DesiredGi> gis = {
      {g3, {c2, c1}, 0}, {g3, {c3}, 4}, {g1, {}, std::nullopt}, {g1, {}, std::nullopt}};
  EXPECT_THAT(MigDevicesOf(h100, gis),
              ElementsAre(MigDevice{"1c.3g.40gb", 1}, MigDevice{"1g.10gb", 2},
                          MigDevice{"2c.3g.40gb", 1}, MigDevice{"3g.40gb", 1}));
}

// For every MIG model of the catalog, its all-balanced layout resolves to itself, and export reads
// back the same counts.
TEST(MigPartedExport, BalancedRoundTripsOnEveryModel) {
  for (const std::string& id : gpuslice::testing::MigModelIds()) {
    SCOPED_TRACE(id);
    const hw::GpuModel& model = Model(id);
    std::map<std::string, int> counts;
    for (const std::string& name : model.mig->balanced) ++counts[name];
    std::vector<MigDevice> devices;
    for (const auto& [name, count] : counts) devices.push_back({name, count});
    absl::StatusOr<std::vector<DesiredGi>> gis = ResolveEntry(Enabled(devices), model);
    ASSERT_TRUE(gis.ok()) << gis.status();
    EXPECT_EQ(gis->size(), model.mig->balanced.size());
    EXPECT_EQ(MigDevicesOf(model, *gis), devices);
  }
}

}  // namespace
}  // namespace gpuslice::spec
