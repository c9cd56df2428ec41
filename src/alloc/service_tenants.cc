// The allocation service: tenants, their quotas, and classes (see gpuslice/alloc/service.h).
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
namespace {

using store::Value;

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

namespace internal {

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

}  // namespace internal

absl::Status Service::PutTenant(const Caller& caller, const TenantSpec& tenant) {
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
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
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
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
  util::MutexLock lock(mutex_);
  std::vector<TenantSpec> out;
  for (const auto& [name, tenant] : tenants_) {
    if (caller.role == Role::kAdmin || caller.tenant == name) out.push_back(tenant);
  }
  return out;
}

absl::Status Service::PutClass(const Caller& caller, const ClassSpec& spec) {
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
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
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
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

std::vector<ClassSpec> Service::Classes() {
  util::MutexLock lock(mutex_);
  std::vector<ClassSpec> out;
  for (const auto& [name, spec] : classes_) out.push_back(spec);
  return out;
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

}  // namespace gpuslice::alloc
