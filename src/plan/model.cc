#include "gpuslice/plan/model.h"

#include "gpuslice/util/strings.h"

namespace gpuslice::plan {

std::string_view ToString(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kInference:
      return "inference";
    case WorkloadKind::kNotebook:
      return "notebook";
    case WorkloadKind::kBatch:
      return "batch";
    case WorkloadKind::kFineTune:
      return "fine-tune";
  }
  return "unknown";
}

std::optional<WorkloadKind> ParseWorkloadKind(std::string_view text) {
  const std::string key = util::Lower(util::Trim(text));
  if (key == "inference") return WorkloadKind::kInference;
  if (key == "notebook") return WorkloadKind::kNotebook;
  if (key == "batch") return WorkloadKind::kBatch;
  if (key == "fine-tune" || key == "finetune" || key == "fine_tune") return WorkloadKind::kFineTune;
  return std::nullopt;
}

}  // namespace gpuslice::plan
