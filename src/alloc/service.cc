#include "gpuslice/alloc/service.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/alloc/wire.h"
#include "gpuslice/device/uuid.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/util/clock.h"
#include "gpuslice/util/utf8.h"
#include "lease_rows.h"
#include "nlohmann/json.hpp"
#include "service_internal.h"

namespace gpuslice::alloc {
using namespace internal;  // NOLINT(google-build-using-namespace): this library's own helpers
namespace {

using store::Value;

}  // namespace

std::map<std::string, std::string> LeaseEnvironment(const Lease& lease) {
  std::map<std::string, std::string> env;
  if (lease.bound.empty()) return env;
  std::vector<std::string> uuids;
  for (const BoundDevice& d : lease.bound) {
    // Only what NVML could have named reaches a shell or docker (stored rows included).
    if (!device::IsDeviceUuid(d.uuid)) return {};
    uuids.push_back(d.uuid);
  }
  const std::string visible = absl::StrJoin(uuids, ",");
  env["CUDA_VISIBLE_DEVICES"] = visible;
  env["NVIDIA_VISIBLE_DEVICES"] = visible;
  env["GPUSLICE_LEASE"] = absl::StrCat(lease.id);
  const BoundDevice& first = lease.bound.front();
  if (first.gi < 0 && (first.share_milli > 0 || first.vram_mib > 0)) {
    if (first.vram_mib > 0) env["GPUSLICE_VRAM_LIMIT_MIB"] = absl::StrCat(first.vram_mib);
    if (first.share_milli > 0) {
      env["GPUSLICE_COMPUTE_SHARE_MILLI"] = absl::StrCat(first.share_milli);
    }
    // Every process of the lease counts against one accounting (gpuslice/shim/slice_region.h).
    env["GPUSLICE_SLICE"] = absl::StrCat("lease-", lease.id);
  }
  return env;
}

std::vector<std::string> DockerArgs(const Lease& lease) {
  const std::map<std::string, std::string> env = LeaseEnvironment(lease);
  if (env.empty()) return {};
  std::vector<std::string> args = {
      "--gpus", absl::StrCat("\"device=", env.at("NVIDIA_VISIBLE_DEVICES"), "\"")};
  for (const auto& [name, value] : env) {
    if (name == "CUDA_VISIBLE_DEVICES")
      continue;  // inside the container the devices are renumbered
    args.push_back("-e");
    args.push_back(absl::StrCat(name, "=", value));
  }
  return args;
}

Service::Service(std::unique_ptr<store::Database> db, place::Cluster inventory,
                 place::Engine engine, ServiceOptions options)
    : db_(std::move(db)),
      inventory_(std::move(inventory)),
      engine_(std::move(engine)),
      options_(std::move(options)),
      commits_([this](const GroupCommit::Statements& s) { return CommitBatch(s); },
               [this](const std::function<void()>& drop) { return Recover(drop); }) {}
Service::~Service() = default;

absl::StatusOr<std::unique_ptr<Service>> Service::Open(std::unique_ptr<store::Database> db,
                                                       place::Cluster inventory,
                                                       ServiceOptions options) {
  if (!options.clock) options.clock = util::EpochNow;
  absl::StatusOr<int> version = store::CurrentVersion(*db);
  if (!version.ok()) return version.status();
  if (absl::Status status = store::Migrate(*db); !status.ok()) return status;
  // The default classes go into a new store only, so that deleting them sticks.
  if (*version != 0) options.seed_default_classes = false;
  absl::StatusOr<std::unique_ptr<place::Policy>> policy =
      place::MakePolicy(options.policy, place::PolicyOptions{});
  if (!policy.ok()) return policy.status();
  place::Engine engine(inventory, *std::move(policy));
  std::unique_ptr<Service> service(
      new Service(std::move(db), std::move(inventory), std::move(engine), std::move(options)));
  {
    util::MutexLock state(service->mutex_);
    util::MutexLock connection(service->db_mutex_);
    if (absl::Status status = service->Load(); !status.ok()) return status;
  }
  if (absl::Status status = service->Sync(); !status.ok()) return status;
  return service;
}

void Service::Stage(std::string sql, std::vector<Value> params) {
  staged_.push_back(GroupCommit::Statement{std::move(sql), std::move(params)});
}

GroupCommit::Ticket Service::Flush() { return commits_.Stage(std::exchange(staged_, {})); }

absl::Status Service::Sync() {
  GroupCommit::Ticket batch;
  {
    util::MutexLock state(mutex_);
    batch = Flush();
  }
  return commits_.Await(batch);
}

absl::Status Service::CommitBatch(const GroupCommit::Statements& statements) {
  util::MutexLock connection(db_mutex_);
  store::Transaction txn(*db_);
  absl::Status status = txn.status();
  for (const GroupCommit::Statement& statement : statements) {
    if (!status.ok()) break;
    status = db_->Exec(statement.sql, statement.params);
  }
  if (status.ok()) status = txn.Commit();
  return status;
}

absl::Status Service::Recover(const std::function<void()>& drop_staged) {
  // Memory holds the failed batch's changes and the staged ones decided on top of them: drop
  // both and read the store again (what the reload stages goes into the next batch).
  util::MutexLock state(mutex_);
  drop_staged();
  absl::Status reloaded = Reload();
  (void)Flush();
  return reloaded;
}

void Service::Audited(const Caller& caller, const std::string& tenant, const std::string& action,
                      const std::string& subject, const std::string& purpose,
                      const std::string& detail) {
  Stage(
      "INSERT INTO audit (id, at, actor, tenant, action, subject, purpose, detail) VALUES (?, ?, "
      "?, ?, ?, ?, ?, ?)",
      {next_audit_, Now(), caller.user, tenant, action, subject, purpose, detail});
  ++next_audit_;
}

place::Cluster Service::Occupancy() {
  util::MutexLock lock(mutex_);
  return engine_.cluster();
}

absl::StatusOr<std::vector<AuditEvent>> Service::Audit(const Caller& caller,
                                                       const AuditQuery& query) {
  std::string tenant = query.tenant;
  if (caller.role == Role::kAgent) {
    return absl::PermissionDeniedError("agents do not read the audit");
  }
  if (caller.role != Role::kAdmin) {
    if (!tenant.empty() && tenant != caller.tenant) {
      return absl::PermissionDeniedError("a tenant reads only its own audit");
    }
    tenant = caller.tenant;
  }
  if (query.limit <= 0 || query.limit > 100000) {
    return absl::InvalidArgumentError("limit: must be within 1..100000");
  }
  if (absl::Status s = Sync(); !s.ok()) return s;
  util::MutexLock connection(db_mutex_);
  const Value with_tenant[] = {tenant, query.since, std::int64_t{query.limit}};
  const Value without[] = {query.since, std::int64_t{query.limit}};
  absl::StatusOr<store::Result> rows =
      tenant.empty()
          ? db_->Query(
                "SELECT id, at, actor, tenant, action, subject, purpose, detail FROM audit "
                "WHERE at >= ? ORDER BY id DESC LIMIT ?",
                without)
          : db_->Query(
                "SELECT id, at, actor, tenant, action, subject, purpose, detail FROM audit "
                "WHERE tenant = ? AND at >= ? ORDER BY id DESC LIMIT ?",
                with_tenant);
  if (!rows.ok()) return rows.status();
  std::vector<AuditEvent> out;
  for (const store::Row& row : rows->rows) {
    out.push_back(AuditEvent{store::AsInt(row[0]), store::AsInt(row[1]), store::AsText(row[2]),
                             store::AsText(row[3]), store::AsText(row[4]), store::AsText(row[5]),
                             store::AsText(row[6]), store::AsText(row[7])});
  }
  std::reverse(out.begin(), out.end());  // the newest `limit` events, oldest first
  return out;
}

}  // namespace gpuslice::alloc
