#include "top_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <utility>

#include "common.h"
#include "gpuslice/geometry/shape.h"
#include "layout_drawing.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

constexpr std::size_t kBarWidth = 10;
constexpr const char* kReset = "\x1b[0m";
constexpr const char* kBold = "\x1b[1m";
constexpr const char* kRed = "\x1b[31m";
constexpr const char* kGreen = "\x1b[32m";
constexpr const char* kYellow = "\x1b[33m";
constexpr const char* kDim = "\x1b[2m";

// Columns `text` takes on a terminal: one per UTF-8 code point, none for ANSI escape sequences.
std::size_t VisibleWidth(const std::string& text) {
  std::size_t width = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == 0x1b) {
      // CSI: ESC [ parameters final-byte (0x40-0x7e).
      ++i;
      if (i < text.size() && text[i] == '[') {
        ++i;
        while (i < text.size() && (static_cast<unsigned char>(text[i]) < 0x40 ||
                                   static_cast<unsigned char>(text[i]) > 0x7e)) {
          ++i;
        }
      }
      continue;
    }
    if ((byte & 0xC0) != 0x80) ++width;
  }
  return width;
}

// `text` cut to `width` columns, ending with "…" when cut (and a colour reset when it had colour).
std::string Fit(const std::string& text, std::size_t width) {
  if (VisibleWidth(text) <= width) return text;
  if (width == 0) return "";
  std::string out;
  std::size_t columns = 0;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == 0x1b) {
      std::size_t end = i + 1;
      if (end < text.size() && text[end] == '[') {
        ++end;
        while (end < text.size() && (static_cast<unsigned char>(text[end]) < 0x40 ||
                                     static_cast<unsigned char>(text[end]) > 0x7e)) {
          ++end;
        }
      }
      end = std::min(end + 1, text.size());
      out += text.substr(i, end - i);
      escaped = true;
      i = end;
      continue;
    }
    // One code point: the lead byte and its continuation bytes.
    std::size_t end = i + 1;
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    if (columns + 1 >= width) break;
    out += text.substr(i, end - i);
    ++columns;
    i = end;
  }
  out += "…";
  if (escaped) out += kReset;
  return out;
}

std::string Pad(const std::string& text, std::size_t width) {
  const std::size_t visible = VisibleWidth(text);
  return visible >= width ? text : text + std::string(width - visible, ' ');
}

std::string Paint(const std::string& text, const char* code, bool color) {
  return color && !text.empty() ? std::string(code) + text + kReset : text;
}

std::string Percent(double value) { return std::to_string(std::lround(value)) + "%"; }

template <typename T>
std::string OrDash(const std::optional<T>& value, const std::string& suffix = "") {
  return value.has_value() ? std::to_string(*value) + suffix : "-";
}

std::string Repeat(const std::string& piece, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) out += piece;
  return out;
}

// "███░░░░░░░ 10.00/39.50 GiB"; the bar is blank and the figure "-" when unknown, and all of it
// "-" when neither figure is known.
std::string Memory(const std::optional<std::int64_t>& used,
                   const std::optional<std::int64_t>& total, bool color) {
  if (!used.has_value() && !total.has_value()) return "-";
  std::string bar(kBarWidth, ' ');
  if (used.has_value() && total.has_value() && *total > 0) {
    const double fraction =
        std::clamp(static_cast<double>(*used) / static_cast<double>(*total), 0.0, 1.0);
    auto filled = static_cast<std::size_t>(std::lround(fraction * static_cast<double>(kBarWidth)));
    if (*used > 0 && filled == 0) filled = 1;  // a used device never looks empty
    const char* code = fraction >= 0.9 ? kRed : fraction >= 0.7 ? kYellow : kGreen;
    bar = Paint(Repeat("█", filled), code, color) +
          Paint(Repeat("░", kBarWidth - filled), kDim, color);
  }
  const std::string used_text = used.has_value() ? Gib(*used) : "-";
  const std::string total_text = total.has_value() ? Gib(*total) : "-";
  return bar + " " + used_text + "/" + total_text + " GiB";
}

