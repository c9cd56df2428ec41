#include "gpuslice/k8s/labels.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpuslice::k8s {
namespace {

NodeGpu Gpu(int index, bool mig, std::string product = "NVIDIA H100 80GB HBM3",
            std::string model = "H100-80GB", std::int64_t memory = 81559) {
  NodeGpu gpu;
  gpu.index = index;
  gpu.uuid = "GPU-0000000" + std::to_string(index);
  gpu.product = std::move(product);
  gpu.model = std::move(model);
  gpu.memory_mib = memory;
  gpu.mig_enabled = mig;
  return gpu;
}

MigDevice Mig(int gi, std::string profile, int slices, int start, std::int64_t memory,
              int ci_slices = -1) {
  MigDevice mig;
  mig.gi = gi;
  mig.profile = std::move(profile);
  mig.gi_slices = slices;
  mig.ci_slices = ci_slices < 0 ? slices : ci_slices;
  mig.start = start;
  mig.memory_mib = memory;
  mig.uuid = "MIG-" + std::to_string(gi) + "-" + std::to_string(start);
  return mig;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "gpuslice-labels-XXXXXX");
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

TEST(K8sLabels, WholeGpuNodeGetsGfdLabels) {
  NodeSnapshot node;
  node.gpus = {Gpu(1, false), Gpu(0, false)};
  const Labels labels = NodeLabels(node, SharingConfig{});
  EXPECT_EQ(labels, (Labels{{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"},
                            {"nvidia.com/gpu.count", "2"},
                            {"nvidia.com/gpu.memory", "81559"},
                            {"nvidia.com/mig.capable", "true"},  // H100 has MIG (catalog)
                            {"nvidia.com/mig.strategy", "mixed"},
                            {"nvidia.com/gpu.sharing-strategy", "none"}}));
}

TEST(K8sLabels, NoGpusNoLabels) {
  EXPECT_TRUE(NodeLabels(NodeSnapshot{}, SharingConfig{}).empty());
}

TEST(K8sLabels, MigCapableComesFromModeOrCatalog) {
  NodeSnapshot node;
  node.gpus = {Gpu(0, false, "NVIDIA L4", "L4", 23034)};
  EXPECT_EQ(NodeLabels(node, SharingConfig{}).at("nvidia.com/mig.capable"), "false");
  // Unknown to the catalog and MIG disabled: not capable as far as we know.
  node.gpus = {Gpu(0, false, "NVIDIA Future GPU", "", 1000)};
  EXPECT_EQ(NodeLabels(node, SharingConfig{}).at("nvidia.com/mig.capable"), "false");
  // Found by its product name when the model id is missing.
  node.gpus = {Gpu(0, false, "NVIDIA A100-SXM4-80GB", "", 81920)};
  EXPECT_EQ(NodeLabels(node, SharingConfig{}).at("nvidia.com/mig.capable"), "true");
  // MIG enabled now: capable whatever the catalog says.
  node.gpus = {Gpu(0, true, "NVIDIA Future GPU", "", 1000)};
  EXPECT_EQ(NodeLabels(node, SharingConfig{}).at("nvidia.com/mig.capable"), "true");
}

TEST(K8sLabels, MixedProductsUseTheFirstGpus) {
  NodeSnapshot node;
  node.gpus = {Gpu(2, false, "NVIDIA A100-SXM4-80GB", "A100-80GB", 81920),
               Gpu(0, false, "NVIDIA L4", "L4", 23034),
               Gpu(1, false, "NVIDIA A100-SXM4-80GB", "A100-80GB", 81920)};
  const Labels labels = NodeLabels(node, SharingConfig{});
  EXPECT_EQ(labels.at("nvidia.com/gpu.product"), "NVIDIA-L4");  // GPU 0's, lowest index
  EXPECT_EQ(labels.at("nvidia.com/gpu.count"), "1");            // GPUs of that product
  EXPECT_EQ(labels.at("nvidia.com/gpu.memory"), "23034");
  EXPECT_EQ(labels.at("nvidia.com/mig.capable"), "true");  // the A100s
}

TEST(K8sLabels, MigProfilesWithMediaEnginesAndMixedNode) {
  NodeSnapshot node;
  NodeGpu mig0 = Gpu(0, true);
  mig0.mig_devices = {Mig(9, "1g.10gb", 1, 1, 9856), Mig(13, "1g.10gb+me", 1, 0, 9856),
                      Mig(2, "3g.40gb", 3, 4, 40192), Mig(14, "1g.10gb", 1, 2, 9856)};
  NodeGpu mig1 = Gpu(1, true);
  mig1.mig_devices = {Mig(1, "4g.40gb", 4, 0, 40192, /*ci_slices=*/2),  // split: not offered
                      Mig(5, "2g.20gb", 2, 4, 20096), Mig(7, "1g.10gb", 1, 6, 9856)};
  NodeGpu empty = Gpu(2, true);  // MIG on, no instances
  node.gpus = {mig0, mig1, empty, Gpu(3, false)};

  const Labels labels = NodeLabels(node, SharingConfig{});
  EXPECT_EQ(labels.at("nvidia.com/gpu.count"), "4");
  EXPECT_EQ(labels.at("nvidia.com/mig.capable"), "true");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.count"), "3");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.memory"), "9856");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.slices.gi"), "1");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.slices.ci"), "1");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.product"), "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.me.count"), "1");
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.me.product"), "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me");
  EXPECT_EQ(labels.at("nvidia.com/mig-3g.40gb.count"), "1");
  EXPECT_EQ(labels.at("nvidia.com/mig-3g.40gb.slices.gi"), "3");
  EXPECT_EQ(labels.at("nvidia.com/mig-2g.20gb.memory"), "20096");
  EXPECT_FALSE(labels.contains("nvidia.com/mig-4g.40gb.count"));  // its CI is split
  for (const auto& [name, value] : labels) {
    EXPECT_TRUE(IsValidLabelName(name)) << name;
    EXPECT_TRUE(IsValidLabelValue(value)) << name << "=" << value;
    EXPECT_EQ(name.find('+'), std::string::npos) << name;
  }
  // Same snapshot in another order: same labels.
  NodeSnapshot shuffled;
  shuffled.gpus = {node.gpus[3], node.gpus[1], node.gpus[0], node.gpus[2]};
  EXPECT_EQ(NodeLabels(shuffled, SharingConfig{}), labels);
}

