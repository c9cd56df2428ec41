// gpuslice/util/strings.h — small text helpers shared by the parsers.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace gpuslice::util {

// `text` without leading and trailing white space.
inline std::string Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return std::string(text);
}

// `text` in lower case (ASCII).
inline std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace gpuslice::util
