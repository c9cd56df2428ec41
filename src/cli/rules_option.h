// The --driver option shared by `check` and `layouts`.
#pragma once

#include <charconv>
#include <optional>
#include <string>

#include "common.h"

namespace gpuslice::cli {

// "" -> newest driver; "R470", "470", "470.57.02" -> branch 470. Prints an error and returns
// nullopt for anything else.
inline std::optional<geometry::Rules> ParseRulesOption(const std::string& driver) {
  geometry::Rules rules;
  if (driver.empty() || driver == "newest" || driver == "latest") return rules;
  std::string_view digits = driver;
  if (digits.front() == 'R' || digits.front() == 'r') digits.remove_prefix(1);
  int branch = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), branch);
  if (error != std::errc() || branch < 100 || branch > 9999 ||
      (end != digits.data() + digits.size() && *end != '.')) {
    PrintError("bad --driver '" + driver +
               "': expected a driver branch like R510, 525 or 525.85.12");
    return std::nullopt;
  }
  rules.driver_branch = branch;
  return rules;
}

}  // namespace gpuslice::cli
