// gpuslice/hw/catalog.h
//
// The catalog of GPU models gpuslice knows. The built-in catalog is the file src/hw/data/gpus.yaml,
// embedded in the binary at build time; adding a GPU model is adding one entry there
// (docs/CATALOG.md). Users may load more models from their own file with the same format
// (Catalog::FromYaml + Merge).
//
// Thread-safety: a Catalog is immutable once built; Builtin() is initialised once, thread-safely.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/hw/gpu_model.h"

namespace gpuslice::hw {

class Catalog {
 public:
  // The catalog embedded in the binary. Aborts with a message if the embedded data is invalid,
  // which the test suite rules out (tests/hw/catalog_test.cc).
  static const Catalog& Builtin();

  // Parses a catalog file. `origin` names the file in error messages. Strict: unknown keys, missing
  // fields, wrong types, duplicate ids/aliases/PCI ids, placements outside the GPU and inconsistent
  // CI tables are errors (InvalidArgument) that name the file, line and field.
  static absl::StatusOr<Catalog> FromYaml(std::string_view yaml_text, std::string_view origin);

  // Adds the models of `other`; a model whose id already exists replaces it (a user's file can
  // correct the built-in data for a newer driver). Fails if aliases or PCI ids then collide.
  absl::Status Merge(const Catalog& other);

  const std::vector<GpuModel>& models() const { return models_; }

  // Finds a model by canonical id, alias, NVML name, display name or PCI device id ("0x2330",
  // "2330", "0x233010DE", "10de:2330"). Matching ignores case, spaces, '-' and '_'; a leading
  // "NVIDIA " is optional. Returns nullptr when nothing matches.
  const GpuModel* Find(std::string_view name) const;

  // Like Find, but a miss is a NotFound error whose message suggests the closest names.
  absl::StatusOr<const GpuModel*> Resolve(std::string_view name) const;

  // Up to `limit` canonical ids whose names are closest to `name` (edit distance), best first.
  std::vector<std::string> Suggest(std::string_view name, size_t limit = 3) const;

 private:
  absl::Status Validate(std::string_view origin) const;

  std::vector<GpuModel> models_;
};

// Lower-case, drop spaces, '-', '_' and '.', and a leading "nvidia": the key names are compared by.
std::string NormalizeName(std::string_view name);

}  // namespace gpuslice::hw
