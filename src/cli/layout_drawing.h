// A picture of one GPU's memory slices with each GPU instance in its place, the way a person draws
// it on a whiteboard:
//
//   unit      0         1         2         3         4         5         6         7
//          ┌─────────┬─────────┬─────────┬─────────┬───────────────────────────────────────┐
//          │ 1g.5gb  │ 1g.5gb  │  free   │  free   │                3g.20gb                │
//          │  GI 7   │  GI 8   │         │         │                 GI 2                  │
//          └─────────┴─────────┴─────────┴─────────┴───────────────────────────────────────┘
#pragma once

#include <span>
#include <string>
#include <vector>

#include "gpuslice/geometry/compute_instances.h"
#include "gpuslice/geometry/shape.h"

namespace gpuslice::cli {

// REQUIRES: `layout` is valid on `shape` (no overlaps). `cis` is empty or has one entry per
// instance (an empty entry = the default CI).
std::string DrawLayout(const geometry::Shape& shape, std::span<const geometry::Placed> layout,
                       const std::vector<std::vector<geometry::CiPlaced>>& cis,
                       const std::string& indent = "  ");

}  // namespace gpuslice::cli
