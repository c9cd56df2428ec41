#include "gpuslice/alloc/service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/alloc/wire.h"
#include "gpuslice/device/uuid.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/util/utf8.h"
#include "lease_rows.h"
#include "nlohmann/json.hpp"
#include "service_internal.h"

namespace gpuslice::alloc {
using namespace internal;  // NOLINT(google-build-using-namespace): this library's own helpers
namespace {

using nlohmann::json;
using store::Value;

std::int64_t SystemNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json ClassJson(const ClassSpec& spec) {
  return {{"mig", spec.mig},
          {"share_milli", spec.share_milli},
          {"vram_mib", spec.vram_mib},
          {"full", spec.full},
          {"max_lease_s", spec.max_lease_s},
          {"idle_timeout_s", spec.idle_timeout_s}};
}

ClassSpec ClassFromJson(const std::string& name, const json& j) {
  ClassSpec spec;
  spec.name = name;
  spec.mig = j.value("mig", std::map<std::string, std::string>{});
  spec.share_milli = StoredInt(j, "share_milli", 0);
  spec.vram_mib = StoredInt(j, "vram_mib", std::int64_t{0});
  spec.full = j.value("full", false);
  spec.max_lease_s = StoredInt(j, "max_lease_s", std::int64_t{8 * 3600});
  spec.idle_timeout_s = StoredInt(j, "idle_timeout_s", std::int64_t{0});
  return spec;
}

// The default classes: small/medium/large as 1-, 2- and 4-slice MIG instances on every MIG model
// that has them, full as a whole GPU.
std::vector<ClassSpec> DefaultClasses() {
  std::vector<ClassSpec> classes;
  const std::pair<const char*, const char*> sizes[] = {
      {"small", "1g"}, {"medium", "2g"}, {"large", "4g"}};
  for (const auto& [name, profile] : sizes) {
    ClassSpec spec;
    spec.name = name;
    for (const hw::GpuModel& model : hw::Catalog::Builtin().models()) {
      if (!model.mig_capable()) continue;
      const geometry::Shape shape(model);
      place::Request probe;
      probe.num_gpu = 1;
      probe.mig_profile = profile;
      const int p = place::Cluster::MigProfileFor(shape, probe);
      if (p >= 0) spec.mig[model.id] = shape.profile(p).name;
    }
    if (spec.name == std::string("small")) spec.idle_timeout_s = 3600;
    classes.push_back(spec);
  }
  ClassSpec full;
  full.name = "full";
  full.full = true;
  classes.push_back(full);
  return classes;
}

absl::Status ValidateClass(const ClassSpec& spec) {
  if (!ValidName(spec.name)) {
    return absl::InvalidArgumentError(
        "class name: 1-64 characters of letters, digits, '-', '_' or '.'");
  }
  const int kinds = (spec.mig.empty() ? 0 : 1) +
                    (spec.share_milli > 0 || spec.vram_mib > 0 ? 1 : 0) + (spec.full ? 1 : 0);
  if (kinds != 1) {
    return absl::InvalidArgumentError(
        "class: give exactly one of mig (a profile per GPU model), share_milli/vram_mib, or "
        "full");
  }
  if (spec.share_milli < 0 || spec.share_milli > 1000) {
    return absl::InvalidArgumentError("share_milli: must be within 0..1000");
  }
  if (spec.vram_mib < 0 || spec.vram_mib > (1LL << 24)) {
    return absl::InvalidArgumentError("vram_mib: must be within 0..16777216");
  }
  if (spec.max_lease_s <= 0 || spec.max_lease_s > kMaxTtlSeconds) {
    return absl::InvalidArgumentError("max_lease_s: must be within 1..2592000 (30 days)");
  }
  if (spec.idle_timeout_s < 0 || spec.idle_timeout_s > kMaxTtlSeconds) {
    return absl::InvalidArgumentError("idle_timeout_s: must be within 0..2592000");
  }
  for (const auto& [model, profile] : spec.mig) {
    const hw::GpuModel* found = hw::Catalog::Builtin().Find(model);
    if (found == nullptr || !found->mig_capable()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mig: '", model, "' is not a MIG-capable GPU model"));
    }
    const geometry::Shape shape(*found);
    place::Request probe;
    probe.num_gpu = 1;
    probe.mig_profile = profile;
    if (place::Cluster::MigProfileFor(shape, probe) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mig: ", model, " has no profile '", profile, "'"));
    }
  }
  return absl::OkStatus();
}

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
    : pending_(std::make_shared<Batch>()),
      db_(std::move(db)),
      inventory_(std::move(inventory)),
      engine_(std::move(engine)),
      options_(std::move(options)) {}
Service::~Service() = default;

absl::StatusOr<std::unique_ptr<Service>> Service::Open(std::unique_ptr<store::Database> db,
                                                       place::Cluster inventory,
                                                       ServiceOptions options) {
  if (!options.clock) options.clock = SystemNow;
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
    std::lock_guard<std::mutex> state(service->mutex_);
    std::lock_guard<std::mutex> connection(service->db_mutex_);
    if (absl::Status status = service->Load(); !status.ok()) return status;
  }
  if (absl::Status status = service->Sync(); !status.ok()) return status;
  return service;
}

void Service::Stage(std::string sql, std::vector<Value> params) {
  pending_->statements.push_back(Batch::Statement{std::move(sql), std::move(params)});
}

absl::Status Service::Sync() {
  std::shared_ptr<Batch> batch;
  {
    std::lock_guard<std::mutex> state(mutex_);
    batch = pending_;
  }
  return Await(batch);
}

absl::Status Service::Await(const std::shared_ptr<Batch>& batch) {
  std::unique_lock<std::mutex> commit(commit_mutex_);
  while (!batch->done) {
    if (committing_) {
      committed_.wait(commit);
      continue;
    }
    committing_ = true;
    commit.unlock();
    // Take everything staged so far; calls that stage from now on go into the next batch.
    std::shared_ptr<Batch> taken;
    {
      std::lock_guard<std::mutex> state(mutex_);
      taken = std::exchange(pending_, std::make_shared<Batch>());
    }
    absl::Status status;
    if (!taken->statements.empty()) {
      std::lock_guard<std::mutex> connection(db_mutex_);
      store::Transaction txn(*db_);
      status = txn.status();
      for (const Batch::Statement& statement : taken->statements) {
        if (!status.ok()) break;
        status = db_->Exec(statement.sql, statement.params);
      }
      if (status.ok()) status = txn.Commit();
    }
    std::shared_ptr<Batch> discarded;
    if (!status.ok()) {
      // Memory holds the failed batch's changes and the staged ones decided on top of them: drop
      // both and read the store again.
      std::lock_guard<std::mutex> state(mutex_);
      discarded = std::exchange(pending_, std::make_shared<Batch>());
      if (absl::Status reloaded = Reload(); !reloaded.ok()) {
        status = absl::InternalError(
            absl::StrCat(status.message(), "; reloading the state failed too: ", reloaded.message(),
                         " (restart the service)"));
      }
    }
    commit.lock();
    taken->status = status;
    taken->done = true;
    if (discarded != nullptr) {
      discarded->status = absl::AbortedError(absl::StrCat(
          "not saved: an earlier change failed to commit (", status.message(), "); retry"));
      discarded->done = true;
    }
    committing_ = false;
    committed_.notify_all();
  }
  return batch->status;
}

absl::Status Service::Reload() {
  std::lock_guard<std::mutex> connection(db_mutex_);
  absl::StatusOr<std::unique_ptr<place::Policy>> policy =
      place::MakePolicy(options_.policy, place::PolicyOptions{});
  if (!policy.ok()) return policy.status();
  engine_ = place::Engine(inventory_, *std::move(policy));
  tenants_.clear();
  classes_.clear();
  users_.clear();
  user_by_token_hash_.clear();
  active_.clear();
  queue_.clear();
  remotes_.clear();
  layouts_.clear();
  cleared_generation_.clear();
  draining_.clear();
  options_.seed_default_classes = false;
  return Load();
}

absl::Status Service::Load() {
  // A row the service could not have written (a JSON column of another shape, say) ends the
  // load with an error naming the store, never with an exception.
  try {
    return LoadRows();
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(db_->where(),
                                            ": a stored row is not as gpuslice writes it (",
                                            e.what(), "); restore the store from a backup"));
  }
}

