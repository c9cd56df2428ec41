#include "gpuslice/hw/catalog.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "gpuslice/util/suggest.h"
#include "gpuslice/util/yaml_reader.h"

namespace gpuslice::embedded {
std::string_view BuiltinGpuCatalog();  // generated from src/hw/data/gpus.yaml
}

namespace gpuslice::hw {
namespace {

using util::YamlMap;

// NVML_GPU_INSTANCE_PROFILE_* constants (nvml.h).
struct NvmlConst {
  std::string_view suffix;
  int value;
  MediaVariant variant;
};
constexpr NvmlConst kNvmlGiConstants[] = {
    {"1_SLICE", 0x00, MediaVariant::kStandard},     {"2_SLICE", 0x01, MediaVariant::kStandard},
    {"3_SLICE", 0x02, MediaVariant::kStandard},     {"4_SLICE", 0x03, MediaVariant::kStandard},
    {"7_SLICE", 0x04, MediaVariant::kStandard},     {"8_SLICE", 0x05, MediaVariant::kStandard},
    {"6_SLICE", 0x06, MediaVariant::kStandard},     {"1_SLICE_REV1", 0x07, MediaVariant::kMe},
    {"2_SLICE_REV1", 0x08, MediaVariant::kMe},      {"1_SLICE_REV2", 0x09, MediaVariant::kStandard},
    {"1_SLICE_GFX", 0x0A, MediaVariant::kGfx},      {"2_SLICE_GFX", 0x0B, MediaVariant::kGfx},
    {"4_SLICE_GFX", 0x0C, MediaVariant::kGfx},      {"1_SLICE_NO_ME", 0x0D, MediaVariant::kNoMe},
    {"2_SLICE_NO_ME", 0x0E, MediaVariant::kNoMe},   {"1_SLICE_ALL_ME", 0x0F, MediaVariant::kMeAll},
    {"2_SLICE_ALL_ME", 0x10, MediaVariant::kMeAll}, {"3_SLICE_GFX", 0x11, MediaVariant::kGfx},
};

MediaVariant VariantFromName(std::string_view name) {
  if (name.ends_with("+me.all")) return MediaVariant::kMeAll;
  if (name.ends_with("+me")) return MediaVariant::kMe;
  if (name.ends_with("-me")) return MediaVariant::kNoMe;
  if (name.ends_with("+gfx")) return MediaVariant::kGfx;
  return MediaVariant::kStandard;
}

Confidence ReadConfidence(YamlMap& map, std::string_view key) {
  const std::string text = map.String(key);
  std::optional<Confidence> confidence = ParseConfidence(text);
  if (!confidence) map.Fail(key, "expected confirmed, partial or unconfirmed, got '" + text + "'");
  return *confidence;
}

Confidence ReadConfidence(YamlMap& map, std::string_view key, Confidence fallback) {
  if (!map.Has(key)) {
    map.OptionalNode(key);
    return fallback;
  }
  return ReadConfidence(map, key);
}

// "R470", "470", "470.57.02" -> 470.
int ParseDriverBranch(YamlMap& map, std::string_view key, const std::string& text) {
  std::string_view digits = text;
  if (!digits.empty() && (digits[0] == 'R' || digits[0] == 'r')) digits.remove_prefix(1);
  int branch = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), branch);
  if (error != std::errc() || branch < 100 || branch > 9999 ||
      (end != digits.data() + digits.size() && *end != '.')) {
    map.Fail(key, "expected a driver version like R470 or 525.85.12, got '" + text + "'");
  }
  return branch;
}

std::vector<int> ToInts(const std::vector<std::int64_t>& values) {
  std::vector<int> out;
  out.reserve(values.size());
  for (std::int64_t value : values) out.push_back(static_cast<int>(value));
  return out;
}

