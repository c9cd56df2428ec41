#include "common.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "gpuslice/util/duration.h"
#include "gpuslice/util/utf8.h"

namespace gpuslice::cli {

const hw::Catalog* LoadCatalog(const GlobalOptions& options) {
  if (options.catalog_files.empty()) return &hw::Catalog::Builtin();
  static hw::Catalog merged;
  merged = hw::Catalog::Builtin();
  for (const std::string& path : options.catalog_files) {
    std::ifstream file(path);
    if (!file) {
      PrintError("cannot read catalog file '" + path + "'");
      return nullptr;
    }
    std::stringstream text;
    text << file.rdbuf();
    absl::StatusOr<hw::Catalog> extra = hw::Catalog::FromYaml(text.str(), path);
    if (!extra.ok()) {
      PrintError(std::string(extra.status().message()));
      return nullptr;
    }
    if (absl::Status status = merged.Merge(*extra); !status.ok()) {
      PrintError(path + ": " + std::string(status.message()));
      return nullptr;
    }
  }
  return &merged;
}

const hw::GpuModel* ResolveGpu(const hw::Catalog& catalog, const std::string& name) {
  absl::StatusOr<const hw::GpuModel*> model = catalog.Resolve(name);
  if (!model.ok()) {
    PrintError(std::string(model.status().message()));
    return nullptr;
  }
  return *model;
}

const hw::GpuModel* ResolveMigGpu(const hw::Catalog& catalog, const std::string& name) {
  const hw::GpuModel* model = ResolveGpu(catalog, name);
  if (model != nullptr && !model->mig_capable()) {
    std::string mig_models;
    for (const hw::GpuModel& candidate : catalog.models()) {
      if (candidate.mig_capable()) mig_models += (mig_models.empty() ? "" : ", ") + candidate.id;
    }
    PrintError(model->id + " (" + model->display_name +
               ") has no MIG; it can only be shared by software slicing. MIG-capable models: " +
               mig_models);
    return nullptr;
  }
  return model;
}

std::string Gib(std::int64_t mib) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", static_cast<double>(mib) / 1024.0);
  return buffer;
}

std::string Mark(hw::Confidence confidence) {
  switch (confidence) {
    case hw::Confidence::kConfirmed:
      return "";
    case hw::Confidence::kPartial:
      return "~";
    case hw::Confidence::kUnconfirmed:
      return "?";
  }
  return "?";
}

std::string WithMark(const std::string& value, hw::Confidence confidence) {
  return value + Mark(confidence);
}

std::string MarkLegend() {
  return "Marks: ~ partial (inferred or sources disagree), ? unconfirmed (estimate); unmarked "
         "facts are confirmed. Sources: docs/CATALOG.md.";
}

std::string PlacementsText(const hw::GiProfile& profile) {
  std::string text = "{";
  for (size_t i = 0; i < profile.starts.size(); ++i) {
    text += (i > 0 ? "," : "") + std::to_string(profile.starts[i]);
  }
  return text + "}:" + std::to_string(profile.placement_size);
}

std::string HexId(std::uint16_t pci_id) {
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "0x%04X", static_cast<unsigned>(pci_id));
  return buffer;
}

size_t DisplayWidth(const std::string& text) {
  size_t width = 0;
  for (char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0U) != 0x80U) ++width;
  }
  return width;
}

Table::Table(std::vector<std::string> header) : right_(header.size(), false) {
  rows_.push_back(std::move(header));
}

void Table::Add(std::vector<std::string> row) {
  row.resize(rows_.front().size());
  for (std::string& cell : row) cell = util::ForTerminal(cell);
  rows_.push_back(std::move(row));
}

void Table::RightAlign(size_t column) {
  if (column < right_.size()) right_[column] = true;
}

