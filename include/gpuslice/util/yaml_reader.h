// gpuslice/util/yaml_reader.h
//
// Strict reading of YAML mappings for gpuslice's file formats: every key must be known, every value
// must have the expected type, and every error names the file, the line and the field, e.g.
//   "gpus.yaml:42: gpus[3].mig.profiles[2].memory_mib: expected an integer, got 'lots'".
//
// Errors are thrown as util::ParseError (gpuslice/util/parse_error.h) inside a parser and turned
// into a Status at the parser's public boundary (no exception leaves a layer). Not thread-safe;
// use one reader per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpuslice/util/parse_error.h"
#include "yaml-cpp/yaml.h"

namespace gpuslice::util {

// "origin:line: path: message" (line is 1-based; omitted when the node has no position).
// Throws a ParseError with `code`.
[[noreturn]] void ThrowYamlError(std::string_view origin, const YAML::Node& at,
                                 std::string_view path, std::string_view message,
                                 absl::StatusCode code = absl::StatusCode::kInvalidArgument);

// A YAML mapping read field by field. Call Finish() when done to reject unknown keys.
class YamlMap {
 public:
  // Throws ParseError unless `node` is a mapping.
  YamlMap(const YAML::Node& node, std::string_view origin, std::string path);

  bool Has(std::string_view key) const;
  // The value node of `key`; throws if absent.
  YAML::Node Node(std::string_view key);
  // The value node of `key`, or an undefined node if absent (marks the key used).
  YAML::Node OptionalNode(std::string_view key);

  std::string String(std::string_view key);
  std::string String(std::string_view key, std::string fallback);
  std::int64_t Int(std::string_view key, std::int64_t min, std::int64_t max);
  std::int64_t Int(std::string_view key, std::int64_t min, std::int64_t max, std::int64_t fallback);
  // A finite number in [min, max] (integers are accepted; YAML's .inf and .nan are not).
  double Double(std::string_view key, double min, double max);
  double Double(std::string_view key, double min, double max, double fallback);
  bool Bool(std::string_view key, bool fallback);
  std::vector<std::string> StringList(std::string_view key);  // absent -> empty
  std::vector<std::int64_t> IntList(std::string_view key, std::int64_t min, std::int64_t max);

  // Throws if the mapping has a key no accessor asked for.
  void Finish() const;

  // Throws a ParseError located at `at` (or at the mapping) for `field` of this mapping.
  [[noreturn]] void Fail(std::string_view field, std::string_view message) const;
  [[noreturn]] void Fail(const YAML::Node& at, std::string_view field,
                         std::string_view message) const;

  std::string PathOf(std::string_view key) const;
  const std::string& path() const { return path_; }
  std::string_view origin() const { return origin_; }

 private:
  YAML::Node node_;
  std::string origin_;
  std::string path_;
  std::set<std::string, std::less<>> used_;
};

// Scalar conversions with located errors.
std::string YamlString(const YAML::Node& node, std::string_view origin, std::string_view path);
std::int64_t YamlInt(const YAML::Node& node, std::string_view origin, std::string_view path,
                     std::int64_t min, std::int64_t max);
double YamlDouble(const YAML::Node& node, std::string_view origin, std::string_view path,
                  double min, double max);

// yaml-cpp's own error (bad syntax, a failed conversion) as "origin:line: message".
absl::Status StatusOfYaml(const YAML::Exception& error, std::string_view origin);

// Runs `parse` (returning a T or a StatusOr<T>) and returns what it returns, or the Status of
// what it threw: a ParseError's own, yaml-cpp's error as InvalidArgument located in `origin`, any
// other exception as Internal. The public functions of parsers end in it.
template <typename T, typename Parse>
absl::StatusOr<T> GuardParse(std::string_view origin, Parse&& parse) {
  try {
    return parse();
  } catch (const ParseError& error) {
    return StatusOf(error);
  } catch (const YAML::Exception& error) {
    return StatusOfYaml(error, origin);
  } catch (const std::exception& error) {
    return absl::InternalError(std::string(origin) + ": " + error.what());
  }
}

}  // namespace gpuslice::util
