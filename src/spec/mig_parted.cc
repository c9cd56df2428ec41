#include "gpuslice/spec/mig_parted.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpuslice/geometry/compute_instances.h"
#include "gpuslice/util/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace gpuslice::spec {
namespace {

using util::ThrowYamlError;
using util::YamlMap;

constexpr std::int64_t kMaxCount = 1 << 20;
constexpr std::int64_t kMaxGpuIndex = 1 << 20;

// Rejects non-scalar keys, duplicate keys (yaml-cpp keeps both) and, when `known` is not empty,
// keys outside `known`.
void CheckMapKeys(const YAML::Node& map, std::string_view origin, const std::string& path,
                  std::initializer_list<std::string_view> known) {
  std::set<std::string, std::less<>> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string prefix = path.empty() ? "" : path + ".";
    if (!it->first.IsScalar()) ThrowYamlError(origin, it->first, path, "keys must be text");
    const std::string key = it->first.Scalar();
    if (known.size() != 0 && std::find(known.begin(), known.end(), key) == known.end()) {
      std::string expected;
      for (std::string_view name : known) {
        if (!expected.empty()) expected += ", ";
        expected += name;
      }
      ThrowYamlError(origin, it->first, prefix + key, "unknown field (expected " + expected + ")");
    }
    if (!seen.insert(key).second) {
      ThrowYamlError(origin, it->first, prefix + key, "duplicate key");
    }
  }
}

// The key node of `key` in the mapping `map` (its line is where the key is written, which for a
// null value is more useful than the value's), or `map` itself when absent.
YAML::Node KeyNode(const YAML::Node& map, std::string_view key) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->first;
  }
  return map;
}

bool ReadBool(const YAML::Node& node, std::string_view origin, const std::string& path) {
  const std::string text = util::YamlString(node, origin, path);
  if (text == "true") return true;
  if (text == "false") return false;
  ThrowYamlError(origin, node, path, "expected true or false, got '" + text + "'");
}

void ReadVersion(YamlMap& top) {
  const YAML::Node version = top.Node("version");
  const std::string text = util::YamlString(version, top.origin(), "version");
  if (text != "v1") {
    ThrowYamlError(top.origin(), version, "version",
                   "unsupported version '" + text + "' (mig-parted's format is version v1)");
  }
}

// A JSON string literal, which is also a valid YAML double-quoted scalar.
std::string QuoteString(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

// A mapping key for YAML output: plain when that reads back as the same text, else quoted.
std::string YamlKey(std::string_view text) {
  static constexpr std::string_view kSpecial[] = {"true", "false", "yes", "no", "on",
                                                  "off",  "null",  "y",   "n"};
  bool plain = !text.empty() && std::isalpha(static_cast<unsigned char>(text[0]));
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      plain = false;
    }
  }
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view special : kSpecial) {
    if (lower == special) plain = false;
  }
  return plain ? std::string(text) : QuoteString(text);
}

// Reads a positive decimal number at `text[*pos]`, without a leading zero or sign.
bool ReadPositive(std::string_view text, size_t* pos, int* value) {
  size_t i = *pos;
  if (i >= text.size() || text[i] < '1' || text[i] > '9') return false;
  std::int64_t number = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    number = number * 10 + (text[i] - '0');
    if (number > kMaxCount) return false;
    ++i;
  }
  *pos = i;
  *value = static_cast<int>(number);
  return true;
}

bool Consume(std::string_view text, size_t* pos, std::string_view expected) {
  if (text.substr(*pos, expected.size()) != expected) return false;
  *pos += expected.size();
  return true;
}

// "3g.40gb@4" -> ("3g.40gb", 4); nullopt when malformed or when the name has a CI prefix.
std::optional<std::pair<std::string, int>> ParsePlacement(std::string_view text) {
  const size_t at = text.rfind('@');
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view name = text.substr(0, at);
  const std::string_view start_text = text.substr(at + 1);
  if (!IsValidMigDeviceName(name) || geometry::SplitCiDeviceName(name).has_value()) {
    return std::nullopt;
  }
  if (start_text.empty() || start_text.size() > 2) return std::nullopt;
  if (start_text.size() == 2 && start_text[0] == '0') return std::nullopt;
  int start = 0;
  for (char c : start_text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    start = start * 10 + (c - '0');
  }
  return std::make_pair(std::string(name), start);
}

