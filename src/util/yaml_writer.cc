#include "gpuslice/util/yaml_writer.h"

#include <cctype>
#include <cstdlib>
#include <set>
#include <string>

#include "yaml-cpp/yaml.h"

namespace gpuslice::util {

namespace {

// Whether a plain YAML scalar `text` would read back as something other than this string: empty,
// null/bool words (YAML 1.1 and 1.2), numbers (decimal, hex, octal, exponents, .inf/.nan) and
// YAML 1.1 sexagesimal numbers (1:30).
bool NeedsQuotes(const std::string& text) {
  if (text.empty()) return true;
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::set<std::string> kSpecial = {"null",  "~",     "true", "false", "yes",  "no",
                                                 "on",    "off",   "y",    "n",     ".nan", ".inf",
                                                 "-.inf", "+.inf", "nan",  "inf",   "-inf", "+inf"};
  if (kSpecial.count(lower) != 0) return true;
  const std::string digits = lower[0] == '-' || lower[0] == '+' ? lower.substr(1) : lower;
  if (digits.empty()) return false;
  if (digits.find_first_not_of("0123456789_:.") == std::string::npos &&
      digits.find_first_of("0123456789") != std::string::npos) {
    return true;
  }
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return end != nullptr && *end == '\0';
}

void EmitJson(YAML::Emitter& out, const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::object:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        break;
      }
      out << YAML::BeginMap;
      for (auto it = value.begin(); it != value.end(); ++it) {
        out << YAML::Key;
        if (NeedsQuotes(it.key()))
          out << YAML::DoubleQuoted << it.key();
        else
          out << it.key();
        out << YAML::Value;
        EmitJson(out, it.value());
      }
      out << YAML::EndMap;
      break;
    case nlohmann::json::value_t::array:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        break;
      }
      out << YAML::BeginSeq;
      for (const nlohmann::json& item : value) EmitJson(out, item);
      out << YAML::EndSeq;
      break;
    case nlohmann::json::value_t::string: {
      const std::string& text = value.get_ref<const std::string&>();
      if (NeedsQuotes(text))
        out << YAML::DoubleQuoted << text;
      else
        out << text;
      break;
    }
    case nlohmann::json::value_t::boolean:
      out << (value.get<bool>() ? "true" : "false");
      break;
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      out << value.dump();  // the shortest text that reads back to the same number
      break;
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
    case nlohmann::json::value_t::binary:
      out << YAML::Null;
      break;
  }
}

}  // namespace

std::string JsonToYaml(const nlohmann::json& value) {
  YAML::Emitter out;
  EmitJson(out, value);
  std::string text = out.c_str();
  if (text.empty() || text.back() != '\n') text += "\n";
  return text;
}

}  // namespace gpuslice::util
