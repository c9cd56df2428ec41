// gpuslice/util/yaml_reader.h
//
// Strict reading of YAML mappings for gpuslice's file formats: every key must be known, every value
// must have the expected type, and every error names the file, the line and the field, e.g.
//   "gpus.yaml:42: gpus[3].mig.profiles[2].memory_mib: expected an integer, got 'lots'".
//
// Errors are thrown as YamlError inside a parser and must be turned into a Status at the parser's
// public boundary (no exception leaves a layer). Not thread-safe; use one reader per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "yaml-cpp/yaml.h"

namespace gpuslice::util {

class YamlError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "origin:line: path: message" (line is 1-based; omitted when the node has no position).
[[noreturn]] void ThrowYamlError(std::string_view origin, const YAML::Node& at,
                                 std::string_view path, std::string_view message);

// A YAML mapping read field by field. Call Finish() when done to reject unknown keys.
class YamlMap {
 public:
  // Throws YamlError unless `node` is a mapping.
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

  // Throws a YamlError located at `at` (or at the mapping) for `field` of this mapping.
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

}  // namespace gpuslice::util
