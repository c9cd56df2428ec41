// Shared helpers for the gpuslice tests: catalog models, shapes and profile lookups by name.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::testing {

// A catalog file with one made-up MIG GPU, for rules the built-in models cannot exercise (caps
// tighter than the grid, engine counts). `profiles` holds the profile rows (YAML, each starting
// with "    - {"); `ci_table`, if given, is a whole compute_instance_profiles section.
inline std::string TestMigGpuYaml(std::string_view id, std::string_view pci_id, int compute_slices,
                                  int placement_units, std::int64_t memory_mib,
                                  std::string_view profiles, std::string_view ci_table = "") {
  std::string yaml = "version: 1\n";
  yaml += ci_table;
  yaml += "gpus:\n- id: " + std::string(id) + "\n  display_name: \"" + std::string(id) +
          " test GPU\"\n  pci_device_ids: [\"" + std::string(pci_id) +
          "\"]\n  architecture: Testarch\n  chip: T1\n  compute_capability: \"9.0\"\n" +
          "  memory_mib: " + std::to_string(memory_mib) +
          "\n  sms: 100\n  confidence: unconfirmed\n  mig:\n    compute_slices: " +
          std::to_string(compute_slices) +
          "\n    placement_units: " + std::to_string(placement_units) +
          "\n    sms: 100\n    min_driver: \"R525\"\n    default_placement: {confidence: "
          "unconfirmed}\n    profiles:\n";
  yaml += profiles;
  return yaml;
}

// The built-in model with this id (or alias); aborts the test binary if it does not exist, since
// every caller names a model the catalog must have.
inline const hw::GpuModel& Model(std::string_view id) {
  const hw::GpuModel* model = hw::Catalog::Builtin().Find(id);
  if (model == nullptr) {
    ADD_FAILURE() << "model '" << id << "' is not in the built-in catalog";
    std::abort();
  }
  return *model;
}

// One Shape per built-in model, kept for the whole run (catalog models live forever).
inline const geometry::Shape& ShapeOf(std::string_view id) {
  static std::map<std::string, std::unique_ptr<geometry::Shape>, std::less<>> shapes;
  const hw::GpuModel& model = Model(id);
  auto it = shapes.find(model.id);
  if (it == shapes.end()) {
    it = shapes.emplace(model.id, std::make_unique<geometry::Shape>(model)).first;
  }
  return *it->second;
}

// Ids of every MIG-capable model of the built-in catalog, in catalog order.
inline std::vector<std::string> MigModelIds() {
  std::vector<std::string> ids;
  for (const hw::GpuModel& model : hw::Catalog::Builtin().models()) {
    if (model.mig_capable()) ids.push_back(model.id);
  }
  return ids;
}

// Index of the profile `name` of `shape`'s model; aborts if missing.
inline int P(const geometry::Shape& shape, std::string_view name) {
  const hw::GiProfile* profile = shape.mig().FindProfile(name);
  if (profile == nullptr) {
    ADD_FAILURE() << shape.model().id << " has no profile '" << name << "'";
    std::abort();
  }
  return shape.mig().IndexOf(*profile);
}

inline geometry::Placed At(const geometry::Shape& shape, std::string_view name, int start) {
  return {static_cast<std::uint8_t>(P(shape, name)), static_cast<std::uint8_t>(start)};
}

inline geometry::Placed At(int profile, int start) {
  return {static_cast<std::uint8_t>(profile), static_cast<std::uint8_t>(start)};
}

// A multiset from profile names, e.g. Multiset(shape, {"3g.20gb", "1g.5gb", "1g.5gb"}).
inline geometry::Counts Multiset(const geometry::Shape& shape,
                                 const std::vector<std::string>& names) {
  geometry::Counts counts{};
  for (const std::string& name : names) ++counts[static_cast<size_t>(P(shape, name))];
  return counts;
}

// "3g.20gb@4, 1g.5gb@0" for failure messages.
inline std::string Show(const geometry::Shape& shape, const std::vector<geometry::Placed>& layout) {
  std::string text;
  for (const geometry::Placed& placed : layout) {
    if (!text.empty()) text += ", ";
    text += shape.profile(placed.profile).name + "@" + std::to_string(placed.start);
  }
  return text.empty() ? "(empty)" : text;
}

}  // namespace gpuslice::testing