std::string Activity(const std::optional<device::Activity>& activity) {
  return activity.has_value() ? Percent(activity->sm_active_pct) : "-";
}

std::string Power(const device::GpuTelemetry& t) {
  if (!t.power_w.has_value() && !t.power_limit_w.has_value()) return "-";
  const std::string now = t.power_w.has_value() ? std::to_string(std::lround(*t.power_w)) : "-";
  const std::string limit =
      t.power_limit_w.has_value() ? std::to_string(std::lround(*t.power_limit_w)) : "-";
  return now + "/" + limit + " W";
}

std::string Leases(const std::vector<DeviceLease>* leases) {
  if (leases == nullptr || leases->empty()) return "-";
  std::string text;
  for (const DeviceLease& lease : *leases) {
    if (!text.empty()) text += "; ";
    text += "#" + std::to_string(lease.lease) + " " + lease.tenant;
    if (!lease.class_name.empty()) text += " " + lease.class_name;
    if (!lease.purpose.empty()) text += ": " + lease.purpose;
  }
  return text;
}

template <typename Map>
const typename Map::mapped_type* Find(const Map& map, const typename Map::key_type& key) {
  auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}

// The instance's units on the GPU: "····████" (one column per placement unit), or "-".
std::string Placement(const GpuPlacements* placements, int gi) {
  if (placements == nullptr || placements->model == nullptr || !placements->model->mig) return "-";
  const int units = placements->model->mig->placement_units;
  for (const device::GpuInstanceInfo& info : placements->gis) {
    if (info.id != gi) continue;
    std::string text;
    for (int unit = 0; unit < units; ++unit) {
      text += unit >= info.start && unit < info.start + info.size ? "█" : "·";
    }
    return text;
  }
  return "-";
}

// The layout_drawing.h picture of a MIG GPU's instances, one string per line; empty when the
// model or a profile is not in the catalog, or the layout is not one the catalog allows.
std::vector<std::string> Drawing(const GpuPlacements& placements) {
  const hw::GpuModel* model = placements.model;
  if (model == nullptr || !model->mig) return {};
  std::vector<geometry::Placed> layout;
  for (const device::GpuInstanceInfo& gi : placements.gis) {
    const hw::GiProfile* profile = model->mig->FindProfileBySmiId(gi.profile_id);
    if (profile == nullptr) return {};
    layout.push_back({static_cast<std::uint8_t>(model->mig->IndexOf(*profile)),
                      static_cast<std::uint8_t>(gi.start)});
  }
  const geometry::Shape shape(*model);
  if (!shape.Validate(layout).ok()) return {};
  std::vector<std::string> lines;
  std::istringstream text(DrawLayout(shape, layout, {}, "  "));
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  return lines;
}

void AddProcessLines(const std::vector<device::ProcessInfo>& processes, bool mig,
                     std::vector<std::string>& lines) {
  for (const device::ProcessInfo& p : processes) {
    std::string line =
        "      pid " + std::to_string(p.pid) + " " + p.name + " " + Gib(p.used_memory_mib) + " GiB";
    if (mig && p.ci >= 0) line += " (CI " + std::to_string(p.ci) + ")";
    lines.push_back(line);
  }
}

struct Row {
  std::vector<std::string> cells;
  const std::vector<device::ProcessInfo>* processes = nullptr;
  bool mig = false;
};

