// The request-head parser (src/api/http_message.h) on arbitrary bytes. Beside the sanitizers:
// a complete head ends inside the input with its blank line, parsing exactly that head again
// gives the same answer, every error names one of the statuses the transport answers with, and
// nothing the parser accepts holds a control byte in a header value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "api/http_message.h"

using gpuslice::api::http::HeadParse;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const HeadParse p = gpuslice::api::http::ParseRequestHead(bytes);
  switch (p.state) {
    case HeadParse::State::kComplete: {
      if (p.head_bytes > size || bytes.substr(p.head_bytes - 4, 4) != "\r\n\r\n") std::abort();
      const HeadParse again = gpuslice::api::http::ParseRequestHead(bytes.substr(0, p.head_bytes));
      if (again.state != HeadParse::State::kComplete || again.head_bytes != p.head_bytes) {
        std::abort();
      }
      if (p.head.content_length < 0 || p.head.request.path.empty() ||
          p.head.request.path[0] != '/') {
        std::abort();
      }
      for (const auto& [name, value] : p.head.request.headers) {
        for (char c : value) {
          const auto u = static_cast<unsigned char>(c);
          if ((u < 0x20 && c != '\t') || u == 0x7f) std::abort();
        }
      }
      break;
    }
    case HeadParse::State::kError:
      switch (p.error_status) {
        case 400:
        case 411:
        case 417:
        case 431:
        case 505:
          break;
        default:
          std::abort();
      }
      break;
    case HeadParse::State::kIncomplete:
      if (bytes.find("\r\n\r\n") != std::string_view::npos) std::abort();
      break;
  }
  return 0;
}
