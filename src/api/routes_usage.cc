// Usage: agents report each lease's idleness and usage figures; admins and tenants read the
// history's report (gpuslice/api/server.h).
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/replies.h"
#include "api/routes.h"
#include "gpuslice/alloc/usage.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {
namespace {

using nlohmann::json;

json UsageRowJson(const alloc::UsageRow& row) {
  json out = {{"key", row.key},
              {"tenant", row.tenant},
              {"class", row.class_name},
              {"purpose", row.purpose},
              {"leases", row.leases},
              {"samples", row.samples},
              {"first", row.first},
              {"last", row.last},
              {"memory_peak_mib", row.memory_peak_mib},
              {"memory_typical_mib", row.memory_typical_mib},
              {"processes_peak", row.processes_peak},
              {"concurrent_peak", row.concurrent_peak},
              {"gpu_model", row.gpu_model},
              {"profile", row.profile},
              {"share", row.share},
              {"slice_mib", row.slice_mib},
              {"peak_fraction", row.peak_fraction},
              {"workloads", row.workloads},
              {"oversized", row.oversized},
              {"too_small", row.too_small},
              {"idle", row.idle},
              {"suggested_profile", row.suggested_profile},
              {"kind", row.kind},
              {"explanation", row.explanation}};
  // Activity is absent when the devices never gave it (never a made-up zero).
  if (row.activity_peak_pct.has_value()) out["activity_peak_pct"] = *row.activity_peak_pct;
  if (row.activity_typical_pct.has_value()) {
    out["activity_typical_pct"] = *row.activity_typical_pct;
  }
  return out;
}

// What a report says of its leases: idle seconds and usage figures, by lease id.
struct UsageBody {
  std::int64_t valid_s = 0;
  std::map<std::int64_t, std::int64_t> idle;
  std::map<std::int64_t, alloc::UsageFigures> figures;
};

// One lease's entry, `{"idle_s": n}` and/or its usage figures, into `out`.
absl::Status ReadLeaseUsage(const std::string& key, std::int64_t id, const json& usage,
                            UsageBody* out) {
  if (absl::Status st = Only(
          usage, {"idle_s", "memory_used_mib", "memory_total_mib", "sm_active_pct", "processes"},
          "leases[]");
      !st.ok()) {
    return st;
  }
  const bool has_figures = usage.contains("memory_used_mib");
  if (!has_figures && (usage.contains("memory_total_mib") || usage.contains("sm_active_pct") ||
                       usage.contains("processes"))) {
    return absl::InvalidArgumentError(
        absl::StrCat("leases.", key, ": memory_used_mib is required with the other usage figures"));
  }
  if (usage.contains("idle_s") || !has_figures) {
    std::int64_t seconds = -1;
    if (absl::Status st = Field(usage, "idle_s", &seconds); !st.ok()) return st;
    out->idle[id] = seconds;
  }
  if (!has_figures) return absl::OkStatus();
  alloc::UsageFigures f;
  double activity = 0;
  for (absl::Status st :
       {Field(usage, "memory_used_mib", &f.memory_used_mib),
        Field(usage, "memory_total_mib", &f.memory_total_mib),
        Field(usage, "sm_active_pct", &activity), Field(usage, "processes", &f.processes)}) {
    if (!st.ok()) return st;
  }
  if (usage.contains("sm_active_pct") && !usage["sm_active_pct"].is_null()) {
    f.sm_active_pct = activity;
  }
  if (absl::Status st = alloc::ValidateUsageFigures(f); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("leases.", key, ".", st.message()));
  }
  out->figures[id] = f;
  return absl::OkStatus();
}

absl::StatusOr<UsageBody> ReadUsageBody(const http::Request& req) {
  absl::StatusOr<json> body = Body(req, {"leases", "valid_s"});
  if (!body.ok()) return body.status();
  UsageBody out;
  if (absl::Status st = Field(*body, "valid_s", &out.valid_s); !st.ok()) return st;
  auto leases = body->find("leases");
  if (leases == body->end() || !leases->is_object()) {
    return absl::InvalidArgumentError(
        "leases: an object of lease id to {\"idle_s\": seconds, \"memory_used_mib\": MiB, ...}");
  }
  for (const auto& [key, usage] : leases->items()) {
    std::int64_t id = 0;
    if (!absl::SimpleAtoi(key, &id) || id <= 0 || !usage.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("leases.", key, ": a lease id mapping to {\"idle_s\": n}"));
    }
    if (absl::Status st = ReadLeaseUsage(key, id, usage, &out); !st.ok()) return st;
  }
  return out;
}

// Each lease: idle_s (the idle reclaim's figure, valid for valid_s) and/or its usage figures
// (memory_used_mib with optional memory_total_mib, sm_active_pct, processes) for the history.
void ReportUsage(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                 http::Response& res) {
  absl::StatusOr<UsageBody> body = ReadUsageBody(req);
  if (!body.ok()) return Fail(res, body.status());
  std::set<std::int64_t> ignored;
  if (!body->idle.empty() || body->figures.empty()) {
    absl::StatusOr<std::vector<std::int64_t>> not_here =
        service.ReportUsage(caller, req.matches[1].str(), body->idle, body->valid_s);
    if (!not_here.ok()) return Fail(res, not_here.status());
    ignored.insert(not_here->begin(), not_here->end());
  }
  if (!body->figures.empty()) {
    absl::StatusOr<std::vector<std::int64_t>> not_here =
        service.RecordUsage(caller, req.matches[1].str(), body->figures);
    if (!not_here.ok()) return Fail(res, not_here.status());
    ignored.insert(not_here->begin(), not_here->end());
  }
  Reply(res, 200, {{"ignored", ignored}});
}

// The usage history's report (admin: every tenant; a tenant's user: its own).
void UsageReport(alloc::Service& service, const alloc::Caller& caller, const http::Request& req,
                 http::Response& res) {
  std::int64_t since_s = 7 * 86400;
  if (req.has_param("since") && !absl::SimpleAtoi(req.get_param_value("since"), &since_s)) {
    return Fail(res, absl::InvalidArgumentError("since: seconds (e.g. 604800 for 7 days)"));
  }
  alloc::UsageGroupBy by = alloc::UsageGroupBy::kWorkload;
  if (req.has_param("by")) {
    std::optional<alloc::UsageGroupBy> parsed = alloc::ParseUsageGroupBy(req.get_param_value("by"));
    if (!parsed.has_value()) {
      return Fail(res, absl::InvalidArgumentError("by: workload, tenant or class"));
    }
    by = *parsed;
  }
  absl::StatusOr<alloc::UsageReport> report = service.UsageReport(caller, since_s, by);
  if (!report.ok()) return Fail(res, report.status());
  json rows = json::array();
  for (const alloc::UsageRow& row : report->rows) rows.push_back(UsageRowJson(row));
  Reply(res, 200,
        {{"since", report->since},
         {"until", report->until},
         {"by", std::string(alloc::ToString(report->by))},
         {"rows", rows},
         {"plan_yaml", alloc::PlanWorkloadsYaml(*report)}});
}

}  // namespace

std::vector<Route> UsageRoutes(alloc::Service& service) {
  return {
      // An agent only for its own machine.
      {"POST", absl::StrCat("/v1/nodes/", kNamePattern, "/usage"), AdminOrAgent(),
       On(service, ReportUsage)},
      {"GET", "/v1/usage", AdminOrTenant("agents do not read usage reports"),
       On(service, UsageReport)},
  };
}

}  // namespace gpuslice::api