ProfileConfidence ReadProfileConfidence(YamlMap& profile_map) {
  YAML::Node node = profile_map.Node("confidence");
  ProfileConfidence result;
  if (node.IsScalar()) {
    Confidence all = ReadConfidence(profile_map, "confidence");
    result = {all, all, all, all, all};
    return result;
  }
  YamlMap map(node, profile_map.origin(), profile_map.PathOf("confidence"));
  Confidence fallback = ReadConfidence(map, "default", Confidence::kConfirmed);
  result.ids = ReadConfidence(map, "ids", fallback);
  result.memory = ReadConfidence(map, "memory", fallback);
  result.sms = ReadConfidence(map, "sms", fallback);
  result.engines = ReadConfidence(map, "engines", fallback);
  result.placements = ReadConfidence(map, "placements", fallback);
  map.Finish();
  return result;
}

EngineCounts ReadEngines(YamlMap& profile_map) {
  YamlMap map(profile_map.Node("engines"), profile_map.origin(), profile_map.PathOf("engines"));
  EngineCounts engines;
  engines.copy = static_cast<int>(map.Int("ce", 0, 64));
  engines.decoder = static_cast<int>(map.Int("dec", 0, 64));
  engines.encoder = static_cast<int>(map.Int("enc", 0, 64));
  engines.jpeg = static_cast<int>(map.Int("jpeg", 0, 64));
  engines.ofa = static_cast<int>(map.Int("ofa", 0, 64));
  map.Finish();
  return engines;
}

GiProfile ReadGiProfile(const YAML::Node& node, std::string_view origin, const std::string& path,
                        int placement_units) {
  YamlMap map(node, origin, path);
  GiProfile profile;
  profile.name = map.String("name");
  profile.aliases = map.StringList("aliases");
  profile.smi_id = static_cast<int>(map.Int("smi_id", 0, 255));
  const std::string nvml_const = map.String("nvml_const");
  const NvmlConst* found = nullptr;
  for (const NvmlConst& candidate : kNvmlGiConstants) {
    if (candidate.suffix == nvml_const) found = &candidate;
  }
  if (found == nullptr) map.Fail("nvml_const", "unknown NVML GPU-instance profile constant");
  profile.nvml_const = found->value;
  profile.nvml_const_name = "NVML_GPU_INSTANCE_PROFILE_" + nvml_const;
  profile.variant = VariantFromName(profile.name);
  if (found->variant != profile.variant) {
    map.Fail("nvml_const", "constant " + nvml_const + " does not match the media variant of '" +
                               profile.name + "'");
  }
  profile.compute_slices = static_cast<int>(map.Int("compute_slices", 1, 8));
  profile.placement_size = static_cast<int>(map.Int("placement_size", 1, placement_units));
  profile.memory_mib = map.Int("memory_mib", 1, 1 << 22);
  YAML::Node alt = map.OptionalNode("memory_mib_alt");
  if (alt.IsDefined() && !alt.IsNull()) {
    if (!alt.IsSequence()) map.Fail("memory_mib_alt", "expected a list");
    for (size_t i = 0; i < alt.size(); ++i) {
      YamlMap alt_map(alt[i], origin, map.PathOf("memory_mib_alt") + "[" + std::to_string(i) + "]");
      AlternateMemory entry;
      entry.mib = alt_map.Int("mib", 1, 1 << 22);
      entry.note = alt_map.String("note", "");
      alt_map.Finish();
      profile.memory_alt.push_back(std::move(entry));
    }
  }
  profile.sms = static_cast<int>(map.Int("sms", 1, 1024));
  profile.engines = ReadEngines(map);
  profile.max_instances = static_cast<int>(map.Int("max_instances", 1, 16));
  profile.starts = ToInts(map.IntList("starts", 0, placement_units - 1));
  if (profile.starts.empty()) map.Fail("starts", "a profile needs at least one placement start");
  if (!std::is_sorted(profile.starts.begin(), profile.starts.end()) ||
      std::adjacent_find(profile.starts.begin(), profile.starts.end()) != profile.starts.end()) {
    map.Fail("starts", "starts must be strictly ascending");
  }
  for (int start : profile.starts) {
    if (start + profile.placement_size > placement_units) {
      map.Fail("starts", "placement " + std::to_string(start) + ":" +
                             std::to_string(profile.placement_size) + " runs past the GPU's " +
                             std::to_string(placement_units) + " placement units");
    }
  }
  profile.default_order = ToInts(map.IntList("default_order", 0, placement_units - 1));
  if (profile.default_order.empty()) {
    profile.default_order = profile.starts;
  } else {
    std::vector<int> sorted = profile.default_order;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != profile.starts) {
      map.Fail("default_order", "default_order must be a permutation of starts");
    }
  }
  const std::string min_driver = map.String("min_driver", "");
  if (!min_driver.empty())
    profile.min_driver_branch = ParseDriverBranch(map, "min_driver", min_driver);
  profile.confidence = ReadProfileConfidence(map);
  profile.note = map.String("note", "");
  map.Finish();
  return profile;
}

