#include "gpuslice/util/suggest.h"

#include <algorithm>
#include <utility>

#include "gpuslice/util/strings.h"

namespace gpuslice::util {

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> Closest(std::string_view name, const std::vector<std::string>& candidates,
                                 std::size_t limit) {
  const std::string key = Lower(name);
  const std::size_t threshold = std::max<std::size_t>(1, (key.size() + 1) / 3);
  std::vector<std::pair<std::size_t, std::size_t>> scored;  // distance, candidate index
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::string candidate = Lower(candidates[i]);
    std::size_t distance = EditDistance(key, candidate);
    if (key.size() >= 2 && candidate.starts_with(key))
      distance = std::min<std::size_t>(distance, 1);
    if (distance <= threshold && candidate != key) scored.emplace_back(distance, i);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [distance, index] : scored) {
    if (out.size() == limit) break;
    out.push_back(candidates[index]);
  }
  return out;
}

std::string DidYouMean(const std::vector<std::string>& suggestions) {
  if (suggestions.empty()) return "";
  std::string text = "did you mean ";
  for (std::size_t i = 0; i < suggestions.size(); ++i) {
    if (i > 0) text += i + 1 == suggestions.size() ? " or " : ", ";
    text += "'" + suggestions[i] + "'";
  }
  return text + "?";
}

}  // namespace gpuslice::util
