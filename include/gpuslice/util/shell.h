// gpuslice/util/shell.h — text a shell reads: quoting for `eval`, and the words that survive an
// unquoted command substitution (`docker run $(gpuslice lease docker-args N)`) unchanged.
// Pure functions.
#pragma once

#include <string>
#include <string_view>

namespace gpuslice::util {

// `text` as one shell word in single quotes: `'` becomes `'\''`, so nothing inside is expanded.
inline std::string ShellQuote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

// A name `export NAME=...` accepts: a letter or '_', then letters, digits and '_'.
inline bool IsEnvName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// True when an unquoted expansion leaves `word` one word, as it is: no white space (field
// splitting), no glob characters, nothing but letters, digits and `_ . / : = , @ + % - "`.
inline bool IsSplitSafeWord(std::string_view word) {
  if (word.empty()) return false;
  for (char c : word) {
    const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && std::string_view("_./:=,@+%-\"").find(c) == std::string_view::npos) return false;
  }
  return true;
}

}  // namespace gpuslice::util