constexpr std::string_view kPlacementSyntax =
    "expected '<gpu instance profile>@<start>', e.g. '3g.40gb@4'";

// ---------------------------------------------------------------------------------------- reading

// device-filter: a string or a list of strings.
void ReadDeviceFilter(YamlMap& map, std::string_view origin, ConfigEntry& entry) {
  const YAML::Node filter = map.OptionalNode("device-filter");
  if (filter.IsDefined() && !filter.IsNull()) {
    const std::string filter_path = map.PathOf("device-filter");
    std::vector<std::pair<YAML::Node, std::string>> items;
    if (filter.IsScalar()) {
      items.emplace_back(filter, filter_path);
    } else if (filter.IsSequence()) {
      for (size_t i = 0; i < filter.size(); ++i) {
        items.emplace_back(filter[i], filter_path + "[" + std::to_string(i) + "]");
      }
    } else {
      ThrowYamlError(origin, filter, filter_path,
                     "expected a device id or a list of device ids (e.g. \"0x233010DE\")");
    }
    for (const auto& [item, item_path] : items) {
      const std::string text = util::YamlString(item, origin, item_path);
      const std::optional<std::uint32_t> id = ParseDeviceFilterId(text);
      if (!id) {
        ThrowYamlError(origin, item, item_path,
                       "invalid device id '" + text +
                           "': expected 0x and 8 hex digits, the PCI device id then the vendor "
                           "id (e.g. 0x233010DE)");
      }
      if (std::find(entry.device_filter.begin(), entry.device_filter.end(), *id) !=
          entry.device_filter.end()) {
        ThrowYamlError(origin, item, item_path, "device id '" + text + "' is listed twice");
      }
      entry.device_filter.push_back(*id);
    }
  }
}

// devices: "all" or a list of GPU indices.
void ReadDevices(YamlMap& map, std::string_view origin, ConfigEntry& entry) {
  const YAML::Node devices = map.Node("devices");
  const std::string devices_path = map.PathOf("devices");
  if (devices.IsScalar()) {
    if (devices.Scalar() != "all") {
      ThrowYamlError(origin, devices, devices_path,
                     "expected 'all' or a list of GPU indices, got '" + devices.Scalar() + "'");
    }
    entry.devices.all = true;
  } else if (devices.IsSequence()) {
    for (size_t i = 0; i < devices.size(); ++i) {
      const std::string item_path = devices_path + "[" + std::to_string(i) + "]";
      const int index =
          static_cast<int>(util::YamlInt(devices[i], origin, item_path, 0, kMaxGpuIndex));
      if (std::find(entry.devices.indices.begin(), entry.devices.indices.end(), index) !=
          entry.devices.indices.end()) {
        ThrowYamlError(origin, devices[i], item_path,
                       "GPU " + std::to_string(index) + " is listed twice");
      }
      entry.devices.indices.push_back(index);
    }
  } else {
    ThrowYamlError(origin, devices, devices_path, "expected 'all' or a list of GPU indices");
  }
}

// mig-devices: required map when enabled; absent or empty when disabled.
void ReadMigDevices(const YAML::Node& node, YamlMap& map, std::string_view origin,
                    ConfigEntry& entry) {
  const YAML::Node mig_devices = map.OptionalNode("mig-devices");
  const std::string mig_devices_path = map.PathOf("mig-devices");
  const bool has_mig_devices = mig_devices.IsDefined() && !mig_devices.IsNull();
  if (entry.mig_enabled && !has_mig_devices) {
    map.Fail(mig_devices.IsDefined() ? KeyNode(node, "mig-devices") : node, "mig-devices",
             "required when mig-enabled is true (write {} for MIG enabled without instances)");
  }
  if (has_mig_devices) {
    if (!mig_devices.IsMap()) {
      ThrowYamlError(origin, mig_devices, mig_devices_path,
                     "expected a mapping of MIG device name to count, e.g. {\"1g.10gb\": 2}");
    }
    if (!entry.mig_enabled && mig_devices.size() != 0) {
      ThrowYamlError(origin, mig_devices, mig_devices_path,
                     "must be absent or empty when mig-enabled is false");
    }
    CheckMapKeys(mig_devices, origin, mig_devices_path, {});
    for (auto it = mig_devices.begin(); it != mig_devices.end(); ++it) {
      const std::string name = it->first.Scalar();
      const std::string item_path = mig_devices_path + "." + name;
      if (!IsValidMigDeviceName(name)) {
        ThrowYamlError(origin, it->first, item_path,
                       "invalid MIG device name '" + name +
                           "': expected <g>g.<mem>gb with an optional +me, +me.all, +gfx or -me "
                           "suffix, optionally prefixed by <c>c. (e.g. 1g.10gb, 1c.3g.40gb)");
      }
      const std::int64_t count = util::YamlInt(it->second, origin, item_path, INT32_MIN, INT32_MAX);
      if (count <= 0 || count > kMaxCount) {
        ThrowYamlError(origin, it->second, item_path,
                       "count must be a positive integer, got " + std::to_string(count));
      }
      entry.mig_devices.push_back({name, static_cast<int>(count)});
    }
  }
}

