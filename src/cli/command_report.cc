// `gpuslice report usage`: the usage history's report from the allocation service
// (GET /v1/usage): peak and typical memory and SM activity per workload, tenant or class, which
// slices are oversized, too small or idle, and (--plan-out) the workloads file that
// `gpuslice plan -w` takes to re-size them. Talks to the server like the other client commands.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client.h"
#include "common.h"
#include "gpuslice/util/duration.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

constexpr std::int64_t kMaxSinceS = 90LL * 86400;  // the history keeps 90 days

struct ReportOptions {
  ClientOptions c;
  std::string since = "7d";
  std::string by = "workload";
  std::string plan_out;
};

std::string Gib(double mib) { return absl::StrFormat("%.1f", mib / 1024.0); }

std::string Pct(const json& row, const char* field) {
  return row.contains(field) ? absl::StrFormat("%.0f%%", row[field].get<double>()) : "-";
}

std::string Slice(const json& row) {
  const std::string model = row.value("gpu_model", "");
  if (model.empty()) return "-";
  const std::string profile = row.value("profile", "");
  return absl::StrCat(model, " ",
                      row.value("share", false) ? "share"
                      : profile.empty()         ? "whole"
                                                : profile);
}

std::string Verdict(const json& row, bool workload) {
  const int oversized = row.value("oversized", 0);
  const int too_small = row.value("too_small", 0);
  const int idle = row.value("idle", 0);
  const std::string suggested = row.value("suggested_profile", "");
  if (workload) {
    if (idle > 0) return "idle";
    if (too_small > 0) return suggested.empty() ? "too small" : "too small -> " + suggested;
    if (oversized > 0) return "oversized -> " + suggested;
    return "ok";
  }
  std::vector<std::string> parts;
  if (oversized > 0) parts.push_back(absl::StrCat(oversized, " oversized"));
  if (too_small > 0) parts.push_back(absl::StrCat(too_small, " too small"));
  if (idle > 0) parts.push_back(absl::StrCat(idle, " idle"));
  return absl::StrCat(row.value("workloads", 0), " workload(s)",
                      parts.empty() ? "" : ": " + absl::StrJoin(parts, ", "));
}

void PrintTable(const json& body, const std::string& since_text) {
  const std::string by = body.value("by", "workload");
  const bool workload = by == "workload";
  const json& rows = body["rows"];
  if (rows.empty()) {
    std::cout << "No usage recorded in the last " << since_text
              << " (agents and serve record it for leases with bound devices).\n";
    return;
  }
  std::cout << "Usage of the last " << since_text << ", by " << by
            << " (memory in GiB; typical = the mean of all samples):\n";
  std::string header = absl::StrFormat("%-24s %-10s",
                                       by == "workload" ? "WORKLOAD"
                                       : by == "tenant" ? "TENANT"
                                                        : "CLASS",
                                       workload ? "TENANT" : "");
  absl::StrAppendFormat(&header, " %-20s %15s %7s %11s %6s  %s", "SLICE", "PEAK/SLICE", "TYPICAL",
                        "SM PEAK/TYP", "LEASES", "VERDICT");
  std::cout << header << "\n";
  for (const json& row : rows) {
    const std::int64_t slice = row.value("slice_mib", std::int64_t{0});
    const double peak = static_cast<double>(row.value("memory_peak_mib", std::int64_t{0}));
    const std::string peak_text =
        slice > 0 ? absl::StrCat(Gib(peak), "/", Gib(static_cast<double>(slice)), " ",
                                 absl::StrFormat("%.0f%%", row.value("peak_fraction", 0.0) * 100))
                  : Gib(peak);
    std::cout << absl::StrFormat("%-24s %-10s %-20s %15s %7s %11s %6d  %s", row.value("key", ""),
                                 workload ? row.value("tenant", "") : "", Slice(row), peak_text,
                                 Gib(row.value("memory_typical_mib", 0.0)),
                                 absl::StrCat(Pct(row, "activity_peak_pct"), "/",
                                              Pct(row, "activity_typical_pct")),
                                 row["leases"].size(), Verdict(row, workload))
              << "\n";
  }
  if (workload) {
    std::cout << "\n";
    for (const json& row : rows) {
      std::cout << "  " << row.value("key", "") << ": " << row.value("explanation", "") << "\n";
    }
  }
  std::cout << "\nTo re-size: gpuslice report usage --since " << since_text
            << " --plan-out workloads.yaml, then gpuslice plan -w workloads.yaml -f fleet.yaml\n";
}

// Writes `text` to `path` through a temporary file and a rename.
bool WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      PrintError(absl::StrCat("--plan-out: cannot write ", temp));
      std::remove(temp.c_str());
      return false;
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    PrintError(absl::StrCat("--plan-out: cannot rename ", temp, " to ", path));
    std::remove(temp.c_str());
    return false;
  }
  return true;
}

int RunReportUsage(const ReportOptions& o) {
  const absl::StatusOr<std::int64_t> window = util::ParseDuration(o.since, kMaxSinceS);
  if (!window.ok()) {
    PrintError(absl::StrCat("--since: ", window.status().message(), " (the history keeps 90d)"));
    return kExitBadInput;
  }
  const std::int64_t since = *window;
  if (o.by != "workload" && o.by != "tenant" && o.by != "class") {
    PrintError(absl::StrCat("--by '", o.by, "': workload, tenant or class"));
    return kExitBadInput;
  }
  Reply reply;
  if (int rc =
          Call(o.c, "GET", absl::StrCat("/v1/usage?since=", since, "&by=", o.by), nullptr, &reply);
      rc != 0) {
    return rc;
  }
  if (!reply.body.is_object() || !reply.body.contains("rows")) {
    PrintError("the server's answer has no usage rows (is it an older gpuslice serve?)");
    return 1;
  }
  if (!o.plan_out.empty()) {
    if (!WriteFileAtomically(o.plan_out, reply.body.value("plan_yaml", ""))) return 1;
    std::cerr << "wrote the workloads for `gpuslice plan -w " << o.plan_out << "` to " << o.plan_out
              << "\n";
  }
  if (o.c.json_output) {
    PrintJson(reply.body);
  } else {
    PrintTable(reply.body, o.since);
  }
  return kExitOk;
}

}  // namespace

void AddReportCommand(CLI::App& app, const GlobalOptions&, Action* action) {
  CLI::App* report = app.add_subcommand("report", "Reports from the allocation service");
  report->require_subcommand(1);
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = report->add_subcommand(
      "usage",
      "Peak and typical memory and SM activity per workload, tenant or class from the usage "
      "history; which slices are oversized, too small or idle; the workloads file to re-size "
      "them with gpuslice plan");
  AddConnection(cmd, o->c);
  cmd->add_option("--since", o->since, "How far back: 7d, 24h, 30m (up to 90d)")
      ->capture_default_str();
  cmd->add_option("--by", o->by, "Group by workload (tenant and purpose), tenant or class")
      ->capture_default_str();
  cmd->add_option("--plan-out", o->plan_out,
                  "Write the workloads (peak memory as measured) as a gpuslice plan -w file");
  cmd->callback([o, action] { *action = [o] { return RunReportUsage(*o); }; });
}

}  // namespace gpuslice::cli
