#include "api/http_message.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpuslice::api::http {
namespace {

constexpr std::string_view kCrlf = "\r\n";

// (absl's string functions take absl::string_view, which Debian's build does not alias to
// std::string_view; these few are written here.)
std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::string_view StripSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return absl::ascii_tolower(static_cast<unsigned char>(x)) ==
                  absl::ascii_tolower(static_cast<unsigned char>(y));
         });
}

bool IsTokenChar(unsigned char c) {
  if (std::isalnum(c)) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return IsTokenChar(static_cast<unsigned char>(c));
  });
}

// A field value's bytes: visible ASCII, space, tab and obs-text; no other control byte.
bool IsFieldValue(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == '\t' || c == ' ' || (c >= 0x21 && c != 0x7f);
  });
}

bool IsVisibleAscii(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c >= 0x21 && c <= 0x7e;
  });
}

HeadParse Error(int status, std::string message) {
  HeadParse out;
  out.state = HeadParse::State::kError;
  out.error_status = status;
  out.error = std::move(message);
  return out;
}

// Bytes that can never be part of a head: NUL, a LF not after CR, a CR not before LF.
std::string_view FirstBadByte(std::string_view bytes) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c == '\0') return "a NUL byte in the request head";
    if (c == '\n' && (i == 0 || bytes[i - 1] != '\r')) return "a bare LF in the request head";
    if (c == '\r' && i + 1 < bytes.size() && bytes[i + 1] != '\n') {
      return "a bare CR in the request head";
    }
  }
  return {};
}

// The request line: METHOD SP origin-form SP HTTP/1.x.
HeadParse ParseRequestLine(std::string_view line, Request& request) {
  const std::vector<std::string_view> parts = Split(line, ' ');
  if (parts.size() != 3) return Error(400, "malformed request line");
  if (!IsToken(parts[0]) || parts[0].size() > 32) return Error(400, "malformed method");
  if (!IsVisibleAscii(parts[1]) || parts[1][0] != '/') {
    return Error(400, "the request target must be a path starting with '/'");
  }
  const std::string_view version = parts[2];
  if (version == "HTTP/1.1") {
    request.version_minor = 1;
  } else if (version == "HTTP/1.0") {
    request.version_minor = 0;
  } else if (version.size() == 8 && version.substr(0, 5) == "HTTP/" &&
             std::isdigit(static_cast<unsigned char>(version[5])) && version[6] == '.' &&
             std::isdigit(static_cast<unsigned char>(version[7]))) {
    return Error(505, "only HTTP/1.0 and HTTP/1.1 are served");
  } else {
    return Error(400, "malformed HTTP version");
  }
  request.method = std::string(parts[0]);
  request.target = std::string(parts[1]);
  const std::size_t question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question == std::string::npos) return HeadParse{};
  for (std::string_view pair : Split(std::string_view(request.target).substr(question + 1), '&')) {
    if (pair.empty()) continue;
    const std::size_t eq = pair.find('=');
    std::string key;
    std::string value;
    if (!DecodeQueryComponent(pair.substr(0, eq), &key) ||
        (eq != std::string_view::npos && !DecodeQueryComponent(pair.substr(eq + 1), &value))) {
      return Error(400, "malformed percent-encoding in the query");
    }
    request.params.emplace(std::move(key), std::move(value));
  }
  return HeadParse{};
}

// One header line, added to `request.headers`.
HeadParse ParseHeaderLine(std::string_view line, Request& request) {
  if (line.front() == ' ' || line.front() == '\t') {
    return Error(400, "folded header lines are not accepted");
  }
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Error(400, "a header line without ':'");
  const std::string_view name = line.substr(0, colon);
  if (!IsToken(name)) return Error(400, "malformed header name");
  const std::string_view value = StripSpaces(line.substr(colon + 1));
  if (!IsFieldValue(value)) return Error(400, "a control byte in a header value");
  request.headers.emplace(std::string(name), std::string(value));
  return HeadParse{};
}