std::string GpuHeader(const metrics::GpuFigures& gpu, bool color) {
  std::string line = Paint("GPU " + std::to_string(gpu.index), kBold, color) + "  " + gpu.name;
  if (gpu.lost) {
    return line + " · " + Paint("LOST: the GPU fell off the bus", kRed, color);
  }
  const device::GpuTelemetry& t = gpu.telemetry;
  line += gpu.mig ? " · MIG" : " · whole";
  if (t.throttle_reasons.has_value()) {
    const std::vector<std::string> names = ThrottleNames(*t.throttle_reasons);
    if (!names.empty()) {
      std::string joined;
      for (const std::string& name : names) joined += (joined.empty() ? "" : ",") + name;
      line += " · " + Paint("THROTTLED " + joined, kRed, color);
    }
  }
  line += " · mem " + Memory(gpu.memory_used_mib, gpu.memory_total_mib, color);
  line += " · sm " + Activity(gpu.activity);
  line += " · util " + OrDash(t.utilization_pct, "%");
  line += " · temp " + OrDash(t.temperature_c, "C");
  line += " · power " + Power(t);
  return line;
}

Row DeviceRow(const TopInput& input, const metrics::GpuFigures& gpu, bool color) {
  const std::string key = DeviceKey(gpu);
  const Idle* idle = Find(input.idle, key);
  return {{"GPU " + std::to_string(gpu.index), "whole", "-",
           Memory(gpu.memory_used_mib, gpu.memory_total_mib, color), Activity(gpu.activity),
           OrDash(gpu.processes), idle != nullptr ? IdleText(*idle) : "-",
           Leases(Find(input.leases, key))},
          &gpu.process_list,
          false};
}

Row InstanceRow(const TopInput& input, const metrics::GpuFigures& gpu,
                const metrics::InstanceFigures& instance, bool color) {
  const std::string key = DeviceKey(gpu, instance);
  const Idle* idle = Find(input.idle, key);
  return {{"GI " + std::to_string(instance.gi), instance.profile,
           Placement(Find(input.placements, gpu.index), instance.gi),
           Memory(instance.memory_used_mib, instance.memory_total_mib, color),
           Activity(instance.activity), OrDash(instance.processes),
           idle != nullptr ? IdleText(*idle) : "-", Leases(Find(input.leases, key))},
          &instance.process_list,
          true};
}

void AddTable(const std::vector<Row>& rows, const TopOptions& options,
              std::vector<std::string>& lines) {
  const std::vector<std::string> header = {"DEVICE", "PROFILE", "PLACEMENT", "MEMORY",
                                           "SM",     "PROCS",   "IDLE",      "LEASE"};
  std::vector<std::size_t> widths(header.size(), 0);
  for (std::size_t c = 0; c < header.size(); ++c) widths[c] = VisibleWidth(header[c]);
  for (const Row& row : rows) {
    for (std::size_t c = 0; c < row.cells.size(); ++c) {
      widths[c] = std::max(widths[c], VisibleWidth(row.cells[c]));
    }
  }
  auto render = [&widths](const std::vector<std::string>& cells) {
    std::string line = "  ";
    for (std::size_t c = 0; c < cells.size(); ++c) {
      line += c + 1 == cells.size() ? cells[c] : Pad(cells[c], widths[c]) + "  ";
    }
    return line;
  };
  lines.push_back(Paint(render(header), kDim, options.color));
  for (const Row& row : rows) {
    lines.push_back(render(row.cells));
    if (options.processes && row.processes != nullptr) {
      AddProcessLines(*row.processes, row.mig, lines);
    }
  }
}

json Optional(const auto& value) { return value.has_value() ? json(*value) : json(nullptr); }

json ProcessesJson(const std::vector<device::ProcessInfo>& processes) {
  json out = json::array();
  for (const device::ProcessInfo& p : processes) {
    json process = {{"pid", p.pid}, {"name", p.name}, {"used_memory_mib", p.used_memory_mib}};
    if (p.gi >= 0) process["gi"] = p.gi;
    if (p.ci >= 0) process["ci"] = p.ci;
    out.push_back(process);
  }
  return out;
}

json LeasesJson(const std::vector<DeviceLease>* leases) {
  json out = json::array();
  if (leases == nullptr) return out;
  for (const DeviceLease& lease : *leases) {
    out.push_back({{"lease", lease.lease},
                   {"tenant", lease.tenant},
                   {"class", lease.class_name},
                   {"purpose", lease.purpose}});
  }
  return out;
}

