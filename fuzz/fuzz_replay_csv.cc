// The placement replay's trace readers (gpuslice/place/replay.h, `gpuslice replay --nodes
// --pods`) on arbitrary bytes: the input up to its first NUL is the nodes CSV, the rest the pods
// CSV (without a NUL, both files get the whole input); each is written to a file and read back.
// Beside the sanitizers: nodes that read have unique non-empty names, in order, with capacities
// in range; pods that read are in name order and are requests ValidateRequest accepts (a share
// on one GPU, 1..1000 milli, at most 64 GPUs, models only with GPUs). A small trace that reads is
// then replayed (shared, and its MIG conversion): the cluster builds and every pod of the arrival
// sequence is either placed or failed (only a trace without GPUs is refused).
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/place/policy.h"
#include "gpuslice/place/replay.h"

namespace {

using gpuslice::fuzz::Check;
using gpuslice::fuzz::Scratch;

using gpuslice::place::NodeSpec;
using gpuslice::place::TracePod;

std::string WriteFile(const std::string& name, std::string_view text) {
  const std::string path = Scratch("gpuslice_fuzz_replay") + "/" + name;
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  if (!text.empty() && std::fwrite(text.data(), 1, text.size(), file) != text.size()) std::abort();
  std::fclose(file);
  return path;
}

void CheckNodes(const std::vector<NodeSpec>& nodes) {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& node = nodes[i];
    Check(!node.name.empty());
    if (i > 0) Check(nodes[i - 1].name < node.name);
    Check(node.cpu_milli >= 0 && node.memory_mib >= 0);
    Check(node.gpus >= 0 && node.gpus <= 1024);
    Check(node.mode == gpuslice::place::GpuMode::kShared);
  }
}

void CheckPods(const std::vector<TracePod>& pods) {
  for (std::size_t i = 0; i < pods.size(); ++i) {
    const gpuslice::place::Request& r = pods[i].request;
    if (i > 0) Check(!(pods[i].name < pods[i - 1].name));
    Check(r.cpu_milli >= 0 && r.memory_mib >= 0);
    Check(r.num_gpu >= 0 && r.num_gpu <= 64);
    if (r.num_gpu == 0) {
      Check(r.gpu_milli == 0 && r.models.empty());
    } else {
      Check(r.gpu_milli >= 1 && r.gpu_milli <= gpuslice::place::kMilliPerGpu);
      Check(r.gpu_milli == gpuslice::place::kMilliPerGpu || r.num_gpu == 1);
    }
    for (const std::string& model : r.models) Check(!model.empty());
    Check(gpuslice::place::ValidateRequest(r).ok());
  }
}

void Replay(std::vector<NodeSpec> nodes, std::vector<TracePod> pods, int gpus, bool mig) {
  if (mig && !gpuslice::place::ConvertToMig(nodes, pods).ok()) std::abort();
  Check(gpuslice::place::Cluster::Create(nodes).ok());
  std::vector<gpuslice::place::Request> requests;
  for (const TracePod& pod : pods) requests.push_back(pod.request);
  gpuslice::place::ReplayOptions options;
  options.mig = mig;
  absl::StatusOr<gpuslice::place::ReplayResult> result = gpuslice::place::Replay(
      nodes, pods, gpuslice::place::TypicalRequests(requests), "gpuslice", 1, options);
  if (!result.ok()) {
    Check(gpus == 0 && absl::IsInvalidArgument(result.status()));  // "the cluster has no GPUs"
    return;
  }
  Check(result->placed >= 0 && result->failed >= 0);
  Check(result->placed + result->failed == result->pods);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string_view nodes_text = nul == std::string_view::npos ? input : input.substr(0, nul);
  const std::string_view pods_text = nul == std::string_view::npos ? input : input.substr(nul + 1);
  absl::StatusOr<std::vector<NodeSpec>> nodes =
      gpuslice::place::ReadNodesCsv(WriteFile("nodes.csv", nodes_text));
  absl::StatusOr<std::vector<TracePod>> pods =
      gpuslice::place::ReadPodsCsv(WriteFile("pods.csv", pods_text));
  if (nodes.ok()) CheckNodes(*nodes);
  if (pods.ok()) CheckPods(*pods);
  if (!nodes.ok() || !pods.ok()) return 0;
  // Replays stay small: the arrival sequence grows to 1.3x the GPUs' capacity.
  int gpus = 0;
  for (const NodeSpec& node : *nodes) gpus += node.gpus;
  if (nodes->size() > 16 || gpus > 8 || pods->size() > 64) return 0;
  Replay(*nodes, *pods, gpus, false);
  Replay(*nodes, *pods, gpus, true);
  return 0;
}