CiProfile ReadCiProfile(const YAML::Node& node, std::string_view origin, const std::string& path,
                        int gi_slices,
                        std::map<std::string, std::vector<std::string>>* confirmed_on) {
  YamlMap map(node, origin, path);
  CiProfile ci;
  ci.name = map.String("name");
  ci.id = static_cast<int>(map.Int("id", 0, 8));
  ci.slices = static_cast<int>(map.Int("slices", 1, gi_slices));
  if (ci.name != std::to_string(ci.slices) + "c") {
    map.Fail("name", "a CI profile using " + std::to_string(ci.slices) + " slices must be named " +
                         std::to_string(ci.slices) + "c");
  }
  ci.max_instances = static_cast<int>(map.Int("max", 1, 8));
  ci.starts = ToInts(map.IntList("starts", 0, gi_slices - 1));
  for (int start : ci.starts) {
    if (start + ci.slices > gi_slices) map.Fail("starts", "placement runs past the GPU instance");
  }
  if (ci.starts.empty()) map.Fail("starts", "a CI profile needs at least one start");
  ci.is_default = map.Bool("default", false);
  ci.confidence = ReadConfidence(map, "confidence");
  (*confirmed_on)[std::to_string(gi_slices) + "/" + ci.name] = map.StringList("confirmed_on");
  ci.note = map.String("note", "");
  map.Finish();
  return ci;
}

std::uint16_t ParsePciId(YamlMap& map, const std::string& text) {
  std::string_view digits = text;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits.remove_prefix(2);
  }
  unsigned value = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
  if (digits.size() != 4 || error != std::errc() || end != digits.data() + digits.size()) {
    map.Fail("pci_device_ids",
             "expected a 16-bit hex device id like \"0x2330\", got '" + text + "'");
  }
  return static_cast<std::uint16_t>(value);
}

MigSpec ReadMigSpec(const YAML::Node& node, std::string_view origin, const std::string& path,
                    const std::vector<std::vector<CiProfile>>& ci_table) {
  YamlMap map(node, origin, path);
  MigSpec mig;
  mig.compute_slices = static_cast<int>(map.Int("compute_slices", 1, 8));
  mig.placement_units = static_cast<int>(map.Int("placement_units", 1, 16));
  mig.sms = static_cast<int>(map.Int("sms", 1, 1024));
  mig.min_driver = map.String("min_driver");
  mig.min_driver_branch = ParseDriverBranch(map, "min_driver", mig.min_driver);
  {
    YamlMap placement(map.Node("default_placement"), origin, map.PathOf("default_placement"));
    mig.default_placement_confidence = ReadConfidence(placement, "confidence");
    mig.default_placement_note = placement.String("note", "");
    placement.Finish();
  }
  mig.balanced = map.StringList("balanced");
  YAML::Node profiles = map.Node("profiles");
  if (!profiles.IsSequence() || profiles.size() == 0) map.Fail("profiles", "expected a list");
  for (size_t i = 0; i < profiles.size(); ++i) {
    mig.profiles.push_back(ReadGiProfile(profiles[i], origin,
                                         map.PathOf("profiles") + "[" + std::to_string(i) + "]",
                                         mig.placement_units));
  }
  std::set<std::string> names;
  std::set<int> smi_ids;
  for (size_t i = 0; i < mig.profiles.size(); ++i) {
    const GiProfile& profile = mig.profiles[i];
    const std::string where = map.PathOf("profiles") + "[" + std::to_string(i) + "]";
    if (profile.compute_slices > mig.compute_slices) {
      util::ThrowYamlError(origin, profiles[i], where,
                           "profile '" + profile.name + "' has more compute slices than the GPU");
    }
    std::vector<std::string> all_names = profile.aliases;
    all_names.push_back(profile.name);
    for (std::string name : all_names) {
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (!names.insert(name).second) {
        util::ThrowYamlError(origin, profiles[i], where, "duplicate profile name '" + name + "'");
      }
    }
    if (!smi_ids.insert(profile.smi_id).second) {
      util::ThrowYamlError(origin, profiles[i], where,
                           "duplicate smi_id " + std::to_string(profile.smi_id));
    }
  }
  for (const std::string& name : mig.balanced) {
    if (mig.FindProfile(name) == nullptr) {
      map.Fail("balanced", "unknown profile '" + name + "' in balanced layout");
    }
  }
  mig.ci_profiles.resize(static_cast<size_t>(mig.compute_slices) + 1);
  for (const GiProfile& profile : mig.profiles) {
    const auto slices = static_cast<size_t>(profile.compute_slices);
    if (slices >= ci_table.size() || ci_table[slices].empty()) {
      map.Fail("profiles", "no compute_instance_profiles entry for GPU instances with " +
                               std::to_string(slices) + " compute slices");
    }
    mig.ci_profiles[slices] = ci_table[slices];
  }
  map.Finish();
  return mig;
}