void AddDeviceJson(const TopInput& input, const std::string& key,
                   const std::optional<int>& processes,
                   const std::vector<device::ProcessInfo>& process_list, json& out) {
  out["processes"] = Optional(processes);
  out["process_list"] = ProcessesJson(process_list);
  out["leases"] = LeasesJson(Find(input.leases, key));
  const Idle* idle = Find(input.idle, key);
  out["idle_s"] = idle != nullptr ? json(idle->seconds) : json(nullptr);
  out["idle_at_least"] = idle != nullptr && idle->at_least;
}

std::string PadNumber(std::int64_t value) {
  return (value < 10 ? "0" : "") + std::to_string(value);
}

}  // namespace

std::string FitToWidth(const std::string& text, std::size_t width) { return Fit(text, width); }

std::string DeviceKey(const metrics::GpuFigures& gpu) { return gpu.uuid; }

std::string DeviceKey(const metrics::GpuFigures& gpu, const metrics::InstanceFigures& instance) {
  return !instance.uuid.empty() ? instance.uuid : gpu.uuid + "/gi" + std::to_string(instance.gi);
}

std::string IdleText(const Idle& idle) {
  const std::int64_t s = std::max<std::int64_t>(0, idle.seconds);
  std::string text;
  if (s < 60) {
    text = std::to_string(s) + "s";
  } else if (s < 3600) {
    text = std::to_string(s / 60) + "m" + PadNumber(s % 60) + "s";
  } else if (s < 86400) {
    text = std::to_string(s / 3600) + "h" + PadNumber(s % 3600 / 60) + "m";
  } else {
    text = std::to_string(s / 86400) + "d" + PadNumber(s % 86400 / 3600) + "h";
  }
  return (idle.at_least ? "≥" : "") + text;
}

std::vector<std::string> ThrottleNames(std::uint64_t reasons) {
  static const std::vector<std::pair<std::uint64_t, const char*>> kNames = {
      {device::kThrottleSwPowerCap, "power-cap"},
      {device::kThrottleHwSlowdown, "hw-slowdown"},
      {device::kThrottleSwThermal, "sw-thermal"},
      {device::kThrottleHwThermal, "hw-thermal"},
      {device::kThrottleHwPowerBrake, "power-brake"}};
  std::vector<std::string> names;
  for (const auto& [bit, name] : kNames) {
    if ((reasons & bit) != 0) names.emplace_back(name);
  }
  return names;
}

std::vector<std::string> RenderTop(const TopInput& input, const TopOptions& options) {
  std::vector<std::string> lines;
  if (!input.title.empty()) lines.push_back(Paint(input.title, kBold, options.color));
  if (input.machine.gpus.empty()) lines.push_back("no GPUs");
  for (const metrics::GpuFigures& gpu : input.machine.gpus) {
    if (!lines.empty()) lines.emplace_back();
    lines.push_back(GpuHeader(gpu, options.color));
    if (gpu.lost) continue;
    const GpuPlacements* placements = Find(input.placements, gpu.index);
    if (gpu.mig && options.drawing && placements != nullptr) {
      for (std::string& line : Drawing(*placements)) lines.push_back(std::move(line));
    }
    std::vector<Row> rows;
    if (!gpu.mig) {
      rows.push_back(DeviceRow(input, gpu, options.color));
    } else {
      for (const metrics::InstanceFigures& instance : gpu.instances) {
        rows.push_back(InstanceRow(input, gpu, instance, options.color));
      }
    }
    if (rows.empty()) {
      lines.emplace_back("  no GPU instances");
    } else {
      AddTable(rows, options, lines);
    }
  }
  const bool notes =
      !input.machine.xids.empty() || !input.machine.errors.empty() || !input.status.empty();
  if (notes) lines.emplace_back();
  for (const device::XidEvent& xid : input.machine.xids) {
    std::string line = "Xid " + std::to_string(xid.xid) + " on GPU " + std::to_string(xid.gpu);
    if (xid.gi.has_value()) line += " GI " + std::to_string(*xid.gi);
    lines.push_back(Paint(line, kRed, options.color));
  }
  constexpr std::size_t kErrorsShown = 3;
  for (std::size_t i = 0; i < input.machine.errors.size() && i < kErrorsShown; ++i) {
    lines.push_back(Paint("error: " + input.machine.errors[i], kYellow, options.color));
  }
  if (input.machine.errors.size() > kErrorsShown) {
    lines.push_back("… and " + std::to_string(input.machine.errors.size() - kErrorsShown) +
                    " more errors");
  }
  for (const std::string& line : input.status) lines.push_back(line);
  for (std::string& line : lines) line = Fit(line, options.width);
  return lines;
}