// Framing and connection facts from the parsed headers.
HeadParse Frame(RequestHead& head) {
  const Headers& headers = head.request.headers;
  if (headers.count("Transfer-Encoding") > 0) {
    if (headers.count("Content-Length") > 0) {
      return Error(400, "both Transfer-Encoding and Content-Length");
    }
    return Error(411, "chunked bodies are not accepted; send Content-Length");
  }
  if (headers.count("Content-Length") > 1) return Error(400, "more than one Content-Length");
  if (auto it = headers.find("Content-Length"); it != headers.end()) {
    const std::string& text = it->second;
    if (text.empty() || text.size() > 18 ||
        !std::all_of(text.begin(), text.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
        !absl::SimpleAtoi(text, &head.content_length)) {
      return Error(400, "malformed Content-Length");
    }
  }
  const std::size_t hosts = headers.count("Host");
  if (hosts > 1 || (hosts == 0 && head.request.version_minor == 1)) {
    return Error(400, "an HTTP/1.1 request needs exactly one Host header");
  }
  head.keep_alive = head.request.version_minor == 1;
  for (auto [it, end] = headers.equal_range("Connection"); it != end; ++it) {
    for (std::string_view option : Split(it->second, ',')) {
      option = StripSpaces(option);
      if (EqualsNoCase(option, "close")) head.keep_alive = false;
      if (EqualsNoCase(option, "keep-alive") && head.request.version_minor == 0) {
        head.keep_alive = true;
      }
    }
  }
  if (auto it = headers.find("Expect"); it != headers.end()) {
    if (!EqualsNoCase(it->second, "100-continue") || headers.count("Expect") > 1) {
      return Error(417, "only 'Expect: 100-continue' is understood");
    }
    head.expects_continue = true;
  }
  return HeadParse{};
}

}  // namespace

bool CaseInsensitiveLess::operator()(std::string_view a, std::string_view b) const {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return absl::ascii_tolower(static_cast<unsigned char>(x)) <
           absl::ascii_tolower(static_cast<unsigned char>(y));
  });
}

std::string Request::get_header_value(std::string_view name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

std::string Request::get_param_value(const std::string& name) const {
  auto it = params.find(name);
  return it == params.end() ? std::string() : it->second;
}

HeadParse ParseRequestHead(std::string_view bytes, const HeadLimits& limits) {
  const std::size_t end = bytes.find("\r\n\r\n");
  const std::string_view seen = end == std::string_view::npos ? bytes : bytes.substr(0, end + 4);
  if (std::string_view bad = FirstBadByte(seen); !bad.empty()) return Error(400, std::string(bad));
  if (seen.size() > limits.max_head_bytes) {
    return Error(431, absl::StrCat("the request head is over ", limits.max_head_bytes, " bytes"));
  }
  if (end == std::string_view::npos) return HeadParse{};

  HeadParse out;
  Request& request = out.head.request;
  std::string_view rest = seen.substr(0, end + 2);  // every line with its CRLF
  std::size_t line_end = rest.find(kCrlf);
  if (HeadParse r = ParseRequestLine(rest.substr(0, line_end), request);
      r.state == HeadParse::State::kError) {
    return r;
  }
  rest.remove_prefix(line_end + 2);
  std::size_t count = 0;
  while (!rest.empty()) {
    line_end = rest.find(kCrlf);
    if (++count > limits.max_headers) {
      return Error(431, absl::StrCat("more than ", limits.max_headers, " header lines"));
    }
    if (HeadParse r = ParseHeaderLine(rest.substr(0, line_end), request);
        r.state == HeadParse::State::kError) {
      return r;
    }
    rest.remove_prefix(line_end + 2);
  }
  if (HeadParse r = Frame(out.head); r.state == HeadParse::State::kError) return r;
  out.state = HeadParse::State::kComplete;
  out.head_bytes = end + 4;
  return out;
}

bool DecodeQueryComponent(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '+') {
      out->push_back(' ');
    } else if (c != '%') {
      out->push_back(c);
    } else {
      if (i + 2 >= in.size()) return false;  // '%' needs two hex digits after it
      const auto hex = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        return -1;
      };
      const int hi = hex(in[i + 1]);
      const int lo = hex(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    }
  }
  return true;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string SerializeResponse(const Response& response) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", response.status, " ", ReasonPhrase(response.status), "\r\n");
  if (!response.content_type.empty()) {
    absl::StrAppend(&out, "Content-Type: ", response.content_type, "\r\n");
  }
  absl::StrAppend(&out, "Content-Length: ", response.body.size(), "\r\n");
  if (response.close) out += "Connection: close\r\n";
  for (const auto& [name, value] : response.headers) {
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  out += "\r\n";
  out += response.body;
  return out;
}

}  // namespace gpuslice::api::http
