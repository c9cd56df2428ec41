// gpuslice/util/utf8.h — UTF-8 checks and cuts that never split a character. Pure functions.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace gpuslice::util {

// The length of the valid UTF-8 sequence starting at `text[at]` (1-4), or 0 when it is not one
// (a stray continuation byte, a truncated or overlong sequence, a surrogate, past U+10FFFF).
inline std::size_t Utf8SequenceLength(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned int code = 0;
  if ((lead & 0xe0) == 0xc0) {
    length = 2;
    code = lead & 0x1fu;
  } else if ((lead & 0xf0) == 0xe0) {
    length = 3;
    code = lead & 0x0fu;
  } else if ((lead & 0xf8) == 0xf0) {
    length = 4;
    code = lead & 0x07u;
  } else {
    return 0;
  }
  if (at + length > text.size()) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (byte(at + i) & 0x3fu);
  }
  const unsigned int least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < least[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

inline bool IsValidUtf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n = Utf8SequenceLength(text, at);
    if (n == 0) return false;
    at += n;
  }
  return true;
}

// Valid UTF-8 with no control character (C0, DEL; tab allowed when `allow_tab`): text a person
// wrote, safe to store, print and put in JSON.
inline bool IsPrintableUtf8(std::string_view text, bool allow_tab = false) {
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && !(allow_tab && c == '\t')) || u == 0x7f) return false;
  }
  return IsValidUtf8(text);
}

// The longest prefix of valid UTF-8 `text` of at most `max_bytes` bytes that ends between two
// characters.
inline std::string Utf8Prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
  return std::string(text.substr(0, end));
}

// `text` made safe to show on a terminal: every control character (C0 with tab and newline, DEL,
// and the C1 range U+0080..U+009F, which some terminals take as escape sequences) and every byte
// that is not part of valid UTF-8 is written as \xNN; all else is kept. For text that came from
// elsewhere (a server's error message, a table cell) before it is printed.
inline std::string ForTerminal(std::string_view text) {
  std::string shown;
  shown.reserve(text.size());
  const auto escape = [&shown](unsigned char byte) {
    char code[5];
    std::snprintf(code, sizeof code, "\\x%02x", byte);
    shown += code;
  };
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n = Utf8SequenceLength(text, at);
    const auto lead = static_cast<unsigned char>(text[at]);
    const bool c0 = n == 1 && (lead < 0x20 || lead == 0x7f);
    const bool c1 = n == 2 && lead == 0xc2 && static_cast<unsigned char>(text[at + 1]) < 0xa0;
    if (n == 0 || c0 || c1) {
      for (std::size_t i = 0; i < (n == 0 ? 1 : n); ++i) {
        escape(static_cast<unsigned char>(text[at + i]));
      }
      at += n == 0 ? 1 : n;
      continue;
    }
    shown.append(text.substr(at, n));
    at += n;
  }
  return shown;
}

}  // namespace gpuslice::util
