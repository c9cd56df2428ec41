// mig-parted's default configurations (mig-facts §5.1: all-disabled, all-enabled, all-balanced and
// one all-<profile> per profile at its maximum count), written out in mig-parted's file format for
// every MIG model of the catalog, applied one after another on a simulated machine of that model:
// each must apply, assert, and export to a file whose re-apply changes nothing.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <string>

#include "gpuslice/agent/apply.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/device/sim_store.h"
#include "gpuslice/geometry/shape.h"

namespace gpuslice::agent {
namespace {

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

std::string Filter(const hw::GpuModel& model) {
  std::string text = "[";
  for (const std::string& filter : model.MigPartedDeviceFilters()) {
    text += (text.size() > 1 ? ", " : "") + ("\"" + filter + "\"");
  }
  return text + "]";
}

// mig-parted writes "+" as "." in config names: all-1g.10gb.me.
std::string ConfigName(const std::string& profile) {
  std::string name = "all-" + profile;
  for (char& c : name) c = c == '+' ? '.' : c;
  return name;
}

// The default configs for one model, as mig-parted's file would have them.
std::string DefaultConfigFile(const hw::GpuModel& model, std::vector<std::string>* names) {
  std::string text = "version: v1\nmig-configs:\n";
  text += "  all-disabled:\n    - devices: all\n      mig-enabled: false\n";
  text += "  all-enabled:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n";
  *names = {"all-disabled", "all-enabled"};
  std::map<std::string, int> balanced;
  for (const std::string& name : model.mig->balanced) ++balanced[name];
  text += "  all-balanced:\n    - device-filter: " + Filter(model) +
          "\n      devices: all\n      mig-enabled: true\n      mig-devices:\n";
  for (const auto& [name, count] : balanced) {
    text += "        \"" + name + "\": " + std::to_string(count) + "\n";
  }
  names->push_back("all-balanced");
  for (const hw::GiProfile& profile : model.mig->profiles) {
    const std::string name = ConfigName(profile.name);
    text += "  " + name + ":\n    - device-filter: " + Filter(model) +
            "\n      devices: all\n      mig-enabled: true\n      mig-devices:\n        \"" +
            profile.name + "\": " + std::to_string(profile.max_instances) + "\n";
    names->push_back(name);
  }
  return text;
}

class DefaultConfigsTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpuslice-defaults-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_P(DefaultConfigsTest, EveryDefaultConfigAppliesAssertsAndExportsAsNoOp) {
  const hw::GpuModel* model = Catalog().Find(GetParam());
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->mig_capable());
  const std::string path = dir_ + "/machine.json";
  absl::StatusOr<device::sim::SimState> state =
      device::sim::NewMachine(Catalog(), "2x" + model->id);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(device::sim::SimStore::Create(path, *state, false).ok());
  std::vector<std::string> names;
  const std::string text = DefaultConfigFile(*model, &names);
  absl::StatusOr<spec::MigConfigFile> file = spec::ParseMigPartedConfig(text, "defaults.yaml");
  ASSERT_TRUE(file.ok()) << file.status() << "\n" << text;
  for (const std::string& name : names) {
    SCOPED_TRACE(model->id + " " + name);
    absl::StatusOr<std::unique_ptr<device::SimBackend>> backend =
        device::SimBackend::OpenFile(path, Catalog());
    ASSERT_TRUE(backend.ok());
    ApplyRequest request;
    request.file = &*file;
    request.file_path = "defaults.yaml";
    request.config_name = name;
    request.journal_path = path + ".journal";
    std::string log;
    absl::StatusOr<ApplyResult> result = ApplyConfig(
        **backend, Catalog(), request, [&](const std::string& line) { log += line + "\n"; });
    ASSERT_TRUE(result.ok()) << result.status() << "\n" << log;
    absl::StatusOr<std::vector<std::string>> differences =
        AssertConfig(**backend, Catalog(), *file, name, false);
    ASSERT_TRUE(differences.ok());
    EXPECT_TRUE(differences->empty()) << differences->front();
    // Both GPUs hold the whole config: count the instances against the config.
    if (name != "all-disabled" && name != "all-enabled") {
      int wanted = 0;
      for (const spec::MigDevice& device : (*SelectConfig(*file, name))->front().mig_devices)
        wanted += device.count;
      EXPECT_EQ(static_cast<int>((*backend)->ListGpuInstances(0)->size()), wanted);
    }
    // export, then apply the export: nothing changes.
    absl::StatusOr<spec::MigConfigFile> exported =
        ExportConfig(**backend, Catalog(), "current", false);
    ASSERT_TRUE(exported.ok()) << exported.status();
    absl::StatusOr<spec::MigConfigFile> reparsed = spec::ParseMigPartedConfig(
        spec::WriteMigPartedConfig(*exported, spec::OutputFormat::kYaml), "export.yaml");
    ASSERT_TRUE(reparsed.ok()) << reparsed.status();
    ApplyRequest again = request;
    again.file = &*reparsed;
    again.config_name = "current";
    absl::StatusOr<ApplyResult> noop =
        ApplyConfig(**backend, Catalog(), again, [](const std::string&) {});
    ASSERT_TRUE(noop.ok()) << noop.status();
    EXPECT_FALSE(noop->changed);
  }
}

std::vector<std::string> MigModels() {
  std::vector<std::string> ids;
  for (const hw::GpuModel& model : Catalog().models()) {
    if (model.mig_capable()) ids.push_back(model.id);
  }
  return ids;
}

INSTANTIATE_TEST_SUITE_P(AllMigModels, DefaultConfigsTest, testing::ValuesIn(MigModels()),
                         [](const testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace gpuslice::agent
