// Helpers shared by the allocation service's source files (service.cc, service_*.cc).
// Internal: not part of the library's interface.
#pragma once

#include <cctype>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/hw/catalog.h"
#include "nlohmann/json.hpp"

namespace gpuslice::alloc::internal {

using nlohmann::json;

inline constexpr size_t kMaxTextBytes = 1024;  // free-text fields: purpose, names, messages
inline constexpr std::int64_t kMaxTtlSeconds = 30LL * 24 * 3600;  // the longest lease

inline absl::Status NeedAdminOrAgent(const Caller& caller) {
  if (caller.role != Role::kAdmin && caller.role != Role::kAgent) {
    return absl::PermissionDeniedError("this operation needs the agent or admin role");
  }
  return absl::OkStatus();
}

// Admins, and an agent for the machine its token is bound to.
inline absl::Status NeedMachine(const Caller& caller, const std::string& host) {
  if (caller.role == Role::kAdmin) return absl::OkStatus();
  if (caller.role != Role::kAgent) {
    return absl::PermissionDeniedError("this operation needs the agent or admin role");
  }
  if (caller.machine.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the agent token of '", caller.user,
        "' is bound to no machine (it was made before agent tokens were bound); make a new one "
        "with `gpuslice admin user NAME --agent --machine HOST`"));
  }
  if (caller.machine != host) {
    return absl::PermissionDeniedError(absl::StrCat("the agent token of '", caller.user,
                                                    "' belongs to machine '", caller.machine,
                                                    "', not '", host, "'"));
  }
  return absl::OkStatus();
}

// The host part of a placement node's name ("<host>/<model>[-mig]").
inline std::string HostOf(const std::string& node) { return node.substr(0, node.find('/')); }

inline json ReportJson(const NodeReport& report) {
  json gpus = json::array();
  for (const NodeReport::Gpu& g : report.gpus) {
    gpus.push_back({{"index", g.index}, {"uuid", g.uuid}, {"model", g.model}, {"mig", g.mig}});
  }
  return {{"cpu_milli", report.cpu_milli}, {"memory_mib", report.memory_mib}, {"gpus", gpus}};
}

// An integer field of stored JSON: `fallback` when absent or null, the value when it is an
// integer within T's range, else std::out_of_range naming the field (Service::Load answers
// DataLoss). nlohmann's value()/get() would cast a real such as 1e300 past the range: undefined.
template <typename T>
T StoredInt(const json& j, const char* key, T fallback) {
  if (!j.is_object()) throw std::out_of_range("not a JSON object");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->is_number_unsigned()) {
    const auto value = it->template get<std::uint64_t>();
    if (value <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
      return static_cast<T>(value);
    }
  } else if (it->is_number_integer()) {
    const auto value = it->template get<std::int64_t>();
    if (value >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
        value <= static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
      return static_cast<T>(value);
    }
  }
  throw std::out_of_range(absl::StrCat(key, ": not an integer within range"));
}

inline NodeReport ReportFromJson(const std::string& host, const json& j) {
  NodeReport report;
  report.host = host;
  report.cpu_milli = StoredInt(j, "cpu_milli", std::int64_t{0});
  report.memory_mib = StoredInt(j, "memory_mib", std::int64_t{0});
  for (const json& g : j.value("gpus", json::array())) {
    report.gpus.push_back(NodeReport::Gpu{StoredInt(g, "index", 0), g.value("uuid", ""),
                                          g.value("model", ""), g.value("mig", false)});
  }
  return report;
}

// The report's GPUs as the device layer describes them, models from the built-in catalog.
inline absl::StatusOr<std::vector<device::GpuInfo>> GpusOf(const NodeReport& report) {
  std::vector<device::GpuInfo> gpus;
  for (const NodeReport::Gpu& g : report.gpus) {
    device::GpuInfo info;
    info.index = g.index;
    info.uuid = g.uuid;
    info.model = hw::Catalog::Builtin().Find(g.model);
    if (info.model == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU ", g.index, " of ", report.host, ": unknown model '", g.model, "'"));
    }
    info.name = info.model->id;
    info.memory_total_mib = info.model->memory_mib;
    info.mig_capable = info.model->mig_capable();
    info.mig_current =
        g.mig && info.mig_capable ? device::MigMode::kEnabled : device::MigMode::kDisabled;
    info.mig_pending = info.mig_current;
    gpus.push_back(info);
  }
  return gpus;
}

inline bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

// Reads the users table (service_users.cc).
absl::Status LoadUsers(store::Database& db, std::map<std::string, UserInfo>* users,
                       std::map<std::string, std::string>* user_by_token_hash);

// A class as the classes table stores it, and back (service_tenants.cc).
json ClassJson(const ClassSpec& spec);
ClassSpec ClassFromJson(const std::string& name, const json& j);
// small/medium/large as 1-, 2- and 4-slice MIG instances on every MIG model that has them, full
// as a whole GPU: a new store's classes.
std::vector<ClassSpec> DefaultClasses();

inline absl::Status NeedAdmin(const Caller& caller) {
  if (caller.role != Role::kAdmin) {
    return absl::PermissionDeniedError("this operation needs the admin role");
  }
  return absl::OkStatus();
}

}  // namespace gpuslice::alloc::internal

namespace gpuslice::alloc {

// Defined here so that every source file of the service can stage changes.
template <typename Change>
std::invoke_result_t<Change&> Service::Changing(Change&& change) {
  GroupCommit::Ticket batch;
  auto result = [&] {
    util::MutexLock state(mutex_);
    auto decided = change();
    // A change that failed may have staged statements (an audit): they are committed with the
    // next batch, as they always were, but it does not wait for them.
    batch = Flush();
    return decided;
  }();  // mutex_ released: the commit is awaited without it
  if (!result.ok()) return result;
  if (absl::Status status = commits_.Await(batch); !status.ok()) return status;
  return result;
}

}  // namespace gpuslice::alloc