TEST(K8sLabels, SharesAddGpusliceLabels) {
  NodeSnapshot node;
  node.gpus = {Gpu(0, false), Gpu(1, false), Gpu(2, true)};
  SharingConfig sharing;
  sharing.shared_gpus = {"all"};  // the MIG-enabled GPU is not shared
  sharing.units = 100;
  Labels labels = NodeLabels(node, sharing);
  EXPECT_EQ(labels.at("nvidia.com/gpu.sharing-strategy"), "gpuslice");
  EXPECT_EQ(labels.at("gpuslice.io/gpu-share.units"), "100");
  EXPECT_EQ(labels.at("gpuslice.io/gpu-share.gpus"), "2");

  sharing.shared_gpus = {"GPU-00000001"};
  sharing.units = 8;
  labels = NodeLabels(node, sharing);
  EXPECT_EQ(labels.at("gpuslice.io/gpu-share.units"), "8");
  EXPECT_EQ(labels.at("gpuslice.io/gpu-share.gpus"), "1");

  sharing.shared_gpus = {"2"};  // only the MIG GPU: nothing is shared
  labels = NodeLabels(node, sharing);
  EXPECT_EQ(labels.at("nvidia.com/gpu.sharing-strategy"), "none");
  EXPECT_FALSE(labels.contains("gpuslice.io/gpu-share.units"));
  EXPECT_FALSE(labels.contains("gpuslice.io/gpu-share.gpus"));
}