json TopJson(const TopInput& input) {
  json gpus = json::array();
  for (const metrics::GpuFigures& gpu : input.machine.gpus) {
    const device::GpuTelemetry& t = gpu.telemetry;
    json throttle = json::array();
    if (t.throttle_reasons.has_value()) {
      for (const std::string& name : ThrottleNames(*t.throttle_reasons)) throttle.push_back(name);
    }
    json out = {{"index", gpu.index},
                {"uuid", gpu.uuid},
                {"name", gpu.name},
                {"mig", gpu.mig},
                {"lost", gpu.lost},
                {"memory_used_mib", Optional(gpu.memory_used_mib)},
                {"memory_total_mib", Optional(gpu.memory_total_mib)},
                {"temperature_c", Optional(t.temperature_c)},
                {"power_w", Optional(t.power_w)},
                {"power_limit_w", Optional(t.power_limit_w)},
                {"utilization_pct", Optional(t.utilization_pct)},
                {"sm_active_pct",
                 gpu.activity.has_value() ? json(gpu.activity->sm_active_pct) : json(nullptr)},
                {"throttle_reasons", Optional(t.throttle_reasons)},
                {"throttle", throttle}};
    AddDeviceJson(input, DeviceKey(gpu), gpu.processes, gpu.process_list, out);
    json instances = json::array();
    const GpuPlacements* placements = Find(input.placements, gpu.index);
    for (const metrics::InstanceFigures& instance : gpu.instances) {
      json placement = nullptr;
      if (placements != nullptr) {
        for (const device::GpuInstanceInfo& gi : placements->gis) {
          if (gi.id == instance.gi) placement = {{"start", gi.start}, {"size", gi.size}};
        }
      }
      json item = {
          {"gi", instance.gi},
          {"profile", instance.profile},
          {"uuid", instance.uuid.empty() ? json(nullptr) : json(instance.uuid)},
          {"placement", placement},
          {"memory_used_mib", Optional(instance.memory_used_mib)},
          {"memory_total_mib", Optional(instance.memory_total_mib)},
          {"sm_active_pct",
           instance.activity.has_value() ? json(instance.activity->sm_active_pct) : json(nullptr)}};
      AddDeviceJson(input, DeviceKey(gpu, instance), instance.processes, instance.process_list,
                    item);
      instances.push_back(item);
    }
    out["instances"] = instances;
    gpus.push_back(out);
  }
  json xids = json::array();
  for (const device::XidEvent& xid : input.machine.xids) {
    xids.push_back(
        {{"gpu", xid.gpu}, {"xid", xid.xid}, {"gi", Optional(xid.gi)}, {"ci", Optional(xid.ci)}});
  }
  return {{"host", input.machine.host},
          {"gpus", gpus},
          {"xids", xids},
          {"errors", input.machine.errors},
          {"status", input.status}};
}

