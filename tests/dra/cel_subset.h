// A small evaluator for the part of CEL that gpuslice's DeviceClasses and example claims use,
// written from the CEL language definition and the DRA selector environment as Kubernetes
// documents them (resource.k8s.io/v1 CELDeviceSelector; ../shared/reference/kubernetes-dra.md
// §4.4), not from gpuslice's code. Tests only.
//
// Accepted, and nothing else (anything else is a parse error, so that a new form cannot slip
// into a manifest untested):
//   expr     := or
//   or       := and ('||' and)*
//   and      := relation ('&&' relation)*
//   relation := operand (('==' | '!=' | '<' | '<=' | '>' | '>=') operand)?   no chaining
//   operand  := '(' expr ')' | 'true' | 'false' | integer | string | path
//   path     := 'device' '.' 'driver'
//             | 'device' '.' 'attributes' '[' string ']' '.' identifier
//   integer  := decimal digits (an int64; no sign, no 'u' suffix, no hex)
//   string   := '...' or "..." without escapes, newlines or the other quote's tricks
//
// Evaluation follows CEL:
//   * `device.attributes[D]` is the map of the device's attributes in domain D (an unknown domain
//     gives an empty map); `.name` on it reads one, and a name the map lacks is an evaluation
//     error ("no such key"), which in Kubernetes aborts the allocation;
//   * `==`, `!=` compare values of one type (int, bool, string); `<` ... `>=` order ints and
//     strings (by code point) and bools (false < true); a version attribute, or two values of
//     different types, is an error here (real CEL needs semver() for versions; we refuse);
//   * `&&` and `||` are commutative over errors: `false && error` and `error && false` are false,
//     `true || error` and `error || true` are true; otherwise an error stays an error. A non-bool
//     operand counts as an error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra::testing_cel {

// A semantic-version attribute (only carried; the subset cannot compare it).
struct Version {
  std::string text;
  friend bool operator==(const Version&, const Version&) = default;
};

using Value = std::variant<std::int64_t, bool, std::string, Version>;

// A device as a CEL selector sees it.
struct Device {
  std::string driver;
  std::map<std::string, std::map<std::string, Value>> attributes;  // domain → name → value
};

// A device from its ResourceSlice JSON (`spec.devices[]` item, §4.3/§4.4) published by `driver`:
// an attribute key "name" belongs to the driver's domain, "domain/name" to that domain. Fails on
// an attribute value that is not exactly one of int, bool, string, version.
absl::StatusOr<Device> DeviceFromJson(const std::string& driver, const nlohmann::json& device);

struct Node;

class Expression {
 public:
  // InvalidArgument naming the position for anything outside the subset.
  static absl::StatusOr<Expression> Parse(std::string_view text);

  // Whether the device matches. An evaluation error, or a result that is not a bool, is an error
  // (Kubernetes would abort the allocation).
  absl::StatusOr<bool> Matches(const Device& device) const;

 private:
  explicit Expression(std::shared_ptr<const Node> root) : root_(std::move(root)) {}
  std::shared_ptr<const Node> root_;
};

}  // namespace gpuslice::dra::testing_cel