TEST(K8sLabels, ValuesAreSanitised) {
  EXPECT_EQ(SanitizeLabelValue("NVIDIA H100 80GB HBM3"), "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(SanitizeLabelValue("NVIDIA A100-SXM4-80GB"), "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(SanitizeLabelValue(" (Tesla) T4/PCIe "), "Tesla--T4-PCIe");
  EXPECT_EQ(SanitizeLabelValue("--__..x"), "x");
  EXPECT_EQ(SanitizeLabelValue("---"), "");
  EXPECT_EQ(SanitizeLabelValue("é"), "");
  EXPECT_EQ(SanitizeLabelValue("a\nb=c"), "a-b-c");
  const std::string long_name(80, 'x');
  EXPECT_EQ(SanitizeLabelValue(long_name), std::string(63, 'x'));
  // Cut at 63, then the trailing '-' goes.
  EXPECT_EQ(SanitizeLabelValue(std::string(62, 'y') + " z"), std::string(62, 'y'));
  for (const std::string text : {"NVIDIA RTX PRO 6000 Blackwell Server Edition", "..a..", "x y", "",
                                 "a_b.c-d", "ünïcode GPU"}) {
    EXPECT_TRUE(IsValidLabelValue(SanitizeLabelValue(text))) << text;
  }

  NodeSnapshot node;
  node.gpus = {Gpu(0, false, "NVIDIA Weird/GPU (rev 2) " + std::string(70, 'Z'), "", 0)};
  const Labels labels = NodeLabels(node, SharingConfig{});
  const std::string& product = labels.at("nvidia.com/gpu.product");
  EXPECT_TRUE(IsValidLabelValue(product)) << product;
  EXPECT_EQ(product.size(), 63u);
  EXPECT_EQ(product.substr(0, 24), "NVIDIA-Weird-GPU--rev-2-");
  EXPECT_FALSE(labels.contains("nvidia.com/gpu.memory"));  // unknown memory

  // A product that sanitises to nothing: no product label.
  node.gpus = {Gpu(0, false, "???", "", 1)};
  EXPECT_FALSE(NodeLabels(node, SharingConfig{}).contains("nvidia.com/gpu.product"));
}

TEST(K8sLabels, LabelValueAndNameRules) {
  EXPECT_TRUE(IsValidLabelValue(""));
  EXPECT_TRUE(IsValidLabelValue("a"));
  EXPECT_TRUE(IsValidLabelValue("1g.10gb.me"));
  EXPECT_TRUE(IsValidLabelValue(std::string(63, 'a')));
  EXPECT_FALSE(IsValidLabelValue(std::string(64, 'a')));
  EXPECT_FALSE(IsValidLabelValue("-a"));
  EXPECT_FALSE(IsValidLabelValue("a."));
  EXPECT_FALSE(IsValidLabelValue("a b"));
  EXPECT_FALSE(IsValidLabelValue("1g.10gb+me"));

  EXPECT_TRUE(IsValidLabelName("nvidia.com/mig-1g.10gb.me.slices.gi"));
  EXPECT_TRUE(IsValidLabelName("gpuslice.io/gpu-share.units"));
  EXPECT_TRUE(IsValidLabelName("plain"));
  EXPECT_FALSE(IsValidLabelName("nvidia.com/mig-1g.10gb+me.count"));
  EXPECT_FALSE(IsValidLabelName("Nvidia.com/x"));  // prefixes are lower case
  EXPECT_FALSE(IsValidLabelName("/x"));
  EXPECT_FALSE(IsValidLabelName("nvidia.com/"));
  EXPECT_FALSE(IsValidLabelName("nvidia..com/x"));
  EXPECT_FALSE(IsValidLabelName("-nvidia.com/x"));
  EXPECT_FALSE(IsValidLabelName("a/b/c"));
  EXPECT_FALSE(IsValidLabelName("nvidia.com/" + std::string(64, 'n')));
}

TEST(K8sLabels, FeatureFileText) {
  const Labels labels = {{"nvidia.com/gpu.count", "2"},
                         {"gpuslice.io/gpu-share.units", "100"},
                         {"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"},
                         {"bad name/x", "1"},               // invalid name: left out
                         {"nvidia.com/bad.value", "a b"}};  // invalid value: left out
  const std::string text = NfdFeatureFile(labels);
  EXPECT_EQ(text,
            "# Node labels of gpuslice's device plugin for Node Feature Discovery's local source.\n"
            "# Written by gpuslice; rewritten every round, do not edit.\n"
            "gpuslice.io/gpu-share.units=100\n"
            "nvidia.com/gpu.count=2\n"
            "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n");

  // 2026-07-29T11:22:33Z = 1785324153 s since the epoch.
  const auto when = std::chrono::system_clock::time_point(std::chrono::seconds(1785324153));
  const std::string expiring = NfdFeatureFile({{"nvidia.com/gpu.count", "2"}}, when);
  EXPECT_NE(expiring.find("\n# +expiry-time=2026-07-29T11:22:33Z\nnvidia.com/gpu.count=2\n"),
            std::string::npos)
      << expiring;

  // A whole node's file: every line a comment or name=value, well under NFD's 64 kB.
  NodeSnapshot node;
  for (int i = 0; i < 8; ++i) {
    NodeGpu gpu = Gpu(i, true);
    for (int g = 0; g < 7; ++g) gpu.mig_devices.push_back(Mig(7 + g, "1g.10gb+me", 1, g, 9856));
    node.gpus.push_back(gpu);
  }
  const std::string full = NfdFeatureFile(NodeLabels(node, SharingConfig{}), when);
  EXPECT_LT(full.size(), kNfdFeatureFileLimit);
  std::istringstream lines(full);
  int entries = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("#")) continue;
    const size_t eq = line.find('=');
    ASSERT_NE(eq, std::string::npos) << line;
    EXPECT_TRUE(IsValidLabelName(line.substr(0, eq))) << line;
    EXPECT_TRUE(IsValidLabelValue(line.substr(eq + 1))) << line;
    ++entries;
  }
  EXPECT_EQ(entries, 11);  // 5 whole-GPU + 5 for the one profile + sharing strategy
}