void IdleTracker::Observe(const metrics::MachineFigures& machine, double now_s) {
  std::map<std::string, Clock> clocks;
  idle_.clear();
  auto observe = [&](const std::string& key, const std::optional<int>& processes) {
    if (!processes.has_value()) return;
    if (*processes > 0) {
      idle_[key] = Idle{0, false};
      return;
    }
    auto it = clocks_.find(key);
    const Clock clock = it != clocks_.end() ? it->second : Clock{now_s, first_};
    clocks[key] = clock;
    idle_[key] = Idle{static_cast<std::int64_t>(std::floor(now_s - clock.since_s)), clock.at_least};
  };
  for (const metrics::GpuFigures& gpu : machine.gpus) {
    if (gpu.lost) continue;
    if (!gpu.mig) {
      observe(DeviceKey(gpu), gpu.processes);
      continue;
    }
    for (const metrics::InstanceFigures& instance : gpu.instances) {
      observe(DeviceKey(gpu, instance), instance.processes);
    }
  }
  clocks_ = std::move(clocks);
  first_ = false;
}

std::map<std::string, std::vector<DeviceLease>> LeasesByDevice(const json& reply) {
  std::map<std::string, std::vector<DeviceLease>> out;
  if (!reply.is_object() || !reply.contains("leases") || !reply["leases"].is_array()) return out;
  for (const json& lease : reply["leases"]) {
    if (!lease.is_object()) continue;
    if (lease.contains("state") && lease["state"] != "active") continue;
    if (!lease.contains("bound") || !lease["bound"].is_array()) continue;
    DeviceLease item;
    auto text = [&lease](const char* field) {
      return lease.contains(field) && lease[field].is_string() ? lease[field].get<std::string>()
                                                               : std::string();
    };
    if (lease.contains("id") && lease["id"].is_number_integer()) {
      item.lease = lease["id"].get<std::int64_t>();
    }
    item.tenant = text("tenant");
    item.class_name = text("class");
    item.purpose = text("purpose");
    std::set<std::string> seen;  // a lease bound twice to one device shows once
    for (const json& device : lease["bound"]) {
      if (!device.is_object() || !device.contains("uuid") || !device["uuid"].is_string()) continue;
      const std::string uuid = device["uuid"].get<std::string>();
      if (uuid.empty() || !seen.insert(uuid).second) continue;
      out[uuid].push_back(item);
    }
  }
  return out;
}