GpuModel ReadModel(const YAML::Node& node, std::string_view origin, const std::string& path,
                   const std::vector<std::vector<CiProfile>>& ci_table,
                   const std::map<std::string, std::vector<std::string>>& ci_confirmed_on) {
  YamlMap map(node, origin, path);
  GpuModel model;
  model.id = map.String("id");
  for (char c : model.id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') {
      map.Fail("id", "ids use letters, digits and '-' only");
    }
  }
  model.display_name = map.String("display_name");
  model.aliases = map.StringList("aliases");
  model.nvml_names = map.StringList("nvml_names");
  for (const std::string& text : map.StringList("pci_device_ids")) {
    model.pci_device_ids.push_back(ParsePciId(map, text));
  }
  model.architecture = map.String("architecture");
  model.chip = map.String("chip");
  model.compute_capability = map.String("compute_capability");
  model.memory_mib = map.Int("memory_mib", 1024, 1 << 22);
  model.sms = static_cast<int>(map.Int("sms", 1, 1024));
  model.confidence = ReadConfidence(map, "confidence");
  model.memory_confidence = model.sms_confidence = model.pci_confidence =
      model.nvml_names_confidence = model.confidence;
  if (map.Has("fact_confidence")) {
    YamlMap facts(map.Node("fact_confidence"), origin, map.PathOf("fact_confidence"));
    model.memory_confidence = ReadConfidence(facts, "memory_mib", model.confidence);
    model.sms_confidence = ReadConfidence(facts, "sms", model.confidence);
    model.pci_confidence = ReadConfidence(facts, "pci_device_ids", model.confidence);
    model.nvml_names_confidence = ReadConfidence(facts, "nvml_names", model.confidence);
    facts.Finish();
  } else {
    map.OptionalNode("fact_confidence");
  }
  model.sources = map.StringList("sources");
  model.notes = map.StringList("notes");
  if (map.Has("mig")) {
    model.mig = ReadMigSpec(map.Node("mig"), origin, map.PathOf("mig"), ci_table);
    // A CI profile listed with `confirmed_on` is better established on those models.
    for (size_t g = 1; g < model.mig->ci_profiles.size(); ++g) {
      for (CiProfile& ci : model.mig->ci_profiles[g]) {
        auto it = ci_confirmed_on.find(std::to_string(g) + "/" + ci.name);
        if (it == ci_confirmed_on.end()) continue;
        if (std::find(it->second.begin(), it->second.end(), model.id) != it->second.end()) {
          ci.confidence = Confidence::kPartial;
        }
      }
    }
  } else {
    map.OptionalNode("mig");
  }
  map.Finish();
  return model;
}

