// gpuslice/metrics/exposition.h
//
// The Prometheus text exposition format (version 0.0.4, what `promtool check metrics` and every
// Prometheus server read), written from metric families built in memory:
//
//   # HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
//   # TYPE DCGM_FI_DEV_FB_USED gauge
//   DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-…",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb"} 4096
//
// Rules enforced (Validate; Write refuses what Validate refuses):
//   * metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* and do not
//     start with "__" (reserved by Prometheus);
//   * a family's samples have distinct label sets, and no label name twice in one sample;
//   * counters are not negative; a counter family's name ends in "_total" (promtool's lint);
//   * family names are unique in one exposition.
// Label values are escaped (backslash, double quote, newline), HELP text too (backslash,
// newline). Values are written in the shortest form that reads back exactly; NaN and ±Inf as
// Prometheus spells them. A figure that is not known is not a sample: leave it out (the
// monitoring rule "absent, never a made-up zero").
//
// Pure and deterministic: the output depends only on the families and their order.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace gpuslice::metrics {

enum class MetricType { kGauge, kCounter };

struct Sample {
  std::vector<std::pair<std::string, std::string>> labels;  // name, value; written in this order
  double value = 0;
};

struct Family {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<Sample> samples;  // a family without samples is written as HELP and TYPE only
};

// Why the families cannot be exposed as they are (InvalidArgument naming the family, sample and
// rule), or OK.
absl::Status Validate(const std::vector<Family>& families);

// The exposition text, families in the given order. Fails as Validate does.
absl::StatusOr<std::string> Write(const std::vector<Family>& families);

// The families with only the samples whose label `label` has the value `value` (a machine's
// series: label "Hostname"); families left without samples keep their HELP and TYPE lines.
std::vector<Family> OnlyLabelled(std::vector<Family> families, const std::string& label,
                                 const std::string& value);

// The content type of the format, for the HTTP response.
inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace gpuslice::metrics