namespace {

// The GPU's units as the overview strip draws them, or "-".
std::string UnitStrip(const TopInput& input, const metrics::GpuFigures& gpu) {
  const GpuPlacements* placements = Find(input.placements, gpu.index);
  if (placements == nullptr || placements->model == nullptr || !placements->model->mig) return "-";
  std::vector<std::string> units(static_cast<std::size_t>(placements->model->mig->placement_units),
                                 "·");
  for (const device::GpuInstanceInfo& gi : placements->gis) {
    bool busy = false;
    for (const metrics::InstanceFigures& instance : gpu.instances) {
      if (instance.gi != gi.id) continue;
      const std::vector<DeviceLease>* leases = Find(input.leases, DeviceKey(gpu, instance));
      busy = instance.processes.value_or(0) > 0 || (leases != nullptr && !leases->empty());
    }
    for (int unit = gi.start; unit < gi.start + gi.size && unit < static_cast<int>(units.size());
         ++unit) {
      units[static_cast<std::size_t>(unit)] = busy ? "█" : "▒";
    }
  }
  std::string text;
  for (const std::string& unit : units) text += unit;
  return text;
}

std::size_t LeasedDevices(const TopInput& input, const metrics::GpuFigures& gpu) {
  std::size_t leased = 0;
  auto count = [&](const std::string& key) {
    const std::vector<DeviceLease>* leases = Find(input.leases, key);
    if (leases != nullptr && !leases->empty()) ++leased;
  };
  if (!gpu.mig) count(DeviceKey(gpu));
  for (const metrics::InstanceFigures& instance : gpu.instances) count(DeviceKey(gpu, instance));
  return leased;
}

// The driver's name without its "NVIDIA " prefix, which every GPU here shares.
std::string ShortName(const std::string& name) {
  constexpr std::string_view kPrefix = "NVIDIA ";
  return name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
}

std::string OverviewLine(const TopInput& input, const metrics::GpuFigures& gpu, bool color) {
  std::string line =
      Paint("GPU " + std::to_string(gpu.index), kBold, color) + " " + ShortName(gpu.name);
  if (gpu.lost) return line + " " + Paint("LOST", kRed, color);
  line += gpu.mig ? " MIG " + UnitStrip(input, gpu) + " " + std::to_string(gpu.instances.size()) +
                        " inst, "
                  : " whole, ";
  line += std::to_string(LeasedDevices(input, gpu)) + " leased, ";
  const std::string used = gpu.memory_used_mib.has_value() ? Gib(*gpu.memory_used_mib) : "-";
  const std::string total = gpu.memory_total_mib.has_value() ? Gib(*gpu.memory_total_mib) : "-";
  line += used + "/" + total + " GiB, sm " + Activity(gpu.activity) + ", " +
          OrDash(gpu.telemetry.temperature_c, "C");
  return line;
}

// The longest idle time of the GPU's devices, or -1 when none is known.
std::int64_t LongestIdle(const TopInput& input, const metrics::GpuFigures& gpu) {
  std::int64_t longest = -1;
  auto take = [&](const std::string& key) {
    if (const Idle* idle = Find(input.idle, key); idle != nullptr) {
      longest = std::max(longest, idle->seconds);
    }
  };
  take(DeviceKey(gpu));
  for (const metrics::InstanceFigures& instance : gpu.instances) take(DeviceKey(gpu, instance));
  return longest;
}

// The figure a GPU is sorted by, larger first; nullopt sorts last.
std::optional<double> SortFigure(TopSort sort, const TopInput& input,
                                 const metrics::GpuFigures& gpu) {
  switch (sort) {
    case TopSort::kIndex:
      return -static_cast<double>(gpu.index);
    case TopSort::kMemory:
      if (!gpu.memory_used_mib.has_value()) return std::nullopt;
      return static_cast<double>(*gpu.memory_used_mib);
    case TopSort::kActivity:
      if (!gpu.activity.has_value()) return std::nullopt;
      return gpu.activity->sm_active_pct;
    case TopSort::kIdle: {
      const std::int64_t idle = LongestIdle(input, gpu);
      if (idle < 0) return std::nullopt;
      return static_cast<double>(idle);
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> RenderOverview(const TopInput& input, const TopOptions& options) {
  std::vector<std::string> lines;
  for (const metrics::GpuFigures& gpu : input.machine.gpus) {
    lines.push_back(Fit(OverviewLine(input, gpu, options.color), options.width));
  }
  return lines;
}

const char* TopSortName(TopSort sort) {
  switch (sort) {
    case TopSort::kIndex:
      return "index";
    case TopSort::kMemory:
      return "memory";
    case TopSort::kActivity:
      return "sm";
    case TopSort::kIdle:
      return "idle";
  }
  return "index";
}

void SortGpus(TopSort sort, TopInput& input) {
  std::vector<metrics::GpuFigures>& gpus = input.machine.gpus;
  std::vector<std::pair<std::optional<double>, std::size_t>> keys;
  for (std::size_t i = 0; i < gpus.size(); ++i)
    keys.emplace_back(SortFigure(sort, input, gpus[i]), i);
  std::stable_sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) {
    if (a.first.has_value() != b.first.has_value()) return a.first.has_value();
    if (a.first.has_value() && *a.first != *b.first) return *a.first > *b.first;
    return gpus[a.second].index < gpus[b.second].index;
  });
  std::vector<metrics::GpuFigures> sorted;
  sorted.reserve(gpus.size());
  for (const auto& key : keys) sorted.push_back(std::move(gpus[key.second]));
  gpus = std::move(sorted);
}

}  // namespace gpuslice::cli
