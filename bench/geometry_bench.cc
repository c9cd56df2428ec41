// Micro-benchmarks of the layout engine (docs/BENCHMARKS.md has the figures and the command).
// The planner and the online placer call these millions of times, so each must stay far below a
// microsecond.
#include <benchmark/benchmark.h>

#include <vector>

#include "gpuslice/geometry/enumerate.h"
#include "gpuslice/geometry/layout_text.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"

namespace {

using gpuslice::geometry::Counts;
using gpuslice::geometry::Occupancy;
using gpuslice::geometry::Placed;
using gpuslice::geometry::Shape;

const Shape& ShapeOf(const char* name) {
  static std::vector<std::unique_ptr<Shape>> shapes;
  const gpuslice::hw::GpuModel* model = gpuslice::hw::Catalog::Builtin().Find(name);
  for (const auto& shape : shapes) {
    if (&shape->model() == model) return *shape;
  }
  shapes.push_back(std::make_unique<Shape>(*model));
  return *shapes.back();
}

int Profile(const Shape& shape, const char* name) {
  return shape.mig().IndexOf(*shape.mig().FindProfile(name));
}

std::vector<Placed> Layout(const Shape& shape,
                           std::initializer_list<std::pair<const char*, int>> items) {
  std::vector<Placed> layout;
  for (const auto& [name, start] : items) {
    layout.push_back(
        {static_cast<std::uint8_t>(Profile(shape, name)), static_cast<std::uint8_t>(start)});
  }
  return layout;
}

// Validate a full 7-instance layout (A100-40GB, 1g.5gb+me + 6x1g.5gb).
void BM_Validate7Instances(benchmark::State& state) {
  const Shape& shape = ShapeOf("A100-40GB");
  const auto layout = Layout(shape, {{"1g.5gb+me", 0},
                                     {"1g.5gb", 1},
                                     {"1g.5gb", 2},
                                     {"1g.5gb", 3},
                                     {"1g.5gb", 4},
                                     {"1g.5gb", 5},
                                     {"1g.5gb", 6}});
  for (auto _ : state) benchmark::DoNotOptimize(shape.Validate(layout));
}
BENCHMARK(BM_Validate7Instances);

// Validate a mixed 4-instance layout (H100-80GB 3g.40gb@4, 2g.20gb@0, 1g.10gb@2, 1g.10gb@3).
void BM_ValidateMixed(benchmark::State& state) {
  const Shape& shape = ShapeOf("H100-80GB");
  const auto layout =
      Layout(shape, {{"3g.40gb", 4}, {"2g.20gb", 0}, {"1g.10gb", 2}, {"1g.10gb", 3}});
  for (auto _ : state) benchmark::DoNotOptimize(shape.Validate(layout));
}
BENCHMARK(BM_ValidateMixed);

// Place a 7-profile multiset (A100-40GB: 1g.5gb+me + 6x1g.5gb) exactly on an empty GPU.
void BM_Place7Instances(benchmark::State& state) {
  const Shape& shape = ShapeOf("A100-40GB");
  Counts wanted{};
  wanted[static_cast<size_t>(Profile(shape, "1g.5gb"))] = 6;
  wanted[static_cast<size_t>(Profile(shape, "1g.5gb+me"))] = 1;
  std::vector<Placed> out;
  out.reserve(16);
  for (auto _ : state) benchmark::DoNotOptimize(shape.Place(Occupancy{}, wanted, {}, &out));
}
BENCHMARK(BM_Place7Instances);

// Place a mixed multiset whose order matters for the driver (2g, 1g, 1g, 3g on A100).
void BM_PlaceMixed(benchmark::State& state) {
  const Shape& shape = ShapeOf("A100-40GB");
  Counts wanted{};
  wanted[static_cast<size_t>(Profile(shape, "1g.5gb"))] = 2;
  wanted[static_cast<size_t>(Profile(shape, "2g.10gb"))] = 1;
  wanted[static_cast<size_t>(Profile(shape, "3g.20gb"))] = 1;
  std::vector<Placed> out;
  out.reserve(16);
  for (auto _ : state) benchmark::DoNotOptimize(shape.Place(Occupancy{}, wanted, {}, &out));
}
BENCHMARK(BM_PlaceMixed);

// An infeasible multiset that passes the counting rules (3x2g + 2x1g: a 1g can never start at 7),
// so the search has to exhaust every arrangement.
void BM_PlaceInfeasible(benchmark::State& state) {
  const Shape& shape = ShapeOf("A100-40GB");
  Counts wanted{};
  wanted[static_cast<size_t>(Profile(shape, "2g.10gb"))] = 3;
  wanted[static_cast<size_t>(Profile(shape, "1g.5gb"))] = 2;
  std::vector<Placed> out;
  out.reserve(16);
  for (auto _ : state) benchmark::DoNotOptimize(shape.Place(Occupancy{}, wanted, {}, &out));
}
BENCHMARK(BM_PlaceInfeasible);

// Free capacity of every profile on a partly used H100 (what -lgip shows).
void BM_FreeCountAllProfiles(benchmark::State& state) {
  const Shape& shape = ShapeOf("H100-80GB");
  const Occupancy occupancy = shape.OccupancyOf(Layout(shape, {{"3g.40gb", 4}, {"1g.10gb", 0}}));
  for (auto _ : state) {
    int total = 0;
    for (int p = 0; p < shape.profile_count(); ++p) total += shape.FreeCount(occupancy, p);
    benchmark::DoNotOptimize(total);
  }
}
BENCHMARK(BM_FreeCountAllProfiles);

// Parse and resolve "9,19,19" as `gpuslice check` does (includes string handling).
void BM_ParseAndResolve(benchmark::State& state) {
  const Shape& shape = ShapeOf("A100-40GB");
  for (auto _ : state) {
    auto parsed = gpuslice::geometry::ParseLayout(shape, "9,19,19");
    benchmark::DoNotOptimize(gpuslice::geometry::ResolveLayout(shape, *parsed));
  }
}
BENCHMARK(BM_ParseAndResolve);

// Enumerate every maximal layout of a 7-slice part with all profiles (239 layouts).
void BM_EnumerateMaximalAll(benchmark::State& state) {
  const Shape& shape = ShapeOf("H100-80GB");
  gpuslice::geometry::EnumerateOptions options;
  options.profiles = gpuslice::geometry::AllProfiles(shape);
  options.maximal_only = true;
  for (auto _ : state)
    benchmark::DoNotOptimize(gpuslice::geometry::EnumerateLayouts(shape, options));
}
BENCHMARK(BM_EnumerateMaximalAll)->Unit(benchmark::kMicrosecond);

// Enumerate every valid layout (not only maximal) of RTX PRO 6000 with all 11 profiles.
void BM_EnumerateAllRtxPro(benchmark::State& state) {
  const Shape& shape = ShapeOf("RTX-PRO-6000-Blackwell");
  gpuslice::geometry::EnumerateOptions options;
  options.profiles = gpuslice::geometry::AllProfiles(shape);
  for (auto _ : state)
    benchmark::DoNotOptimize(gpuslice::geometry::EnumerateLayouts(shape, options));
}
BENCHMARK(BM_EnumerateAllRtxPro)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
