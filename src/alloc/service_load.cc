// The allocation service: loading its state from the store (see gpuslice/alloc/service.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gpuslice/alloc/inventory.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/alloc/wire.h"
#include "gpuslice/device/uuid.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/util/utf8.h"
#include "lease_rows.h"
#include "nlohmann/json.hpp"
#include "service_internal.h"

namespace gpuslice::alloc {
using namespace internal;  // NOLINT(google-build-using-namespace): this library's own helpers

using store::Value;

absl::Status Service::Reload() {
  util::MutexLock connection(db_mutex_);
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
  for (absl::Status (Service::*step)() :
       {&Service::LoadIds, &Service::LoadTenants, &Service::LoadClasses, &Service::LoadNodes,
        &Service::AdoptLeases, &Service::LoadQueue}) {
    if (absl::Status status = (this->*step)(); !status.ok()) return status;
  }
  Renumber();
  // Capacity freed by lost leases goes to the queue at once.
  return GrantQueued().status();
}

absl::Status Service::LoadIds() {
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
  return absl::OkStatus();
}

absl::Status Service::LoadTenants() {
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
  return absl::OkStatus();
}

absl::Status Service::LoadClasses() {
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
  return absl::OkStatus();
}

absl::Status Service::LoadNodes() {
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
  return absl::OkStatus();
}

absl::Status Service::AdoptLeases() {
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
  return absl::OkStatus();
}

absl::Status Service::LoadQueue() {
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
  return absl::OkStatus();
}

}  // namespace gpuslice::alloc