absl::Status Service::LoadRows() {
  // Ids continue after the largest stored.
  for (const auto& [table, next] : {std::pair<const char*, std::int64_t*>{"leases", &next_lease_},
                                    {"queue", &next_queue_},
                                    {"audit", &next_audit_}}) {
    absl::StatusOr<store::Result> r = db_->Query(absl::StrCat("SELECT MAX(id) FROM ", table));
    if (!r.ok()) return r.status();
    const std::int64_t largest = store::AsInt(r->rows[0][0]);
    if (largest < 0 || largest >= kMaxStoredId) {
      return absl::DataLossError(absl::StrCat(db_->where(), ": table ", table, " holds id ",
                                              largest, ", outside 0..", kMaxStoredId));
    }
    *next = largest + 1;
  }
  if (absl::Status st = LoadUsers(*db_, &users_, &user_by_token_hash_); !st.ok()) return st;
  absl::StatusOr<store::Result> tenants =
      db_->Query("SELECT name, may_take_full, priority, max_gib FROM tenants");
  if (!tenants.ok()) return tenants.status();
  for (const store::Row& row : tenants->rows) {
    TenantSpec t;
    t.name = store::AsText(row[0]);
    t.may_take_full = store::AsInt(row[1]) != 0;
    t.priority = static_cast<int>(store::AsInt(row[2]));
    t.max_gib = store::AsDouble(row[3]);
    tenants_[t.name] = t;
  }
  absl::StatusOr<store::Result> quotas = db_->Query("SELECT tenant, class, max_slices FROM quotas");
  if (!quotas.ok()) return quotas.status();
  for (const store::Row& row : quotas->rows) {
    tenants_[store::AsText(row[0])].max_slices[store::AsText(row[1])] =
        static_cast<int>(store::AsInt(row[2]));
  }
  absl::StatusOr<store::Result> classes = db_->Query("SELECT name, spec FROM classes");
  if (!classes.ok()) return classes.status();
  for (const store::Row& row : classes->rows) {
    const std::string name = store::AsText(row[0]);
    classes_[name] = ClassFromJson(name, json::parse(store::AsText(row[1]), nullptr, false));
  }
  if (classes_.empty() && options_.seed_default_classes) {
    for (const ClassSpec& spec : DefaultClasses()) {
      Stage("INSERT INTO classes (name, spec) VALUES (?, ?)", {spec.name, ClassJson(spec).dump()});
      classes_[spec.name] = spec;
    }
  }
  // Machines reported by agents join the inventory before the leases go back onto it.
  absl::StatusOr<store::Result> nodes =
      db_->Query("SELECT host, report, seen_at, layout FROM nodes");
  if (!nodes.ok()) return nodes.status();
  for (const store::Row& row : nodes->rows) {
    NodeReport report =
        ReportFromJson(store::AsText(row[0]), json::parse(store::AsText(row[1]), nullptr, false));
    report.seen_at = store::AsInt(row[2]);
    if (const std::string text = store::AsText(row[3]); !text.empty()) {
      const json stored = json::parse(text, nullptr, false);
      if (stored.is_object() && stored.contains("cleared_generation")) {
        cleared_generation_[report.host] = StoredInt(stored, "cleared_generation", std::int64_t{0});
        remotes_[report.host] = std::move(report);
        continue;
      }
      absl::StatusOr<NodeLayout> layout = LayoutFromJson(report.host, stored);
      if (!layout.ok()) {
        return absl::DataLossError(
            absl::StrCat("the stored layout of ", report.host, ": ", layout.status().message()));
      }
      layouts_[report.host] = *std::move(layout);
    }
    remotes_[report.host] = std::move(report);
  }
  if (!remotes_.empty()) {
    absl::StatusOr<place::Cluster> cluster = InventoryWithRemotes();
    if (!cluster.ok()) return cluster.status();
    absl::StatusOr<std::unique_ptr<place::Policy>> policy =
        place::MakePolicy(options_.policy, place::PolicyOptions{});
    if (!policy.ok()) return policy.status();
    engine_ = place::Engine(*std::move(cluster), *std::move(policy));
  }
  // Active leases go back onto the inventory.
  std::map<std::string, int> node_index;
  for (int n = 0; n < engine_.cluster().node_count(); ++n) {
    node_index[engine_.cluster().spec(n).name] = n;
  }
  absl::StatusOr<store::Result> leases = db_->Query(
      absl::StrCat("SELECT ", kLeaseColumns, " FROM leases WHERE state = 'active' ORDER BY id"));
  if (!leases.ok()) return leases.status();
  absl::StatusOr<std::vector<StoredLease>> stored = ReadLeases(*leases);
  if (!stored.ok()) return stored.status();
  for (StoredLease& row : *stored) {
    Lease lease = std::move(row.lease);
    const AcquireRequest request = row.request;
    const ClassSpec* spec = nullptr;
    std::string class_name;
    absl::StatusOr<place::Request> placement = RequestFor(request, &spec, &class_name);
    absl::Status adopted = placement.status();
    if (placement.ok()) {
      auto it = node_index.find(lease.node);
      if (it == node_index.end()) {
        adopted =
            absl::NotFoundError(absl::StrCat("node ", lease.node, " is not in the inventory"));
      } else {
        place::Allocation allocation;
        allocation.node = it->second;
        allocation.gpus = lease.claims;
        allocation.request = *placement;
        absl::StatusOr<place::Allocation> taken = engine_.Adopt(allocation);
        adopted = taken.status();
        if (taken.ok() && options_.binder != nullptr && options_.binder->Handles(lease.node)) {
          // The devices as they are now (the instances may have been re-created).
          absl::StatusOr<std::vector<BoundDevice>> bound =
              options_.binder->Bind(engine_.cluster(), taken->node, taken->gpus, true);
          if (!bound.ok()) {
            (void)engine_.Release(*taken);
            adopted = absl::Status(
                bound.status().code(),
                absl::StrCat("its slice could not be set up again: ", bound.status().message()));
          } else if (*bound != lease.bound) {
            lease.bound = *std::move(bound);
            Stage("UPDATE leases SET bound = ? WHERE id = ?",
                  {BoundToJson(lease.bound).dump(), lease.id});
          }
        }
        if (adopted.ok()) {
          lease.devices = DeviceLines(taken->node, taken->gpus);
          active_[lease.id] = Active{lease, *taken};
        }
      }
    }
    if (!adopted.ok()) {
      const Caller system{"gpuslice", "", Role::kAdmin, ""};
      Stage("UPDATE leases SET state = 'lost', ended_at = ? WHERE id = ?", {Now(), lease.id});
      Audited(system, lease.tenant, "lose", absl::StrCat("lease ", lease.id), lease.purpose,
              json{{"why", adopted.message()}}.dump());
    }
  }
  absl::StatusOr<store::Result> queue = db_->Query(
      "SELECT id, tenant, user_name, class, purpose, request, priority, ttl_s, enqueued_at FROM "
      "queue WHERE state = 'queued' ORDER BY id");
  if (!queue.ok()) return queue.status();
  for (const store::Row& row : queue->rows) {
    Queued q;
    q.entry.id = store::AsInt(row[0]);
    q.entry.tenant = store::AsText(row[1]);
    q.entry.user = store::AsText(row[2]);
    q.entry.class_name = store::AsText(row[3]);
    q.entry.purpose = store::AsText(row[4]);
    q.request = RequestFromJson(json::parse(store::AsText(row[5]), nullptr, false));
    q.entry.priority = static_cast<int>(store::AsInt(row[6]));
    q.ttl_s = store::AsInt(row[7]);
    q.entry.enqueued_at = store::AsInt(row[8]);
    const ClassSpec* spec = nullptr;
    std::string class_name;
    absl::StatusOr<place::Request> placement = RequestFor(q.request, &spec, &class_name);
    if (!placement.ok()) continue;  // its class was deleted: it stays in the store, unserved
    q.placement = *placement;
    queue_.push_back(std::move(q));
  }
  Renumber();
  // Capacity freed by lost leases goes to the queue at once.
  return GrantQueued().status();
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

// ---- tenants and classes

absl::Status Service::PutTenant(const Caller& caller, const TenantSpec& tenant) {
  return Changing([&]() -> absl::Status {
    if (absl::Status s = NeedAdmin(caller); !s.ok()) return s;
    if (!ValidName(tenant.name)) {
      return absl::InvalidArgumentError("tenant name: 1-64 letters, digits, '-', '_' or '.'");
    }
    if (!std::isfinite(tenant.max_gib) || tenant.max_gib < 0 || tenant.max_gib > 1e7) {
      return absl::InvalidArgumentError("max_gib: must be within 0..10000000");
    }
    if (tenant.priority < -1000 || tenant.priority > 1000) {
      return absl::InvalidArgumentError("priority: must be within -1000..1000");
    }
    for (const auto& [class_name, max] : tenant.max_slices) {
      if (!classes_.contains(class_name)) {
        return absl::InvalidArgumentError(absl::StrCat("max_slices: no class '", class_name, "'"));
      }
      if (max < 0 || max > 100000) {
        return absl::InvalidArgumentError("max_slices: must be within 0..100000");
      }
    }
    const std::int64_t may_take_full = tenant.may_take_full ? 1 : 0;
    if (tenants_.contains(tenant.name)) {
      Stage("UPDATE tenants SET may_take_full = ?, priority = ?, max_gib = ? WHERE name = ?",
            {may_take_full, std::int64_t{tenant.priority}, tenant.max_gib, tenant.name});
    } else {
      Stage(
          "INSERT INTO tenants (name, may_take_full, priority, max_gib, created_at) VALUES (?, ?, "
          "?, ?, ?)",
          {tenant.name, may_take_full, std::int64_t{tenant.priority}, tenant.max_gib, Now()});
    }
    Stage("DELETE FROM quotas WHERE tenant = ?", {tenant.name});
    json quota = json::object();
    for (const auto& [class_name, max] : tenant.max_slices) {
      Stage("INSERT INTO quotas (tenant, class, max_slices) VALUES (?, ?, ?)",
            {tenant.name, class_name, std::int64_t{max}});
      quota[class_name] = max;
    }
    Audited(caller, tenant.name, "tenant.put", tenant.name, "",
            json{{"may_take_full", tenant.may_take_full},
                 {"priority", tenant.priority},
                 {"max_gib", tenant.max_gib},
                 {"max_slices", quota}}
                .dump());
    tenants_[tenant.name] = tenant;
    return absl::OkStatus();
  });
}

absl::Status Service::DeleteTenant(const Caller& caller, const std::string& name) {
  return Changing([&]() -> absl::Status {
    if (absl::Status s = NeedAdmin(caller); !s.ok()) return s;
    if (!tenants_.contains(name)) {
      return absl::NotFoundError(absl::StrCat("tenant '", name, "' does not exist"));
    }
    for (const auto& [id, active] : active_) {
      if (active.lease.tenant == name) {
        return absl::FailedPreconditionError(
            absl::StrCat("tenant '", name, "' holds lease ", id, "; release its leases first"));
      }
    }
    for (const char* sql :
         {"UPDATE queue SET state = 'cancelled' WHERE tenant = ? AND state = "
          "'queued'",
          "DELETE FROM users WHERE tenant = ?", "DELETE FROM quotas WHERE tenant = ?",
          "DELETE FROM tenants WHERE name = ?"}) {
      Stage(sql, {name});
    }
    Audited(caller, name, "tenant.delete", name, "", "{}");
    tenants_.erase(name);
    std::vector<std::string> members;
    for (const auto& [user_name, user] : users_) {
      if (user.role == Role::kTenant && user.tenant == name) members.push_back(user_name);
    }
    for (const std::string& member : members) ForgetUser(member);
    std::erase_if(queue_, [&](const Queued& q) { return q.entry.tenant == name; });
    Renumber();
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<TenantSpec>> Service::Tenants(const Caller& caller) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TenantSpec> out;
  for (const auto& [name, tenant] : tenants_) {
    if (caller.role == Role::kAdmin || caller.tenant == name) out.push_back(tenant);
  }
  return out;
}

absl::Status Service::PutClass(const Caller& caller, const ClassSpec& spec) {
  return Changing([&]() -> absl::Status {
    if (absl::Status s = NeedAdmin(caller); !s.ok()) return s;
    if (absl::Status s = ValidateClass(spec); !s.ok()) return s;
    Stage("DELETE FROM classes WHERE name = ?", {spec.name});
    Stage("INSERT INTO classes (name, spec) VALUES (?, ?)", {spec.name, ClassJson(spec).dump()});
    Audited(caller, "", "class.put", spec.name, "", ClassJson(spec).dump());
    classes_[spec.name] = spec;
    return absl::OkStatus();
  });
}

absl::Status Service::DeleteClass(const Caller& caller, const std::string& name) {
  return Changing([&]() -> absl::Status {
    if (absl::Status s = NeedAdmin(caller); !s.ok()) return s;
    if (!classes_.contains(name)) {
      return absl::NotFoundError(absl::StrCat("class '", name, "' does not exist"));
    }
    for (const auto& [id, active] : active_) {
      if (active.lease.class_name == name) {
        return absl::FailedPreconditionError(
            absl::StrCat("class '", name, "' is held by lease ", id));
      }
    }
    for (const Queued& q : queue_) {
      if (q.entry.class_name == name) {
        return absl::FailedPreconditionError(
            absl::StrCat("class '", name, "' has queued request ", q.entry.id));
      }
    }
    Stage("DELETE FROM classes WHERE name = ?", {name});
    Stage("DELETE FROM quotas WHERE class = ?", {name});
    Audited(caller, "", "class.delete", name, "", "{}");
    classes_.erase(name);
    for (auto& [tenant_name, tenant] : tenants_) tenant.max_slices.erase(name);
    return absl::OkStatus();
  });
}

place::Cluster Service::Occupancy() {
  std::lock_guard<std::mutex> lock(mutex_);
  return engine_.cluster();
}

std::vector<ClassSpec> Service::Classes() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ClassSpec> out;
  for (const auto& [name, spec] : classes_) out.push_back(spec);
  return out;
}

// ---- allocation

absl::StatusOr<place::Request> Service::RequestFor(const AcquireRequest& request,
                                                   const ClassSpec** spec_out,
                                                   std::string* class_name) {
  const int kinds = (request.class_name.empty() ? 0 : 1) + (request.profile.empty() ? 0 : 1) +
                    (request.share_milli > 0 || request.vram_mib > 0 ? 1 : 0);
  if (kinds != 1) {
    return absl::InvalidArgumentError(
        "ask for exactly one of: a class, a MIG profile, or a share (share_milli and/or "
        "vram_mib)");
  }
  if (request.share_milli < 0 || request.share_milli > 1000) {
    return absl::InvalidArgumentError("share_milli: must be within 0..1000");
  }
  if (request.vram_mib < 0 || request.vram_mib > (1LL << 24)) {
    return absl::InvalidArgumentError("vram_mib: must be within 0..16777216");
  }
  place::Request placement;
  placement.num_gpu = 1;
  *spec_out = nullptr;
  if (!request.class_name.empty()) {
    auto it = classes_.find(request.class_name);
    if (it == classes_.end()) {
      return absl::NotFoundError(absl::StrCat("class '", request.class_name, "' does not exist"));
    }
    const ClassSpec& spec = it->second;
    *spec_out = &spec;
    *class_name = spec.name;
    if (spec.full) {
      placement.gpu_milli = place::kMilliPerGpu;
    } else if (!spec.mig.empty()) {
      placement.mig_class = spec.mig;
    } else {
      placement.gpu_milli = spec.share_milli;
      placement.vram_mib = spec.vram_mib;
    }
  } else if (!request.profile.empty()) {
    if (request.profile.size() > 64) return absl::InvalidArgumentError("profile: too long");
    placement.mig_profile = request.profile;
    *class_name = "profile:" + request.profile;
  } else {
    placement.gpu_milli = request.share_milli;
    placement.vram_mib = request.vram_mib;
    *class_name = "share";
  }
  if (absl::Status s = place::ValidateRequest(placement); !s.ok()) return s;
  return placement;
}

double Service::GibOf(const place::Allocation& allocation) const {
  const place::Cluster& cluster = engine_.cluster();
  const place::NodeSpec& spec = cluster.spec(allocation.node);
  double mib = 0;
  for (const place::GpuClaim& claim : allocation.gpus) {
    if (claim.mig_profile >= 0) {
      mib += static_cast<double>(
          cluster.shape(allocation.node)->profile(claim.mig_profile).memory_mib);
    } else if (claim.whole) {
      mib += static_cast<double>(spec.gpu_memory_mib);
    } else if (claim.vram_mib > 0) {
      mib += static_cast<double>(claim.vram_mib);
    } else {
      mib += static_cast<double>(spec.gpu_memory_mib) * claim.milli / place::kMilliPerGpu;
    }
  }
  return mib / 1024.0;
}

std::string Service::QuotaProblem(const TenantSpec& tenant, const std::string& class_name,
                                  double gib) const {
  int held = 0;
  double held_gib = 0;
  for (const auto& [id, active] : active_) {
    if (active.lease.tenant != tenant.name) continue;
    held_gib += active.lease.memory_gib;
    if (active.lease.class_name == class_name) ++held;
  }
  // Slice quotas are a list of what the tenant may take: with any, a class without one, a bare
  // MIG profile ("profile:P") or a share is refused, so no request escapes the quotas by naming
  // the same slice another way.
  if (!tenant.max_slices.empty()) {
    auto it = tenant.max_slices.find(class_name);
    if (it == tenant.max_slices.end()) {
      std::vector<std::string> allowed;
      for (const auto& [name, max] : tenant.max_slices) allowed.push_back(name);
      return absl::StrFormat(
          "over quota: tenant %s has slice quotas, and only for the classes %s; '%s' is not one "
          "of them (ask for one of those classes)",
          tenant.name, absl::StrJoin(allowed, ", "), class_name);
    }
    if (held + 1 > it->second) {
      return absl::StrFormat("over quota: tenant %s holds %d of its %d '%s' slices", tenant.name,
                             held, it->second, class_name);
    }
  }
  if (tenant.max_gib > 0 && held_gib + gib > tenant.max_gib + 1e-9) {
    return absl::StrFormat(
        "over quota: tenant %s holds %.1f GiB of its %.1f GiB; this slice has "
        "%.1f GiB",
        tenant.name, held_gib, tenant.max_gib, gib);
  }
  return "";
}

int Service::NvmlIndex(int node, int gpu) const {
  const std::string& name = engine_.cluster().spec(node).name;
  const std::string host = HostOf(name);
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = EffectiveGpus(host);
  if (!gpus.ok()) return gpu;  // a machine that never reported: only the pool's count is known
  int seen = 0;
  for (const device::GpuInfo& g : *gpus) {
    if (NodeNameFor(host, g, false) != name) continue;
    if (seen++ == gpu) return g.index;
  }
  return gpu;
}

std::vector<std::string> Service::DeviceLines(int node,
                                              const std::vector<place::GpuClaim>& claims) const {
  const place::Cluster& cluster = engine_.cluster();
  std::vector<std::string> lines;
  for (const place::GpuClaim& claim : claims) {
    const geometry::Shape* shape = cluster.shape(node);
    // The index nvidia-smi -i takes, not the GPU's position among its model's GPUs.
    const int index = NvmlIndex(node, claim.gpu);
    if (claim.mig_profile >= 0 && shape != nullptr && claim.mig_profile < shape->profile_count()) {
      lines.push_back(absl::StrCat("GPU ", index, " MIG ", shape->profile(claim.mig_profile).name,
                                   "@", claim.mig_start));
    } else if (claim.whole) {
      lines.push_back(absl::StrCat("GPU ", index));
    } else {
      lines.push_back(
          absl::StrCat("GPU ", index, " share ", claim.milli, "m ", claim.vram_mib, " MiB"));
    }
  }
  return lines;
}

Lease Service::MakeLease(const place::Allocation& allocation, const std::string& tenant,
                         const std::string& user, const std::string& class_name,
                         const std::string& purpose, std::int64_t ttl_s) {
  Lease lease;
  lease.tenant = tenant;
  lease.user = user;
  lease.class_name = class_name;
  lease.purpose = purpose;
  lease.node = engine_.cluster().spec(allocation.node).name;
  lease.claims = allocation.gpus;
  lease.devices = DeviceLines(allocation.node, allocation.gpus);
  lease.memory_gib = GibOf(allocation);
  lease.granted_at = Now();
  lease.expires_at = lease.granted_at + ttl_s;
  lease.state = "active";
  return lease;
}

bool Service::BindNew(const place::Allocation& allocation, Lease* lease, std::string* why) {
  if (options_.binder == nullptr || !options_.binder->Handles(lease->node)) return true;
  absl::StatusOr<std::vector<BoundDevice>> bound =
      options_.binder->Bind(engine_.cluster(), allocation.node, allocation.gpus, false);
  if (!bound.ok()) {
    (void)engine_.Release(allocation);
    *why = absl::StrCat("the slice could not be set up on the GPU: ", bound.status().message());
    return false;
  }
  lease->bound = *std::move(bound);
  return true;
}

void Service::InsertLease(const Lease& lease, const AcquireRequest& request) {
  Stage(
      "INSERT INTO leases (id, tenant, user_name, class, purpose, request, node, claims, "
      "memory_gib, granted_at, expires_at, state, bound, from_queue) VALUES (?, ?, ?, ?, ?, ?, "
      "?, ?, ?, ?, ?, 'active', ?, ?)",
      {lease.id, lease.tenant, lease.user, lease.class_name, lease.purpose,
       RequestJson(request).dump(), lease.node, ClaimsToJson(lease.claims).dump(), lease.memory_gib,
       lease.granted_at, lease.expires_at, BoundToJson(lease.bound).dump(), lease.from_queue});
}

absl::StatusOr<AcquireResult> Service::Acquire(const Caller& caller,
                                               const AcquireRequest& request) {
  return Changing([&]() -> absl::StatusOr<AcquireResult> {
    if (caller.role != Role::kTenant) {
      return absl::PermissionDeniedError("admins hold no leases; acquire as a tenant's user");
    }
    auto tenant_it = tenants_.find(caller.tenant);
    if (tenant_it == tenants_.end()) {
      return absl::NotFoundError(absl::StrCat("tenant '", caller.tenant, "' does not exist"));
    }
    const TenantSpec& tenant = tenant_it->second;
    if (request.purpose.empty()) return absl::InvalidArgumentError("purpose: required");
    if (request.purpose.size() > kMaxTextBytes) {
      return absl::InvalidArgumentError("purpose: at most 1024 bytes");
    }
    if (!util::IsPrintableUtf8(request.purpose, true)) {
      return absl::InvalidArgumentError(
          "purpose: UTF-8 text without control characters (no NUL, no line breaks)");
    }
    if (request.ttl_s < 0 || request.ttl_s > kMaxTtlSeconds) {
      return absl::InvalidArgumentError("ttl_s: must be within 0..2592000 (30 days)");
    }
    const ClassSpec* spec = nullptr;
    std::string class_name;
    absl::StatusOr<place::Request> placement = RequestFor(request, &spec, &class_name);
    if (!placement.ok()) return placement.status();
    const std::int64_t max_ttl = spec != nullptr ? spec->max_lease_s : 8 * 3600;
    const std::int64_t ttl = request.ttl_s == 0 ? max_ttl : request.ttl_s;

    AcquireResult result;
    auto refuse = [&](const std::string& reason) {
      Audited(caller, tenant.name, "refuse", class_name, request.purpose,
              json{{"reason", reason}}.dump());
      result.outcome = AcquireResult::Outcome::kRefused;
      result.reason = reason;
      return result;
    };
    if (ttl > max_ttl) {
      return refuse(
          absl::StrCat("ttl_s ", ttl, " is above the class's maximum lease of ", max_ttl, " s"));
    }
    if (placement->whole() && !tenant.may_take_full) {
      return refuse(absl::StrCat("tenant ", tenant.name, " may not take full GPUs"));
    }
    if (std::string problem = QuotaProblem(tenant, class_name, 0); !problem.empty()) {
      return refuse(problem);
    }
    // FIFO within a class: the request waits behind queued requests of its class that only lack
    // capacity (an entry held back by its own tenant's quota is not ahead of anyone).
    const bool others_waiting = std::any_of(queue_.begin(), queue_.end(), [&](const Queued& q) {
      if (q.entry.class_name != class_name) return false;
      auto owner = tenants_.find(q.entry.tenant);
      return owner != tenants_.end() && QuotaProblem(owner->second, q.entry.class_name, 0).empty();
    });
    std::string wait_reason;
    if (!others_waiting) {
      absl::StatusOr<place::Allocation> allocation = engine_.Place(*placement);
      if (allocation.ok()) {
        const double gib = GibOf(*allocation);
        if (std::string problem = QuotaProblem(tenant, class_name, gib); !problem.empty()) {
          (void)engine_.Release(*allocation);
          return refuse(problem);
        }
        Lease lease =
            MakeLease(*allocation, tenant.name, caller.user, class_name, request.purpose, ttl);
        if (std::string why; !BindNew(*allocation, &lease, &why)) return refuse(why);
        lease.id = next_lease_++;
        InsertLease(lease, request);
        Audited(caller, tenant.name, "grant", absl::StrCat("lease ", lease.id), request.purpose,
                json{{"class", class_name},
                     {"node", lease.node},
                     {"devices", lease.devices},
                     {"gib", lease.memory_gib},
                     {"expires_at", lease.expires_at}}
                    .dump());
        active_[lease.id] = Active{lease, *allocation};
        result.outcome = AcquireResult::Outcome::kGranted;
        result.lease = lease;
        return result;
      }
      if (absl::IsFailedPrecondition(allocation.status())) {
        return refuse(
            absl::StrCat("never satisfiable on this fleet: ", allocation.status().message()));
      }
      if (!absl::IsResourceExhausted(allocation.status())) return allocation.status();
      wait_reason = std::string(allocation.status().message());
    } else {
      wait_reason = "requests of this class are queued ahead";
    }
    if (!request.wait) return refuse(wait_reason);
    Queued q;
    q.entry.id = next_queue_++;
    q.entry.tenant = tenant.name;
    q.entry.user = caller.user;
    q.entry.class_name = class_name;
    q.entry.purpose = request.purpose;
    q.entry.priority = tenant.priority;
    q.entry.enqueued_at = Now();
    q.entry.reason = wait_reason;
    q.request = request;
    q.placement = *placement;
    q.ttl_s = ttl;
    Stage(
        "INSERT INTO queue (id, tenant, user_name, class, purpose, request, priority, ttl_s, "
        "enqueued_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued')",
        {q.entry.id, q.entry.tenant, q.entry.user, q.entry.class_name, q.entry.purpose,
         RequestJson(request).dump(), std::int64_t{q.entry.priority}, q.ttl_s,
         q.entry.enqueued_at});
    Audited(caller, tenant.name, "queue", absl::StrCat("queue ", q.entry.id), request.purpose,
            json{{"class", class_name}, {"reason", wait_reason}}.dump());
    queue_.push_back(q);
    Renumber();
    for (const Queued& entry : queue_) {
      if (entry.entry.id == q.entry.id) result.queued = entry.entry;
    }
    result.outcome = AcquireResult::Outcome::kQueued;
    result.reason = wait_reason;
    return result;
  });
}

void Service::Renumber() {
  std::stable_sort(queue_.begin(), queue_.end(), [](const Queued& a, const Queued& b) {
    if (a.entry.priority != b.entry.priority) return a.entry.priority > b.entry.priority;
    return a.entry.id < b.entry.id;
  });
  std::map<std::string, int> position;
  for (Queued& q : queue_) q.entry.position = ++position[q.entry.class_name];
}

absl::Status Service::EndLease(std::int64_t lease_id, const std::string& state,
                               const Caller& actor) {
  auto it = active_.find(lease_id);
  const Lease& lease = it->second.lease;
  json detail = {{"class", lease.class_name}, {"node", lease.node}};
  bool draining = false;
  if (options_.binder != nullptr && options_.binder->Handles(lease.node) && !lease.bound.empty()) {
    if (absl::Status s = options_.binder->Unbind(lease.bound); !s.ok()) {
      detail["devices_left"] = std::string(s.message());
      // Processes still hold the instance: its slots stay taken until they are gone (Tick).
      draining = absl::IsFailedPrecondition(s);
    }
  }
  if (draining) {
    draining_[lease_id] = it->second;
  } else if (absl::Status s = engine_.Release(it->second.allocation); !s.ok()) {
    return s;
  }
  const std::int64_t now = Now();
  detail["held_s"] = now - lease.granted_at;
  Stage("UPDATE leases SET state = ?, ended_at = ? WHERE id = ?", {state, now, lease_id});
  const std::string action = state == "released"  ? "release"
                             : state == "expired" ? "expire"
                                                  : "reclaim";
  Audited(actor, lease.tenant, action, absl::StrCat("lease ", lease_id), lease.purpose,
          detail.dump());
  active_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<int> Service::GrantQueued() {
  int granted = 0;
  std::set<std::string> blocked;  // classes whose head did not fit: FIFO within a class
  for (size_t i = 0; i < queue_.size();) {
    Queued& q = queue_[i];
    auto tenant = tenants_.find(q.entry.tenant);
    if (blocked.contains(q.entry.class_name) || tenant == tenants_.end() ||
        !QuotaProblem(tenant->second, q.entry.class_name, 0).empty()) {
      ++i;
      continue;
    }
    absl::StatusOr<place::Allocation> allocation = engine_.Place(q.placement);
    if (!allocation.ok()) {
      blocked.insert(q.entry.class_name);
      ++i;
      continue;
    }
    if (!QuotaProblem(tenant->second, q.entry.class_name, GibOf(*allocation)).empty()) {
      (void)engine_.Release(*allocation);
      ++i;
      continue;
    }
    Lease lease = MakeLease(*allocation, q.entry.tenant, q.entry.user, q.entry.class_name,
                            q.entry.purpose, q.ttl_s);
    lease.from_queue = q.entry.id;
    if (!BindNew(*allocation, &lease, &q.entry.reason)) {  // it stays queued; its class waits
      blocked.insert(q.entry.class_name);
      ++i;
      continue;
    }
    lease.id = next_lease_++;
    InsertLease(lease, q.request);
    Stage("UPDATE queue SET state = 'granted' WHERE id = ?", {q.entry.id});
    const Caller system{"gpuslice", "", Role::kAdmin, ""};
    Audited(system, lease.tenant, "grant", absl::StrCat("lease ", lease.id), lease.purpose,
            json{{"class", lease.class_name},
                 {"node", lease.node},
                 {"devices", lease.devices},
                 {"from_queue", q.entry.id},
                 {"waited_s", lease.granted_at - q.entry.enqueued_at}}
                .dump());
    active_[lease.id] = Active{lease, *allocation};
    queue_.erase(queue_.begin() + static_cast<long>(i));
    ++granted;
  }
  Renumber();
  return granted;
}

absl::StatusOr<Lease> Service::Renew(const Caller& caller, std::int64_t lease_id,
                                     std::int64_t ttl_s) {
  return Changing([&]() -> absl::StatusOr<Lease> {
    auto it = active_.find(lease_id);
    if (it == active_.end() ||
        (caller.role != Role::kAdmin && it->second.lease.tenant != caller.tenant)) {
      return absl::NotFoundError(absl::StrCat("no active lease ", lease_id));
    }
    Lease& lease = it->second.lease;
    if (lease.expires_at <= Now()) {
      return absl::FailedPreconditionError(
          absl::StrCat("lease ", lease_id, " has expired; acquire a new one"));
    }
    auto spec = classes_.find(lease.class_name);
    const std::int64_t max_ttl = spec != classes_.end() ? spec->second.max_lease_s : 8 * 3600;
    if (ttl_s < 0 || ttl_s > max_ttl) {
      return absl::InvalidArgumentError(
          absl::StrCat("ttl_s: must be within 0..", max_ttl, " (the class's maximum lease)"));
    }
    const std::int64_t expires = Now() + (ttl_s == 0 ? max_ttl : ttl_s);
    Stage("UPDATE leases SET expires_at = ? WHERE id = ?", {expires, lease_id});
    Audited(caller, lease.tenant, "renew", absl::StrCat("lease ", lease_id), lease.purpose,
            json{{"expires_at", expires}}.dump());
    lease.expires_at = expires;
    return lease;
  });
}

absl::Status Service::Release(const Caller& caller, std::int64_t lease_id) {
  return Changing([&]() -> absl::Status {
    auto it = active_.find(lease_id);
    if (it == active_.end() ||
        (caller.role != Role::kAdmin && it->second.lease.tenant != caller.tenant)) {
      return absl::NotFoundError(absl::StrCat("no active lease ", lease_id));
    }
    if (absl::Status s = EndLease(lease_id, "released", caller); !s.ok()) return s;
    return GrantQueued().status();
  });
}

absl::Status Service::CancelQueued(const Caller& caller, std::int64_t queue_id) {
  return Changing([&]() -> absl::Status {
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [&](const Queued& q) { return q.entry.id == queue_id; });
    if (it == queue_.end() || (caller.role != Role::kAdmin && it->entry.tenant != caller.tenant)) {
      return absl::NotFoundError(absl::StrCat("no queued request ", queue_id));
    }
    Stage("UPDATE queue SET state = 'cancelled' WHERE id = ?", {queue_id});
    Audited(caller, it->entry.tenant, "cancel", absl::StrCat("queue ", queue_id), it->entry.purpose,
            "{}");
    queue_.erase(it);
    Renumber();
    return GrantQueued().status();
  });
}

absl::StatusOr<int> Service::Tick(const std::function<std::int64_t(const Lease&)>& idle_seconds) {
  return Changing([&]() -> absl::StatusOr<int> {
    const Caller system{"gpuslice", "", Role::kAdmin, ""};
    const std::int64_t now = Now();
    std::vector<std::pair<std::int64_t, std::string>> ending;
    for (const auto& [id, active] : active_) {
      if (active.lease.expires_at <= now) {
        ending.emplace_back(id, "expired");
        continue;
      }
      auto spec = classes_.find(active.lease.class_name);
      if (spec == classes_.end() || spec->second.idle_timeout_s <= 0) continue;
      std::int64_t idle = idle_seconds ? idle_seconds(active.lease) : -1;
      if (idle < 0) {
        auto remote = remote_idle_.find(id);
        if (remote != remote_idle_.end() && remote->second.valid_until >= now) {
          idle = remote->second.idle_s;
        }
      }
      if (idle >= spec->second.idle_timeout_s) ending.emplace_back(id, "reclaimed");
    }
    std::erase_if(remote_idle_, [&](const auto& entry) { return !active_.contains(entry.first); });
    for (const auto& [id, state] : ending) {
      if (absl::Status s = EndLease(id, state, system); !s.ok()) return s;
    }
    for (auto it = draining_.begin(); it != draining_.end();) {
      if (!options_.binder->Unbind(it->second.lease.bound).ok()) {
        ++it;
        continue;
      }
      (void)engine_.Release(it->second.allocation);
      Audited(system, it->second.lease.tenant, "drain", absl::StrCat("lease ", it->first),
              it->second.lease.purpose, json{{"node", it->second.lease.node}}.dump());
      it = draining_.erase(it);
    }
    if (absl::StatusOr<int> granted = GrantQueued(); !granted.ok()) return granted.status();
    StageUsageRollUp(now);  // service_usage.cc
    return static_cast<int>(ending.size());
  });
}

absl::StatusOr<std::vector<Lease>> Service::Leases(const Caller& caller, bool active_only) {
  if (active_only) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Lease> out;
    for (const auto& [id, active] : active_) {
      if (caller.role == Role::kAdmin || active.lease.tenant == caller.tenant) {
        out.push_back(active.lease);
      }
    }
    return out;
  }
  if (absl::Status s = Sync(); !s.ok()) return s;
  std::lock_guard<std::mutex> state(mutex_);
  std::lock_guard<std::mutex> connection(db_mutex_);
  std::map<std::string, int> node_index;
  for (int n = 0; n < engine_.cluster().node_count(); ++n) {
    node_index[engine_.cluster().spec(n).name] = n;
  }
  const std::string columns = absl::StrCat("SELECT ", kLeaseColumns, " FROM leases");
  const Value params[] = {caller.tenant};
  absl::StatusOr<store::Result> rows =
      caller.role == Role::kAdmin ? db_->Query(columns + " ORDER BY id")
                                  : db_->Query(columns + " WHERE tenant = ? ORDER BY id", params);
  if (!rows.ok()) return rows.status();
  absl::StatusOr<std::vector<StoredLease>> stored = ReadLeases(*rows);
  if (!stored.ok()) return stored.status();
  std::vector<Lease> out;
  for (StoredLease& row : *stored) {
    Lease lease = std::move(row.lease);
    if (auto it = active_.find(lease.id); it != active_.end()) {
      out.push_back(it->second.lease);
      continue;
    }
    if (auto node = node_index.find(lease.node); node != node_index.end()) {
      lease.devices = DeviceLines(node->second, lease.claims);
    }
    out.push_back(lease);
  }
  return out;
}

absl::StatusOr<Lease> Service::GetLease(const Caller& caller, std::int64_t lease_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = active_.find(lease_id);
    if (it != active_.end() &&
        (caller.role == Role::kAdmin || it->second.lease.tenant == caller.tenant)) {
      return it->second.lease;
    }
  }
  absl::StatusOr<std::vector<Lease>> all = Leases(caller, false);
  if (!all.ok()) return all.status();
  for (const Lease& lease : *all) {
    if (lease.id == lease_id) return lease;
  }
  return absl::NotFoundError(absl::StrCat("no lease ", lease_id));
}

absl::StatusOr<std::vector<QueueEntry>> Service::Queue(const Caller& caller) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<QueueEntry> out;
  for (const Queued& q : queue_) {
    if (caller.role == Role::kAdmin || q.entry.tenant == caller.tenant) out.push_back(q.entry);
  }
  return out;
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
  std::lock_guard<std::mutex> connection(db_mutex_);
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
