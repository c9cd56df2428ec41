// The HTTP/1.1 messages of the allocation service's transport (src/api/http_server.h), and the
// strict parser of a request's head.
//
// The parser accepts only what RFC 9112 allows a client to send, and nothing a proxy in front of
// the server could read differently:
//   * every line ends in CRLF; a bare CR or LF, a NUL or another control byte is an error;
//   * the request line is `METHOD SP origin-form SP HTTP/1.x`; the target is visible ASCII;
//   * a header line is `name: value` with a token name and no space before the colon; a folded
//     line (starting with space or tab) is an error;
//   * at most one Content-Length (digits only), exactly one Host in HTTP/1.1, and no
//     Transfer-Encoding at all (bodies are sent with Content-Length);
//   * the head is at most `max_head_bytes` and `max_headers` lines (431 past either).
// Every error names the HTTP status to answer with; the connection is then closed, since the
// rest of its bytes cannot be trusted to start a request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuslice::api::http {

// Header names compare without case.
struct CaseInsensitiveLess {
  bool operator()(std::string_view a, std::string_view b) const;
  using is_transparent = void;
};
using Headers = std::multimap<std::string, std::string, CaseInsensitiveLess>;

struct Request {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // the target up to '?', not decoded
  int version_minor = 1;
  Headers headers;
  std::multimap<std::string, std::string> params;  // the query, percent-decoded
  std::string body;
  std::smatch matches;    // the route's captures over `path`
  std::string remote_ip;  // the peer's numeric address
  // Over TLS with a verified client certificate: its common name and DNS names.
  std::vector<std::string> client_certificate_names;

  bool has_header(std::string_view name) const { return headers.find(name) != headers.end(); }
  // The first value of a header, or "".
  std::string get_header_value(std::string_view name) const;
  bool has_param(const std::string& name) const { return params.contains(name); }
  // The first value of a query parameter, or "".
  std::string get_param_value(const std::string& name) const;
};

struct Response {
  int status = 200;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond the framing ones
  bool close = false;  // close the connection after this response

  void set_content(std::string text, std::string type) {
    body = std::move(text);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

struct HeadLimits {
  std::size_t max_head_bytes = 16 * 1024;
  std::size_t max_headers = 100;
};

// The framing facts the transport needs from a parsed head.
struct RequestHead {
  Request request;  // method, target, path, version, headers and params; no body yet
  std::int64_t content_length = 0;
  bool keep_alive = true;         // HTTP/1.1 unless "Connection: close"; 1.0 only with keep-alive
  bool expects_continue = false;  // "Expect: 100-continue"
};

struct HeadParse {
  enum class State { kIncomplete, kComplete, kError };
  State state = State::kIncomplete;
  std::size_t head_bytes = 0;  // kComplete: the bytes the head took, its blank line included
  RequestHead head;            // kComplete
  int error_status = 0;        // kError: 400, 411, 417, 431, 501 or 505
  std::string error;           // kError: what was wrong, for the client
};

// Parses the head at the start of `bytes`. kIncomplete while the head may still end within the
// limits; every byte seen so far is checked, so a bad line is refused before the head is whole.
HeadParse ParseRequestHead(std::string_view bytes, const HeadLimits& limits = {});

// Percent-decodes a query component ('+' is a space). False for a malformed escape.
bool DecodeQueryComponent(std::string_view in, std::string* out);

// The status line's reason phrase ("Not Found"); "Unknown" for codes it does not know.
const char* ReasonPhrase(int status);

// A complete response: status line, Content-Type, Content-Length, Connection: close when
// `response.close`, the extra headers, then the body.
std::string SerializeResponse(const Response& response);

}  // namespace gpuslice::api::http
