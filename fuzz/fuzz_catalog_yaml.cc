// The GPU catalog's YAML (gpuslice/hw/catalog.h, --catalog FILE) on arbitrary text. Beside the
// sanitizers: a catalog that loads gives every MIG model a shape the layout engine accepts.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 128 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpuslice::hw::Catalog> catalog = gpuslice::hw::Catalog::FromYaml(text, "fuzz");
  if (!catalog.ok()) return 0;
  for (const gpuslice::hw::GpuModel& model : catalog->models()) {
    if (model.mig_capable()) (void)gpuslice::geometry::Shape(model);
  }
  return 0;
}
