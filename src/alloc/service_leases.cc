// The allocation service: acquire, renew, release, expiry, idle reclaim and the queue (see
// gpuslice/alloc/service.h).
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
#include "gpuslice/util/suggest.h"
#include "gpuslice/util/utf8.h"
#include "lease_rows.h"
#include "nlohmann/json.hpp"
#include "service_internal.h"

namespace gpuslice::alloc {
using namespace internal;  // NOLINT(google-build-using-namespace): this library's own helpers

using store::Value;

namespace {

// " (did you mean 'small'?)" for the closest of `known` to `name`, "" when none is close.
std::string Suggestion(const std::string& name, const std::vector<std::string>& known) {
  const std::string words = util::DidYouMean(util::Closest(name, known));
  return words.empty() ? "" : absl::StrCat(" (", words, ")");
}

std::vector<std::string> ClassNames(const std::map<std::string, ClassSpec>& classes) {
  std::vector<std::string> names;
  for (const auto& [name, spec] : classes) names.push_back(name);
  return names;
}

// NotFound, with the closest profiles, for a MIG profile (or short form such as "3g") that no
// GPU of the fleet has; OK when one has it.
absl::Status CheckProfileExists(const place::Cluster& cluster, const place::Request& request) {
  std::set<std::string> names;
  for (int node = 0; node < cluster.node_count(); ++node) {
    const geometry::Shape* shape = cluster.shape(node);
    if (shape == nullptr) continue;
    if (place::Cluster::MigProfileFor(*shape, request) >= 0) return absl::OkStatus();
    for (int p = 0; p < shape->profile_count(); ++p) names.insert(shape->profile(p).name);
  }
  return absl::NotFoundError(
      absl::StrCat("profile '", request.mig_profile, "' is on no GPU of this fleet",
                   Suggestion(request.mig_profile, {names.begin(), names.end()})));
}

}  // namespace

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
      return absl::NotFoundError(
          absl::StrCat("class '", request.class_name, "' does not exist",
                       Suggestion(request.class_name, ClassNames(classes_))));
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
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::StatusOr<AcquireResult> {
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
    auto refuse = [&](const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
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
    const bool others_waiting = std::any_of(
        queue_.begin(), queue_.end(), [&](const Queued& q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
          if (q.entry.class_name != class_name) return false;
          auto owner = tenants_.find(q.entry.tenant);
          return owner != tenants_.end() &&
                 QuotaProblem(owner->second, q.entry.class_name, 0).empty();
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
        // A mistyped profile: said as such, with the closest names. Only here, where the
        // engine already found no node able to hold it, never on the way to a grant.
        if (!request.profile.empty()) {
          if (absl::Status s = CheckProfileExists(engine_.cluster(), *placement); !s.ok()) return s;
        }
        return refuse(
            absl::StrCat("never satisfiable on this fleet: ", allocation.status().message()));
      }
      if (!absl::IsResourceExhausted(allocation.status())) return allocation.status();
      wait_reason = std::string(allocation.status().message());
    } else {
      wait_reason = "requests of this class are queued ahead";
    }
    if (!request.wait) return refuse(wait_reason);
    return Enqueue(caller, tenant, request, *placement, class_name, ttl, wait_reason);
  });
}

AcquireResult Service::Enqueue(const Caller& caller, const TenantSpec& tenant,
                               const AcquireRequest& request, const place::Request& placement,
                               const std::string& class_name, std::int64_t ttl,
                               const std::string& wait_reason) {
  AcquireResult result;
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
  q.placement = placement;
  q.ttl_s = ttl;
  Stage(
      "INSERT INTO queue (id, tenant, user_name, class, purpose, request, priority, ttl_s, "
      "enqueued_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued')",
      {q.entry.id, q.entry.tenant, q.entry.user, q.entry.class_name, q.entry.purpose,
       RequestJson(request).dump(), std::int64_t{q.entry.priority}, q.ttl_s, q.entry.enqueued_at});
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
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::StatusOr<Lease> {
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
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
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
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
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
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::StatusOr<int> {
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
    std::erase_if(remote_idle_, [&](const auto& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return !active_.contains(entry.first);
    });
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
    util::MutexLock lock(mutex_);
    std::vector<Lease> out;
    for (const auto& [id, active] : active_) {
      if (caller.role == Role::kAdmin || active.lease.tenant == caller.tenant) {
        out.push_back(active.lease);
      }
    }
    return out;
  }
  if (absl::Status s = Sync(); !s.ok()) return s;
  util::MutexLock state(mutex_);
  util::MutexLock connection(db_mutex_);
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
    util::MutexLock lock(mutex_);
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
  util::MutexLock lock(mutex_);
  std::vector<QueueEntry> out;
  for (const Queued& q : queue_) {
    if (caller.role == Role::kAdmin || q.entry.tenant == caller.tenant) out.push_back(q.entry);
  }
  return out;
}

}  // namespace gpuslice::alloc
