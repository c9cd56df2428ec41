// The layout text users write (gpuslice/geometry/layout_text.h: "3g.40gb,1g.10gb", "9,19,19",
// "9@4", "2x1g.10gb", "3g.40gb[1c,2c]") on arbitrary text, for an H100 and an A100. Beside the
// sanitizers: a layout that resolves without error has only allowed, non-overlapping placements.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gpuslice/geometry/layout_text.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;
  static const gpuslice::geometry::Shape h100(*gpuslice::hw::Catalog::Builtin().Find("H100-80GB"));
  static const gpuslice::geometry::Shape a100(*gpuslice::hw::Catalog::Builtin().Find("A100-40GB"));
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const gpuslice::geometry::Shape* shape : {&h100, &a100}) {
    absl::StatusOr<gpuslice::geometry::ParsedLayout> parsed =
        gpuslice::geometry::ParseLayout(*shape, text);
    if (!parsed.ok()) continue;
    const gpuslice::geometry::ResolvedLayout resolved =
        gpuslice::geometry::ResolveLayout(*shape, *parsed, gpuslice::geometry::Rules{});
    (void)resolved;
  }
  return 0;
}
