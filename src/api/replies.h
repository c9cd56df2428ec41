// Helpers of the API's handlers (src/api/*.cc): JSON replies, errors as HTTP codes, and strict
// reading of JSON bodies. Internal to the API library.
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "api/http_message.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {

inline constexpr std::size_t kMaxBodyBytes = 64 * 1024;

inline int HttpCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

inline void Reply(http::Response& res, int code, const nlohmann::json& body) {
  res.status = code;
  // Stored text is valid UTF-8 by the service's checks; should a row not be, it is answered
  // with U+FFFD in its place rather than failing the whole request.
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

inline void Fail(http::Response& res, const absl::Status& status) {
  Reply(res, HttpCode(status), nlohmann::json{{"error", std::string(status.message())}});
}

// A JSON object body with only the allowed fields.
inline absl::StatusOr<nlohmann::json> Body(const http::Request& req,
                                           const std::set<std::string>& allowed) {
  if (req.body.size() > kMaxBodyBytes) {
    return absl::ResourceExhaustedError("body: larger than 64 KiB");
  }
  nlohmann::json body =
      nlohmann::json::parse(req.body.empty() ? std::string("{}") : req.body, nullptr, false);
  if (body.is_discarded()) return absl::InvalidArgumentError("body: not valid JSON");
  if (!body.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!allowed.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat("body: unknown field '", key, "'"));
    }
  }
  return body;
}

// A nested object of a body (`where` names it in the error): an object with only these fields.
inline absl::Status Only(const nlohmann::json& item, const std::set<std::string>& allowed,
                         const char* where) {
  if (!item.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": an object"));
  for (const auto& [key, value] : item.items()) {
    if (!allowed.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown field '", key, "'"));
    }
  }
  return absl::OkStatus();
}

// Typed field readers: a missing field keeps the default; a wrong type is an error.
template <typename T>
absl::Status Field(const nlohmann::json& body, const char* name, T* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be true or false"));
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be an integer"));
    if (it->is_number_unsigned() &&
        it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": out of range"));
    }
    const auto value = it->get<std::int64_t>();
    if (value < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        value > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": out of range"));
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be a number"));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be a string"));
  } else {
    if (!it->is_object())
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be an object"));
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ".", key, ": must be a string"));
      }
    }
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

}  // namespace gpuslice::api