TEST(K8sLabels, WriteFeatureFileIsAtomicAndLeavesOnlyTheFile) {
  TempDir dir;
  const std::string path = dir.path() + "/gpuslice";
  ASSERT_TRUE(WriteFeatureFile(path, "a.io/x=1\n").ok());
  EXPECT_EQ(Read(path), "a.io/x=1\n");
  EXPECT_EQ(dir.Entries(), std::vector<std::string>{"gpuslice"});
  struct stat info {};
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0644u);

  // Replacing keeps the same name; a reader holding the old file still sees the old text.
  std::ifstream old(path);
  ASSERT_TRUE(WriteFeatureFile(path, "a.io/x=2\nb.io/y=3\n").ok());
  EXPECT_EQ(Read(path), "a.io/x=2\nb.io/y=3\n");
  std::stringstream old_text;
  old_text << old.rdbuf();
  EXPECT_EQ(old_text.str(), "a.io/x=1\n");
  EXPECT_EQ(dir.Entries(), std::vector<std::string>{"gpuslice"});

  // Empty text is a valid (empty) file.
  ASSERT_TRUE(WriteFeatureFile(path, "").ok());
  EXPECT_EQ(Read(path), "");
}

TEST(K8sLabels, WriteFeatureFileErrors) {
  TempDir dir;
  // A missing directory is not created.
  absl::Status missing = WriteFeatureFile(dir.path() + "/features.d/gpuslice", "x\n");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("features.d"), std::string::npos) << missing;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/features.d"));

  // The path is a directory.
  std::filesystem::create_directory(dir.path() + "/taken");
  absl::Status is_dir = WriteFeatureFile(dir.path() + "/taken", "x\n");
  EXPECT_FALSE(is_dir.ok());
  EXPECT_NE(is_dir.message().find("is a directory"), std::string::npos) << is_dir;

  // Not a file name.
  EXPECT_EQ(WriteFeatureFile("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteFeatureFile(dir.path() + "/", "x").code(), absl::StatusCode::kInvalidArgument);

  // A file in place of the directory.
  std::ofstream(dir.path() + "/plain") << "x";
  EXPECT_FALSE(WriteFeatureFile(dir.path() + "/plain/gpuslice", "x\n").ok());

  // A directory we may not write (skipped as root, who may).
  if (geteuid() != 0) {
    const std::string locked = dir.path() + "/locked";
    std::filesystem::create_directory(locked);
    chmod(locked.c_str(), 0555);
    absl::Status denied = WriteFeatureFile(locked + "/gpuslice", "x\n");
    EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
    EXPECT_NE(denied.message().find("temporary file"), std::string::npos) << denied;
    chmod(locked.c_str(), 0755);
    EXPECT_TRUE(std::filesystem::is_empty(locked));
  }
  // Nothing but what the test made.
  EXPECT_EQ(dir.Entries(), (std::vector<std::string>{"plain", "taken"}));
}

}  // namespace
}  // namespace gpuslice::k8s