// gpuslice-placements: optional list of "<gi>@<start>".
void ReadPlacements(YamlMap& map, std::string_view origin, ConfigEntry& entry) {
  const std::string placements_path = map.PathOf("gpuslice-placements");
  const YAML::Node placements = map.OptionalNode("gpuslice-placements");
  if (placements.IsDefined() && !placements.IsNull()) {
    if (!placements.IsSequence()) {
      ThrowYamlError(origin, placements, placements_path,
                     "expected a list such as [\"3g.40gb@4\", \"1g.10gb@0\"]");
    }
    for (size_t i = 0; i < placements.size(); ++i) {
      const std::string item_path = placements_path + "[" + std::to_string(i) + "]";
      const std::string text = util::YamlString(placements[i], origin, item_path);
      if (!ParsePlacement(text)) {
        ThrowYamlError(origin, placements[i], item_path,
                       "invalid placement '" + text + "': " + std::string(kPlacementSyntax));
      }
      entry.placements.push_back(text);
    }
    if (!entry.mig_enabled && !entry.placements.empty()) {
      ThrowYamlError(origin, placements, placements_path,
                     "must be absent or empty when mig-enabled is false");
    }
  }
}

ConfigEntry ReadEntry(const YAML::Node& node, std::string_view origin, const std::string& path) {
  CheckMapKeys(node, origin, path,
               {"device-filter", "devices", "mig-enabled", "mig-devices", "gpuslice-placements"});
  YamlMap map(node, origin, path);
  ConfigEntry entry;
  entry.line = node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
  ReadDeviceFilter(map, origin, entry);
  ReadDevices(map, origin, entry);
  // mig-enabled: required boolean.
  const YAML::Node enabled = map.Node("mig-enabled");
  entry.mig_enabled = ReadBool(enabled, origin, map.PathOf("mig-enabled"));

  ReadMigDevices(node, map, origin, entry);
  ReadPlacements(map, origin, entry);
  map.Finish();
  return entry;
}

MigConfigFile ReadFile(const YAML::Node& root, std::string_view origin) {
  if (!root.IsMap()) {
    ThrowYamlError(origin, root, "",
                   "expected a mapping with 'version: v1' and 'mig-configs' (mig-parted format)");
  }
  CheckMapKeys(root, origin, "", {"version", "mig-configs"});
  YamlMap top(root, origin, "");
  ReadVersion(top);
  const YAML::Node configs = top.Node("mig-configs");
  if (!configs.IsMap()) {
    ThrowYamlError(origin, configs, "mig-configs", "expected a mapping of config name to entries");
  }
  if (configs.size() == 0) {
    ThrowYamlError(origin, configs, "mig-configs", "at least one config is required");
  }
  CheckMapKeys(configs, origin, "mig-configs", {});
  MigConfigFile file;
  for (auto it = configs.begin(); it != configs.end(); ++it) {
    const std::string name = it->first.Scalar();
    const std::string path = "mig-configs." + name;
    if (name.empty()) ThrowYamlError(origin, it->first, path, "config name is empty");
    const YAML::Node list = it->second;
    if (!list.IsSequence()) {
      ThrowYamlError(origin, list.IsDefined() && !list.IsNull() ? list : it->first, path,
                     "expected a list of entries (devices, mig-enabled, mig-devices)");
    }
    if (list.size() == 0) ThrowYamlError(origin, it->first, path, "at least one entry is required");
    std::vector<ConfigEntry> entries;
    for (size_t i = 0; i < list.size(); ++i) {
      entries.push_back(ReadEntry(list[i], origin, path + "[" + std::to_string(i) + "]"));
    }
    file.configs.emplace_back(name, std::move(entries));
  }
  top.Finish();
  return file;
}

