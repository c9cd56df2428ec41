// gpuslice/util/parse_error.h
//
// The one exception type of gpuslice's parsers. A parser deep in its input throws ParseError with
// a located message ("origin:line: path: message") and, where the failure is not bad input, the
// absl code that says so (NotFound for a file or model it names that does not exist); the parser's
// public function catches it and returns StatusOf(error). No ParseError leaves a layer: every
// public function returns a Status.
#pragma once

#include <stdexcept>
#include <string>

#include "absl/status/status.h"

namespace gpuslice::util {

class ParseError : public std::runtime_error {
 public:
  explicit ParseError(const std::string& message,
                      absl::StatusCode code = absl::StatusCode::kInvalidArgument)
      : std::runtime_error(message), code_(code) {}
  absl::StatusCode code() const { return code_; }

 private:
  absl::StatusCode code_;
};

// The Status a caught ParseError stands for: its code and message.
inline absl::Status StatusOf(const ParseError& error) {
  return absl::Status(error.code(), error.what());
}

}  // namespace gpuslice::util