std::vector<std::vector<CiProfile>> ReadCiTable(
    const YAML::Node& node, std::string_view origin,
    std::map<std::string, std::vector<std::string>>* confirmed_on) {
  std::vector<std::vector<CiProfile>> table(9);
  if (!node.IsMap())
    util::ThrowYamlError(origin, node, "compute_instance_profiles", "expected a mapping");
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.Scalar();
    const std::string path = "compute_instance_profiles." + key;
    const auto gi_slices = util::YamlInt(it->first, origin, path, 1, 8);
    if (!it->second.IsSequence()) util::ThrowYamlError(origin, it->second, path, "expected a list");
    auto& list = table[static_cast<size_t>(gi_slices)];
    int defaults = 0;
    for (size_t i = 0; i < it->second.size(); ++i) {
      list.push_back(ReadCiProfile(it->second[i], origin, path + "[" + std::to_string(i) + "]",
                                   static_cast<int>(gi_slices), confirmed_on));
      defaults += list.back().is_default ? 1 : 0;
    }
    if (defaults != 1) {
      util::ThrowYamlError(origin, it->second, path, "exactly one CI profile must be the default");
    }
  }
  return table;
}

bool IsDigits(std::string_view text, bool hex) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [hex](char c) {
    return hex ? std::isxdigit(static_cast<unsigned char>(c)) != 0
               : std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// Parses a PCI device id in the forms users write: 0x2330, 2330, 0x233010DE, 10de:2330.
std::optional<std::uint16_t> ParseUserPciId(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string_view digits = lower;
  if (digits.starts_with("10de:")) digits.remove_prefix(5);
  if (digits.starts_with("0x")) digits.remove_prefix(2);
  if (digits.size() == 8 && digits.ends_with("10de")) digits.remove_suffix(4);
  if (digits.size() != 4 || !IsDigits(digits, true)) return std::nullopt;
  unsigned value = 0;
  std::from_chars(digits.data(), digits.data() + 4, value, 16);
  return static_cast<std::uint16_t>(value);
}

std::vector<std::string> AllNames(const GpuModel& model) {
  std::vector<std::string> names = {model.id, model.display_name};
  names.insert(names.end(), model.aliases.begin(), model.aliases.end());
  names.insert(names.end(), model.nvml_names.begin(), model.nvml_names.end());
  return names;
}

}  // namespace

std::string NormalizeName(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == ' ' || c == '-' || c == '_' || c == '.') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (out.starts_with("nvidia") && out.size() > 6) out.erase(0, 6);
  return out;
}

const Catalog& Catalog::Builtin() {
  static const Catalog* catalog = [] {
    absl::StatusOr<Catalog> loaded =
        FromYaml(embedded::BuiltinGpuCatalog(), "built-in catalog (src/hw/data/gpus.yaml)");
    if (!loaded.ok()) {
      std::fprintf(stderr, "gpuslice: invalid built-in GPU catalog: %s\n",
                   std::string(loaded.status().message()).c_str());
      std::abort();
    }
    return new Catalog(*std::move(loaded));
  }();
  return *catalog;
}

absl::StatusOr<Catalog> Catalog::FromYaml(std::string_view yaml_text, std::string_view origin) {
  Catalog catalog;
  try {
    YAML::Node root = YAML::Load(std::string(yaml_text));
    YamlMap top(root, origin, "");
    const std::int64_t version = top.Int("version", 1, 1000);
    if (version != 1) top.Fail("version", "unsupported catalog version (this gpuslice reads 1)");
    std::map<std::string, std::vector<std::string>> ci_confirmed_on;
    std::vector<std::vector<CiProfile>> ci_table;
    if (top.Has("compute_instance_profiles")) {
      ci_table = ReadCiTable(top.Node("compute_instance_profiles"), origin, &ci_confirmed_on);
    } else {
      // A user's file may omit the CI table; the built-in one applies.
      top.OptionalNode("compute_instance_profiles");
      ci_table.assign(9, {});
      for (const GpuModel& model : Builtin().models()) {
        if (!model.mig) continue;
        for (size_t g = 1; g < model.mig->ci_profiles.size(); ++g) {
          if (ci_table[g].empty()) ci_table[g] = model.mig->ci_profiles[g];
        }
      }
    }
    YAML::Node gpus = top.Node("gpus");
    if (!gpus.IsSequence()) top.Fail("gpus", "expected a list of GPU models");
    for (size_t i = 0; i < gpus.size(); ++i) {
      catalog.models_.push_back(
          ReadModel(gpus[i], origin, "gpus[" + std::to_string(i) + "]", ci_table, ci_confirmed_on));
    }
    top.Finish();
  } catch (const util::ParseError& error) {
    return util::StatusOf(error);
  } catch (const YAML::Exception& error) {
    return util::StatusOfYaml(error, origin);
  }
  if (absl::Status status = catalog.Validate(origin); !status.ok()) return status;
  return catalog;
}

