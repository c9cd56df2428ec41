// NVIDIA mig-parted's config and hooks files (gpuslice/spec) on arbitrary text: parsed, each
// config selected and resolved for every GPU model of the catalog. Beside the sanitizers, a
// parsed file survives these steps without an exception escaping.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpuslice/hw/catalog.h"
#include "gpuslice/spec/hooks.h"
#include "gpuslice/spec/mig_parted.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 16 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)gpuslice::spec::ParseHooksFile(text, "fuzz");
  absl::StatusOr<gpuslice::spec::MigConfigFile> file =
      gpuslice::spec::ParseMigPartedConfig(text, "fuzz");
  if (!file.ok()) return 0;
  for (const auto& [name, entries] : file->configs) {
    for (const gpuslice::spec::ConfigEntry& entry : entries) {
      for (const char* model : {"H100-80GB", "A100-40GB", "A30-24GB"}) {
        (void)gpuslice::spec::ResolveEntry(entry, *gpuslice::hw::Catalog::Builtin().Find(model));
      }
    }
  }
  return 0;
}
