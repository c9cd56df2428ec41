// gpuslice/util/yaml_writer.h — any JSON value as block YAML with the same structure, for the
// commands that print YAML (`plan -o yaml`, `dra-driver --device-classes`). Strings that would
// read back as another type (numbers, booleans, null words, YAML 1.1 sexagesimals) are quoted;
// numbers keep the shortest text that reads back to the same value. Pure.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace gpuslice::util {

// Ends with a newline.
std::string JsonToYaml(const nlohmann::json& value);

}  // namespace gpuslice::util