absl::Status Catalog::Validate(std::string_view origin) const {
  std::map<std::string, std::string> owner_of_name;
  std::map<std::uint16_t, std::string> owner_of_pci;
  for (const GpuModel& model : models_) {
    std::set<std::string> own;
    for (const std::string& name : AllNames(model)) {
      const std::string key = NormalizeName(name);
      if (key.empty()) continue;
      auto [it, inserted] = owner_of_name.emplace(key, model.id);
      if (!inserted && it->second != model.id) {
        return absl::InvalidArgumentError(std::string(origin) + ": name '" + name + "' of " +
                                          model.id + " is already used by " + it->second);
      }
    }
    for (std::uint16_t pci : model.pci_device_ids) {
      auto [it, inserted] = owner_of_pci.emplace(pci, model.id);
      if (!inserted) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%04X", static_cast<unsigned>(pci));
        return absl::InvalidArgumentError(std::string(origin) + ": PCI device id " + hex + " of " +
                                          model.id + " is already used by " + it->second);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Catalog::Merge(const Catalog& other) {
  Catalog merged = *this;
  for (const GpuModel& model : other.models_) {
    auto it = std::find_if(merged.models_.begin(), merged.models_.end(),
                           [&](const GpuModel& existing) { return existing.id == model.id; });
    if (it != merged.models_.end()) {
      *it = model;
    } else {
      merged.models_.push_back(model);
    }
  }
  if (absl::Status status = merged.Validate("merged catalog"); !status.ok()) return status;
  *this = std::move(merged);
  return absl::OkStatus();
}

const GpuModel* Catalog::Find(std::string_view name) const {
  const std::string key = NormalizeName(name);
  if (key.empty()) return nullptr;
  for (const GpuModel& model : models_) {
    for (const std::string& candidate : AllNames(model)) {
      if (NormalizeName(candidate) == key) return &model;
    }
  }
  if (std::optional<std::uint16_t> pci = ParseUserPciId(name)) {
    for (const GpuModel& model : models_) {
      if (std::find(model.pci_device_ids.begin(), model.pci_device_ids.end(), *pci) !=
          model.pci_device_ids.end()) {
        return &model;
      }
    }
  }
  return nullptr;
}

std::vector<std::string> Catalog::Suggest(std::string_view name, size_t limit) const {
  const std::string key = NormalizeName(name);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const GpuModel& model : models_) {
    size_t best = SIZE_MAX;
    for (const std::string& candidate : AllNames(model)) {
      const std::string normalized = NormalizeName(candidate);
      size_t distance = util::EditDistance(key, normalized);
      // A name that contains what the user typed (e.g. "a100" in "a10040gb") is a strong match.
      if (key.size() >= 2 && normalized.find(key) != std::string::npos) distance = 0;
      best = std::min(best, distance);
    }
    scored.emplace_back(best, model.id);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  const size_t threshold = std::max<size_t>(3, key.size() / 2);
  for (const auto& [distance, id] : scored) {
    if (out.size() >= limit || distance > threshold) break;
    out.push_back(id);
  }
  return out;
}

absl::StatusOr<const GpuModel*> Catalog::Resolve(std::string_view name) const {
  if (const GpuModel* model = Find(name)) return model;
  std::string message = "unknown GPU model '" + std::string(name) + "'";
  const std::vector<std::string> suggestions = Suggest(name, 4);
  if (!suggestions.empty()) {
    message += "; did you mean ";
    for (size_t i = 0; i < suggestions.size(); ++i) {
      if (i > 0) message += i + 1 == suggestions.size() ? " or " : ", ";
      message += suggestions[i];
    }
    message += "?";
  }
  message += " (`gpuslice gpus` lists every known model)";
  return absl::NotFoundError(message);
}

}  // namespace gpuslice::hw
