// Shared by the scheduler extender's files (extender_parse.cc, extender_verbs.cc); not installed.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace gpuslice::k8s::internal {

// object[key] when object is an object and that member a string, else "".
std::string JsonString(const nlohmann::json& object, const char* key);

}  // namespace gpuslice::k8s::internal
