// NodeDriver::Relay: drained admin-fixed GPUs re-laid to their config (gpuslice/agent/apply.h).
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpuslice/agent/apply.h"
#include "gpuslice/dra/node_driver.h"
#include "node_offer.h"

namespace gpuslice::dra {
namespace {

// The selected config's entries, narrowed to `gpus` (entries that select none are dropped).
absl::StatusOr<spec::MigConfigFile> Narrowed(const spec::MigConfigFile& file,
                                             const std::string& name, const std::set<int>& gpus) {
  absl::StatusOr<const std::vector<spec::ConfigEntry>*> entries = spec::SelectConfig(file, name);
  if (!entries.ok()) return entries.status();
  std::vector<spec::ConfigEntry> narrowed;
  for (const spec::ConfigEntry& entry : **entries) {
    spec::ConfigEntry copy = entry;
    copy.devices.all = false;
    copy.devices.indices.clear();
    for (int gpu : gpus) {
      if (entry.devices.Includes(gpu)) copy.devices.indices.push_back(gpu);
    }
    if (copy.devices.indices.empty()) continue;
    if (!copy.mig_enabled) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the fixed layout's entry at line ", entry.line,
          " turns MIG off; the DRA driver does not change MIG modes (use gpuslice apply)"));
    }
    narrowed.push_back(std::move(copy));
  }
  spec::MigConfigFile out;
  out.configs.emplace_back(name.empty() ? file.configs[0].first : name, std::move(narrowed));
  return out;
}

}  // namespace

absl::StatusOr<std::set<int>> NodeDriver::Relay() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.fixed_layout) return std::set<int>{};
  absl::StatusOr<Offer> offer = NodeDriverOps::OfferNow(*this);
  if (!offer.ok()) return offer.status();
  std::set<int> candidates;
  for (const GpuInfo& gpu : offer->gpus) {
    if (gpu.fixed && drain_.contains(gpu.index)) candidates.insert(gpu.index);
  }
  for (const auto& [uid, claim] : checkpoint_.claims) {
    for (const DeviceRecord& r : claim.devices) candidates.erase(r.gpu);
  }
  if (candidates.empty()) return std::set<int>{};
  absl::StatusOr<spec::MigConfigFile> narrowed =
      Narrowed(*options_.fixed_layout, options_.fixed_layout_name, candidates);
  if (!narrowed.ok()) return narrowed.status();
  const std::string config = narrowed->configs[0].first;
  absl::StatusOr<std::vector<std::string>> differences =
      agent::AssertConfig(backend_, catalog_, *narrowed, config, /*mode_only=*/false);
  if (!differences.ok()) return differences.status();
  if (differences->empty()) return std::set<int>{};
  agent::ApplyRequest request;
  request.file = &*narrowed;
  request.file_path = "the DRA driver's fixed layout";
  request.config_name = config;
  request.skip_reset = true;
  request.journal_path =
      !options_.apply_journal.empty()
          ? options_.apply_journal
          : (std::filesystem::path(options_.checkpoint_path).parent_path() / "apply.journal")
                .string();
  absl::StatusOr<agent::ApplyResult> applied = agent::ApplyConfig(
      backend_, catalog_, request, [this](const std::string& line) { Log(line); });
  ++version_;
  if (!applied.ok()) return applied.status();
  Log(absl::StrCat("re-laid drained GPUs ", absl::StrJoin(candidates, ","), " to '", config,
                   "': kept ", applied->kept, ", created ", applied->created, ", destroyed ",
                   applied->destroyed));
  return candidates;
}

}  // namespace gpuslice::dra