std::string Table::Render(const std::string& indent) const {
  std::vector<size_t> widths(rows_.front().size(), 0);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const size_t pad = widths[c] - DisplayWidth(row[c]);
      if (right_[c])
        line += std::string(pad, ' ') + row[c];
      else
        line += row[c] + (c + 1 < row.size() ? std::string(pad, ' ') : "");
      if (c + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

nlohmann::json ModelSummaryJson(const hw::GpuModel& model) {
  nlohmann::json pci = nlohmann::json::array();
  for (std::uint16_t id : model.pci_device_ids) pci.push_back(HexId(id));
  nlohmann::json json = {
      {"id", model.id},
      {"display_name", model.display_name},
      {"aliases", model.aliases},
      {"nvml_names", model.nvml_names},
      {"pci_device_ids", pci},
      {"architecture", model.architecture},
      {"chip", model.chip},
      {"compute_capability", model.compute_capability},
      {"memory_mib", model.memory_mib},
      {"sms", model.sms},
      {"mig_capable", model.mig_capable()},
      {"confidence",
       {{"overall", hw::ToString(model.confidence)},
        {"memory_mib", hw::ToString(model.memory_confidence)},
        {"sms", hw::ToString(model.sms_confidence)},
        {"pci_device_ids", hw::ToString(model.pci_confidence)},
        {"nvml_names", hw::ToString(model.nvml_names_confidence)}}},
      {"sources", model.sources},
      {"notes", model.notes},
  };
  if (model.mig) {
    json["mig"] = {
        {"compute_slices", model.mig->compute_slices},
        {"placement_units", model.mig->placement_units},
        {"sms", model.mig->sms},
        {"min_driver", model.mig->min_driver},
        {"profile_count", model.mig->profiles.size()},
        {"balanced", model.mig->balanced},
        {"mig_parted_device_filter", model.MigPartedDeviceFilters()},
        {"default_placement",
         {{"confidence", hw::ToString(model.mig->default_placement_confidence)},
          {"note", model.mig->default_placement_note}}},
    };
  }
  return json;
}

nlohmann::json ProfileJson(const hw::MigSpec& mig, const hw::GiProfile& profile) {
  nlohmann::json placements = nlohmann::json::array();
  for (int start : profile.starts) {
    placements.push_back({{"start", start}, {"size", profile.placement_size}});
  }
  nlohmann::json alternates = nlohmann::json::array();
  for (const hw::AlternateMemory& alt : profile.memory_alt) {
    alternates.push_back({{"memory_mib", alt.mib}, {"note", alt.note}});
  }
  nlohmann::json cis = nlohmann::json::array();
  for (const hw::CiProfile& ci : mig.CiProfilesFor(profile.compute_slices)) {
    nlohmann::json ci_placements = nlohmann::json::array();
    for (int start : ci.starts) ci_placements.push_back({{"start", start}, {"size", ci.slices}});
    const int sms_per_slice = profile.compute_slices > 0 ? profile.sms / profile.compute_slices : 0;
    cis.push_back({
        {"name", ci.name},
        {"device_name",
         ci.slices == profile.compute_slices ? profile.name : ci.name + "." + profile.name},
        {"id", ci.id},
        {"slices", ci.slices},
        {"max_instances", ci.max_instances},
        {"placements", ci_placements},
        {"default", ci.is_default},
        {"sms", ci.slices == profile.compute_slices ? profile.sms : ci.slices * sms_per_slice},
        {"confidence", hw::ToString(ci.confidence)},
    });
  }
  return {
      {"name", profile.name},
      {"aliases", profile.aliases},
      {"id", profile.smi_id},
      {"nvml_const", profile.nvml_const},
      {"nvml_const_name", profile.nvml_const_name},
      {"compute_slices", profile.compute_slices},
      {"placement_size", profile.placement_size},
      {"memory_mib", profile.memory_mib},
      {"memory_gib", Gib(profile.memory_mib)},
      {"memory_mib_alt", alternates},
      {"sms", profile.sms},
      {"engines",
       {{"ce", profile.engines.copy},
        {"dec", profile.engines.decoder},
        {"enc", profile.engines.encoder},
        {"jpeg", profile.engines.jpeg},
        {"ofa", profile.engines.ofa}}},
      {"max_instances", profile.max_instances},
      {"placements", placements},
      {"default_order", profile.default_order},
      {"min_driver", profile.min_driver_branch > 0
                         ? nlohmann::json("R" + std::to_string(profile.min_driver_branch))
                         : nlohmann::json(nullptr)},
      {"confidence",
       {{"overall", hw::ToString(profile.confidence.Overall())},
        {"ids", hw::ToString(profile.confidence.ids)},
        {"memory", hw::ToString(profile.confidence.memory)},
        {"sms", hw::ToString(profile.confidence.sms)},
        {"engines", hw::ToString(profile.confidence.engines)},
        {"placements", hw::ToString(profile.confidence.placements)}}},
      {"note", profile.note},
      {"compute_instance_profiles", cis},
  };
}

void PrintJson(const nlohmann::json& value) { std::cout << value.dump(2) << "\n"; }

void PrintError(const std::string& message) { std::cerr << "gpuslice: " << message << "\n"; }

CLI::Validator Duration(std::int64_t max_s, bool zero_means_none) {
  return CLI::Validator(
      [max_s, zero_means_none](std::string& text) -> std::string {
        if (zero_means_none && (text == "0" || text == "never")) {
          text = "0";
          return "";
        }
        absl::StatusOr<std::int64_t> seconds = util::ParseDuration(text, max_s);
        if (!seconds.ok()) return std::string(seconds.status().message());
        text = std::to_string(*seconds);
        return "";
      },
      zero_means_none ? "DURATION|never" : "DURATION");
}

}  // namespace gpuslice::cli