// ---------------------------------------------------------------------------------------- writing

void WriteEntryYaml(const ConfigEntry& entry, std::string* out) {
  const std::string indent = "      ";
  std::string prefix = "    - ";
  auto line = [&](const std::string& text) {
    *out += prefix + text + "\n";
    prefix = indent;
  };
  if (!entry.device_filter.empty()) {
    if (entry.device_filter.size() == 1) {
      line("device-filter: " + QuoteString(FormatDeviceFilterId(entry.device_filter[0])));
    } else {
      std::string list;
      for (std::uint32_t id : entry.device_filter) {
        if (!list.empty()) list += ", ";
        list += QuoteString(FormatDeviceFilterId(id));
      }
      line("device-filter: [" + list + "]");
    }
  }
  if (entry.devices.all) {
    line("devices: all");
  } else {
    std::string list;
    for (int index : entry.devices.indices) {
      if (!list.empty()) list += ", ";
      list += std::to_string(index);
    }
    line("devices: [" + list + "]");
  }
  line(std::string("mig-enabled: ") + (entry.mig_enabled ? "true" : "false"));
  if (entry.mig_enabled) {
    if (entry.mig_devices.empty()) {
      line("mig-devices: {}");
    } else {
      line("mig-devices:");
      for (const MigDevice& device : entry.mig_devices) {
        line("  " + QuoteString(device.name) + ": " + std::to_string(device.count));
      }
    }
    if (!entry.placements.empty()) {
      std::string list;
      for (const std::string& placement : entry.placements) {
        if (!list.empty()) list += ", ";
        list += QuoteString(placement);
      }
      line("gpuslice-placements: [" + list + "]");
    }
  }
}

void WriteEntryJson(const ConfigEntry& entry, std::string* out) {
  const std::string indent = "        ";
  std::vector<std::string> fields;
  if (!entry.device_filter.empty()) {
    if (entry.device_filter.size() == 1) {
      fields.push_back("\"device-filter\": " +
                       QuoteString(FormatDeviceFilterId(entry.device_filter[0])));
    } else {
      std::string list;
      for (std::uint32_t id : entry.device_filter) {
        if (!list.empty()) list += ", ";
        list += QuoteString(FormatDeviceFilterId(id));
      }
      fields.push_back("\"device-filter\": [" + list + "]");
    }
  }
  if (entry.devices.all) {
    fields.emplace_back("\"devices\": \"all\"");
  } else {
    std::string list;
    for (int index : entry.devices.indices) {
      if (!list.empty()) list += ", ";
      list += std::to_string(index);
    }
    fields.push_back("\"devices\": [" + list + "]");
  }
  fields.push_back(std::string("\"mig-enabled\": ") + (entry.mig_enabled ? "true" : "false"));
  if (entry.mig_enabled) {
    if (entry.mig_devices.empty()) {
      fields.emplace_back("\"mig-devices\": {}");
    } else {
      std::string map = "\"mig-devices\": {\n";
      for (size_t i = 0; i < entry.mig_devices.size(); ++i) {
        map += indent + "  " + QuoteString(entry.mig_devices[i].name) + ": " +
               std::to_string(entry.mig_devices[i].count) +
               (i + 1 < entry.mig_devices.size() ? ",\n" : "\n");
      }
      map += indent + "}";
      fields.push_back(map);
    }
    if (!entry.placements.empty()) {
      std::string list;
      for (const std::string& placement : entry.placements) {
        if (!list.empty()) list += ", ";
        list += QuoteString(placement);
      }
      fields.push_back("\"gpuslice-placements\": [" + list + "]");
    }
  }
  *out += "      {\n";
  for (size_t i = 0; i < fields.size(); ++i) {
    *out += indent + fields[i] + (i + 1 < fields.size() ? ",\n" : "\n");
  }
  *out += "      }";
}

