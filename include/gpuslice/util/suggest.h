// "Did you mean": the known names closest to one a user mistyped (GPU models, subcommands,
// classes, profiles). Pure.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::util {

// Levenshtein distance: insertions, deletions and substitutions, each 1.
std::size_t EditDistance(std::string_view a, std::string_view b);

// Up to `limit` of `candidates` close to `name`, closest first (ties in the candidates' order):
// within an edit distance of max(1, (|name| + 1) / 3), or starting with `name` (at least two
// characters), case-insensitively. Empty when nothing is close.
std::vector<std::string> Closest(std::string_view name, const std::vector<std::string>& candidates,
                                 std::size_t limit = 3);

// "did you mean 'a'?", "did you mean 'a' or 'b'?", "did you mean 'a', 'b' or 'c'?"; "" for none.
std::string DidYouMean(const std::vector<std::string>& suggestions);

}  // namespace gpuslice::util