// ----------------------------------------------------------------------------------------
// resolving

std::string EntryWhere(const ConfigEntry& entry) {
  return entry.line > 0 ? " (entry at line " + std::to_string(entry.line) + ")" : "";
}

std::string ProfileNames(const hw::MigSpec& mig) {
  std::string names;
  for (const hw::GiProfile& profile : mig.profiles) {
    if (!names.empty()) names += ", ";
    names += profile.name;
  }
  return names;
}

}  // namespace

// -------------------------------------------------------------------------------------- public API

bool DeviceSelector::Includes(int index) const {
  return all || std::find(indices.begin(), indices.end(), index) != indices.end();
}

bool IsValidMigDeviceName(std::string_view name) {
  size_t pos = 0;
  int first = 0;
  int value = 0;
  if (!ReadPositive(name, &pos, &first)) return false;
  if (Consume(name, &pos, "c.")) {
    if (!ReadPositive(name, &pos, &value)) return false;
  }
  if (!Consume(name, &pos, "g.")) return false;
  if (!ReadPositive(name, &pos, &value)) return false;
  if (!Consume(name, &pos, "gb")) return false;
  const std::string_view suffix = name.substr(pos);
  return suffix.empty() || suffix == "+me" || suffix == "+me.all" || suffix == "+gfx" ||
         suffix == "-me";
}

std::optional<std::uint32_t> ParseDeviceFilterId(std::string_view text) {
  if (text.size() != 10 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) {
    return std::nullopt;
  }
  std::uint32_t id = 0;
  for (size_t i = 2; i < text.size(); ++i) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    std::uint32_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<std::uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<std::uint32_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
    id = (id << 4) | digit;
  }
  return id;
}

std::string FormatDeviceFilterId(std::uint32_t id) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%08X", static_cast<unsigned>(id));
  return buffer;
}

absl::StatusOr<MigConfigFile> ParseMigPartedConfig(std::string_view text, std::string_view origin) {
  return util::GuardParse<MigConfigFile>(
      origin, [&] { return ReadFile(YAML::Load(std::string(text)), origin); });
}

std::string WriteMigPartedConfig(const MigConfigFile& file, OutputFormat format) {
  std::string out;
  if (format == OutputFormat::kYaml) {
    out += "version: v1\nmig-configs:\n";
    for (size_t c = 0; c < file.configs.size(); ++c) {
      const auto& [name, entries] = file.configs[c];
      if (c > 0) out += "\n";
      out += "  " + YamlKey(name) + ":";
      if (entries.empty()) {
        out += " []\n";
        continue;
      }
      out += "\n";
      for (const ConfigEntry& entry : entries) WriteEntryYaml(entry, &out);
    }
    return out;
  }
  out += "{\n  \"version\": \"v1\",\n  \"mig-configs\": {";
  for (size_t c = 0; c < file.configs.size(); ++c) {
    const auto& [name, entries] = file.configs[c];
    out += c > 0 ? ",\n" : "\n";
    out += "    " + QuoteString(name) + ": [";
    for (size_t e = 0; e < entries.size(); ++e) {
      out += e > 0 ? ",\n" : "\n";
      WriteEntryJson(entries[e], &out);
    }
    out += entries.empty() ? "]" : "\n    ]";
  }
  out += file.configs.empty() ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

absl::StatusOr<const std::vector<ConfigEntry>*> SelectConfig(const MigConfigFile& file,
                                                             std::string_view name) {
  std::string names;
  for (const auto& [config_name, entries] : file.configs) {
    if (!name.empty() && config_name == name) return &entries;
    if (!names.empty()) names += ", ";
    names += config_name;
  }
  if (name.empty()) {
    if (file.configs.size() == 1) return &file.configs[0].second;
    if (file.configs.empty()) return absl::InvalidArgumentError("the file has no MIG configs");
    return absl::InvalidArgumentError("the file has " + std::to_string(file.configs.size()) +
                                      " MIG configs; select one of: " + names);
  }
  return absl::NotFoundError("no MIG config named '" + std::string(name) +
                             "'; the file has: " + (names.empty() ? "(none)" : names));
}

absl::StatusOr<const ConfigEntry*> EntryForGpu(const std::vector<ConfigEntry>& entries, int index,
                                               std::uint16_t pci_device_id) {
  const std::uint32_t full_id = FullDeviceId(pci_device_id);
  const ConfigEntry* found = nullptr;
  for (const ConfigEntry& entry : entries) {
    if (!entry.devices.Includes(index)) continue;
    if (!entry.device_filter.empty() &&
        std::find(entry.device_filter.begin(), entry.device_filter.end(), full_id) ==
            entry.device_filter.end()) {
      continue;
    }
    if (found != nullptr) {
      return absl::InvalidArgumentError(
          "GPU " + std::to_string(index) + " (" + FormatDeviceFilterId(full_id) +
          ") is matched by two entries of the config, at lines " + std::to_string(found->line) +
          " and " + std::to_string(entry.line) +
          "; each GPU must be matched by at most one (check devices and device-filter)");
    }
    found = &entry;
  }
  return found;
}

absl::StatusOr<std::vector<DesiredGi>> ResolveEntry(const ConfigEntry& entry,
                                                    const hw::GpuModel& model) {
  std::vector<DesiredGi> gis;
  if (!entry.mig_enabled) {
    if (!entry.placements.empty()) {
      return absl::InvalidArgumentError("gpuslice-placements given with mig-enabled: false" +
                                        EntryWhere(entry));
    }
    return gis;
  }
  if (!model.mig) {
    return absl::FailedPreconditionError(model.id + " does not support MIG, but the entry" +
                                         EntryWhere(entry) + " asks for mig-enabled: true");
  }
  const hw::MigSpec& mig = *model.mig;

  // Group the devices by GI profile, in order of first appearance.
  struct Group {
    int profile = 0;
    int plain = 0;         // GIs with their default (full) CI
    std::vector<int> cis;  // split CIs
  };
  std::vector<Group> groups;
  for (const MigDevice& device : entry.mig_devices) {
    if (device.count <= 0) {
      return absl::InvalidArgumentError("mig-devices." + device.name + ": count must be > 0, got " +
                                        std::to_string(device.count) + EntryWhere(entry));
    }
    const auto split = geometry::SplitCiDeviceName(device.name);
    const std::string gi_name = split ? split->second : device.name;
    const hw::GiProfile* gi = mig.FindProfile(gi_name);
    if (gi == nullptr) {
      return absl::NotFoundError(model.id + " has no MIG profile '" + gi_name + "'" +
                                 EntryWhere(entry) + "; its profiles are: " + ProfileNames(mig));
    }
    const int profile = mig.IndexOf(*gi);
    auto group = std::find_if(groups.begin(), groups.end(),
                              [profile](const Group& g) { return g.profile == profile; });
    if (group == groups.end()) {
      groups.push_back({profile, 0, {}});
      group = groups.end() - 1;
    }
    if (!split) {
      group->plain += device.count;
      continue;
    }
    const geometry::CiShape shape(mig, *gi);
    const int ci = shape.Find(split->first);
    if (ci < 0) {
      std::string ci_names;
      for (const hw::CiProfile& ci_profile : shape.profiles()) {
        if (!ci_names.empty()) ci_names += ", ";
        ci_names += ci_profile.name;
      }
      return absl::NotFoundError(model.id + ": a " + gi->name +
                                 " GPU instance has no compute-instance profile '" + split->first +
                                 "' (device '" + device.name + "'" + EntryWhere(entry) +
                                 "); its compute-instance profiles are: " + ci_names);
    }
    if (shape.profiles()[static_cast<size_t>(ci)].slices == gi->compute_slices) {
      group->plain += device.count;
    } else {
      group->cis.insert(group->cis.end(), static_cast<size_t>(device.count), ci);
    }
  }

  for (Group& group : groups) {
    for (int i = 0; i < group.plain; ++i) gis.push_back({group.profile, {}, std::nullopt});
    if (group.cis.empty()) continue;
    const hw::GiProfile& gi = mig.profiles[static_cast<size_t>(group.profile)];
    const geometry::CiShape shape(mig, gi);
    std::stable_sort(group.cis.begin(), group.cis.end(), [&shape](int a, int b) {
      return shape.profiles()[static_cast<size_t>(a)].slices >
             shape.profiles()[static_cast<size_t>(b)].slices;
    });
    std::vector<std::uint8_t> current;
    for (int ci : group.cis) {
      current.push_back(static_cast<std::uint8_t>(ci));
      if (shape.Place(current)) continue;
      current.pop_back();
      if (current.empty()) {
        return absl::InvalidArgumentError(shape.DeviceName(ci) + " does not fit in a " + gi.name +
                                          " GPU instance on " + model.id + EntryWhere(entry));
      }
      gis.push_back(
          {group.profile, std::vector<int>(current.begin(), current.end()), std::nullopt});
      current.assign(1, static_cast<std::uint8_t>(ci));
      if (!shape.Place(current)) {
        return absl::InvalidArgumentError(shape.DeviceName(ci) + " does not fit in a " + gi.name +
                                          " GPU instance on " + model.id + EntryWhere(entry));
      }
    }
    gis.push_back({group.profile, std::vector<int>(current.begin(), current.end()), std::nullopt});
  }

  if (entry.placements.empty()) return gis;
  for (const std::string& text : entry.placements) {
    const auto placement = ParsePlacement(text);
    if (!placement) {
      return absl::InvalidArgumentError("gpuslice-placements: invalid placement '" + text +
                                        "': " + std::string(kPlacementSyntax) + EntryWhere(entry));
    }
    const hw::GiProfile* gi = mig.FindProfile(placement->first);
    if (gi == nullptr) {
      return absl::NotFoundError("gpuslice-placements: " + model.id + " has no MIG profile '" +
                                 placement->first + "'" + EntryWhere(entry) +
                                 "; its profiles are: " + ProfileNames(mig));
    }
    if (std::find(gi->starts.begin(), gi->starts.end(), placement->second) == gi->starts.end()) {
      std::string starts;
      for (int start : gi->starts) {
        if (!starts.empty()) starts += ", ";
        starts += std::to_string(start);
      }
      return absl::InvalidArgumentError("gpuslice-placements: " + gi->name + " cannot start at " +
                                        std::to_string(placement->second) + " on " + model.id +
                                        " (allowed starts: " + starts + ")" + EntryWhere(entry));
    }
    const int profile = mig.IndexOf(*gi);
    auto target = std::find_if(gis.begin(), gis.end(), [profile](const DesiredGi& desired) {
      return desired.profile == profile && !desired.start.has_value();
    });
    if (target == gis.end()) {
      const auto wanted = std::count_if(
          gis.begin(), gis.end(), [profile](const DesiredGi& d) { return d.profile == profile; });
      return absl::InvalidArgumentError("gpuslice-placements places more " + gi->name +
                                        " GPU instances than mig-devices asks "
                                        "for (" +
                                        std::to_string(wanted) + ")" + EntryWhere(entry));
    }
    target->start = placement->second;
  }
  std::map<std::string, int> missing;
  for (const DesiredGi& desired : gis) {
    if (!desired.start) ++missing[mig.profiles[static_cast<size_t>(desired.profile)].name];
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& [name, count] : missing) {
      if (!list.empty()) list += ", ";
      list += std::to_string(count) + " x " + name;
    }
    return absl::InvalidArgumentError(
        "gpuslice-placements must place every GPU instance of mig-devices; not placed: " + list +
        EntryWhere(entry));
  }
  return gis;
}

std::vector<MigDevice> MigDevicesOf(const hw::GpuModel& model, const std::vector<DesiredGi>& gis) {
  const hw::MigSpec& mig = *model.mig;
  std::map<std::string, int> counts;
  for (const DesiredGi& desired : gis) {
    const hw::GiProfile& gi = mig.profiles[static_cast<size_t>(desired.profile)];
    if (desired.cis.empty()) {
      ++counts[gi.name];
      continue;
    }
    const geometry::CiShape shape(mig, gi);
    for (int ci : desired.cis) ++counts[shape.DeviceName(ci)];
  }
  std::vector<MigDevice> devices;
  for (const auto& [name, count] : counts) devices.push_back({name, count});
  return devices;
}

}  // namespace gpuslice::spec
