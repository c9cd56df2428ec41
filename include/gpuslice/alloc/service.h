// gpuslice/alloc/service.h
//
// The allocation service's core: tenants, users with API tokens, classes, quotas, leases, the
// queue and the audit log, kept in a store::Database and decided with the placement engine
// (gpuslice/place/engine.h). The HTTP API and the CLI are thin layers over this class.
//
// Rules:
//   * A request names a class (small/medium/large/full or an admin-defined one), a MIG profile, or
//     a fractional share (compute milli and/or VRAM), and a purpose (required).
//   * It is granted at once, queued (FIFO per class, higher tenant priority first), or refused
//     with a reason: over the tenant's quota (slices per class, total GiB), full GPUs not allowed
//     for the tenant, never satisfiable on this fleet, or no room now when the caller does not
//     want to wait.
//   * A lease lasts ttl seconds (at most the class's maximum); it can be renewed and released; it
//     expires at its end; it is reclaimed when idle beyond the class's idle timeout (the idle
//     probe, fed by the device backend's metrics, says for how long). Queued requests are granted
//     as capacity frees, in order.
//   * Every grant, queue, release, expiry, reclaim, refusal and admin change is audited with who,
//     what, the purpose and when.
//   * Tenants see and change only their own leases and queue entries; admin operations need the
//     admin role.
//
// Durability (group commit, gpuslice/alloc/group_commit.h): a call decides under one lock,
// changes the in-memory state and stages its statements; it returns only once the transaction
// holding them is durable. Calls that
// arrive while one transaction is being committed are committed together in the next one, so many
// clients share one fsync. Other callers may see a change up to one commit before it is durable;
// nobody is told of it before. When a commit fails, every call in that transaction and in the
// one being staged gets the error, and the service reloads its state from the store, so memory
// never holds what the store lost. Open() reloads everything and re-places the active leases on
// the inventory. Reads of history (Audit, Leases with active_only=false) first wait until every
// change staged before them is durable.
//
// Thread-safety: all public methods may be called concurrently; decisions are serialised inside,
// commits overlap with the next decisions. The locks, what each guards, the helpers that need
// them and their order are written as clang thread-safety annotations (gpuslice/util/mutex.h)
// and checked by scripts/thread_safety.sh.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "gpuslice/alloc/binder.h"
#include "gpuslice/alloc/group_commit.h"
#include "gpuslice/alloc/layout.h"
#include "gpuslice/alloc/usage.h"
#include "gpuslice/metrics/alerts.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/place/engine.h"
#include "gpuslice/store/database.h"
#include "gpuslice/util/mutex.h"

namespace gpuslice::alloc {

// Admins run the service; tenants' users take slices; agents (`gpuslice agent`) report their
// machine's GPUs and set up the slices granted on it.
enum class Role { kAdmin, kTenant, kAgent };

struct Caller {
  std::string user;
  std::string tenant;  // empty for admins and agents
  Role role = Role::kTenant;
  // Agents: the one machine whose GPUs, leases, usage, layout and alerts the token may report and
  // read (fixed when the token is made). Empty for other roles, and for agent tokens made before
  // tokens were bound, which are refused everywhere a machine is named.
  std::string machine;
};

// What a class hands out. Exactly one of: `mig` (a profile per GPU model id, on MIG GPUs),
// `share_milli`/`vram_mib` (a share of a shared GPU), `full` (a whole GPU).
struct ClassSpec {
  std::string name;
  std::map<std::string, std::string> mig;
  int share_milli = 0;
  std::int64_t vram_mib = 0;
  bool full = false;
  std::int64_t max_lease_s = 8 * 3600;
  std::int64_t idle_timeout_s = 0;  // 0: never reclaimed for being idle
};

struct TenantSpec {
  std::string name;
  bool may_take_full = false;
  int priority = 0;                       // higher is served first in queues
  std::map<std::string, int> max_slices;  // per class; a class not listed is not limited
  double max_gib = 0;                     // GPU memory held at once; 0: not limited
};

struct AcquireRequest {
  std::string class_name;  // or
  std::string profile;     // a MIG profile ("3g.40gb" or "3g"), or
  int share_milli = 0;     // a fractional share
  std::int64_t vram_mib = 0;
  std::string purpose;     // required
  std::int64_t ttl_s = 0;  // 0: the class's maximum
  bool wait = true;        // queue when there is no room now
};

struct Lease {
  std::int64_t id = 0;
  std::string tenant;
  std::string user;
  std::string class_name;  // the class, "profile:<name>" or "share"
  std::string purpose;
  std::string node;
  std::vector<place::GpuClaim> claims;
  std::vector<std::string> devices;  // one line per GPU: "GPU 3", "GPU 1 MIG 3g.40gb@4", ...
  std::vector<BoundDevice> bound;    // the devices on the machine (empty without a binder)
  double memory_gib = 0;
  std::int64_t granted_at = 0;
  std::int64_t expires_at = 0;
  std::int64_t ended_at = 0;
  std::string state;            // active, released, expired, reclaimed, lost
  std::int64_t from_queue = 0;  // the queue entry it was granted from; 0: granted at once
};

struct QueueEntry {
  std::int64_t id = 0;
  std::string tenant;
  std::string user;
  std::string class_name;
  std::string purpose;
  int priority = 0;
  std::int64_t enqueued_at = 0;
  int position = 0;  // 1-based within its class
  std::string reason;
};

struct AcquireResult {
  enum class Outcome { kGranted, kQueued, kRefused };
  Outcome outcome = Outcome::kRefused;
  Lease lease;         // kGranted
  QueueEntry queued;   // kQueued
  std::string reason;  // kQueued / kRefused
};

// A user as admins see it: never its token.
struct UserInfo {
  std::string name;
  std::string tenant;  // empty for admins and agents
  Role role = Role::kTenant;
  std::string machine;               // agents: the machine the token is bound to
  std::int64_t created_at = 0;       // epoch seconds
  std::int64_t token_issued_at = 0;  // when the current token was made (created or rotated)
  std::int64_t expires_at = 0;       // 0: never
};

struct AuditEvent {
  std::int64_t id = 0;
  std::int64_t at = 0;
  std::string actor;
  std::string tenant;
  std::string action;  // grant, queue, release, expire, reclaim, refuse, cancel, tenant.put, ...
  std::string subject;
  std::string purpose;
  std::string detail;  // JSON
};

// The newest `limit` events since `since`, oldest first.
struct AuditQuery {
  std::string tenant;      // empty: all (admins only)
  std::int64_t since = 0;  // epoch seconds
  int limit = 1000;
};

// A machine's GPUs as its agent reports them. Its placement nodes are "<host>/<model>[-mig]" (see
// InventoryFromGpus); GPUs of MIG-capable models in MIG mode are handed out as MIG instances.
struct NodeReport {
  std::string host;
  std::int64_t cpu_milli = 0;
  std::int64_t memory_mib = 0;
  struct Gpu {
    int index = 0;
    std::string uuid;
    std::string model;  // catalog id, e.g. "H100-80GB"
    bool mig = false;   // MIG mode on
  };
  std::vector<Gpu> gpus;
  std::int64_t seen_at = 0;  // set by the service
};

// A lease an agent must set up on its machine.
struct Assignment {
  std::int64_t lease = 0;
  std::string node;
  std::vector<place::GpuClaim> claims;
  std::vector<BoundDevice> bound;  // as last reported (empty until the agent has set it up)
  // For the agent's metrics and alerts.
  std::string tenant;
  std::string class_name;
  std::int64_t idle_timeout_s = 0;  // the class's (0: never reclaimed for idling)
};

// A layout an admin asks for: a mig-parted config (YAML or JSON text, as `gpuslice plan -o` writes
// it) and the config to use (empty: alloc::DefaultLayoutConfig: "<host>" or "gpuslice-<host>",
// else the file's only one).
struct LayoutRequest {
  std::string config_text;
  std::string config_name;
  std::string origin;  // the file name, for messages and the audit
};

// A lease that stands in the way of a layout.
struct BlockingLease {
  Lease lease;
  int gpu_index = 0;
  std::string why;
};

struct LayoutOutcome {
  bool accepted = false;
  NodeLayout layout;                    // accepted: the layout now in force
  std::vector<BlockingLease> blocking;  // refused: the leases in the way (nothing changed)
};

struct ServiceOptions {
  std::function<std::int64_t()> clock;  // epoch seconds; default: the system clock
  std::string policy = "gpuslice";      // placement policy
  bool seed_default_classes = true;     // small/medium/large/full when the store is new
  // Makes granted slices real on the GPUs (MIG instances) and names them; none: leases carry no
  // device ids. Called under the service's lock.
  std::shared_ptr<DeviceBinder> binder;
};

// What a process needs in its environment to use the lease's devices: CUDA_VISIBLE_DEVICES and
// NVIDIA_VISIBLE_DEVICES (MIG or GPU UUIDs), GPUSLICE_LEASE, and for shares the limits the
// interposer (libgpuslice-cuda.so, docs/SHIM.md) enforces, GPUSLICE_VRAM_LIMIT_MIB and
// GPUSLICE_COMPUTE_SHARE_MILLI, with GPUSLICE_SLICE=lease-<id> so that every process of the lease
// shares one accounting. The interposer itself is not named here (its path is the machine's:
// `gpuslice run` and `gpuslice lease env` add LD_PRELOAD). Empty when the lease has no bound
// devices.
std::map<std::string, std::string> LeaseEnvironment(const Lease& lease);
// `docker run` arguments for the same: --gpus "device=…" and -e for each variable.
std::vector<std::string> DockerArgs(const Lease& lease);

class Service {
 public:
  // Migrates the store, loads its state and re-places the active leases on `inventory`. A lease
  // that no longer fits (its GPU is gone) is ended as "lost" and audited.
  static absl::StatusOr<std::unique_ptr<Service>> Open(std::unique_ptr<store::Database> db,
                                                       place::Cluster inventory,
                                                       ServiceOptions options = {});
  ~Service();

  // ---- users and tokens (src/alloc/service_users.cc)
  // Tokens: created once, returned in clear only here and by RotateToken, stored as SHA-256. An
  // agent's token is bound to `machine` (required for agents, refused for other roles): with it,
  // the calls that name a host accept only that host. The token expires `expires_in_s` from now
  // (0: never; at most kMaxTokenLifetimeS).
  absl::StatusOr<std::string> CreateUser(const Caller& caller, const std::string& name,
                                         const std::string& tenant, Role role,
                                         const std::string& machine = "",
                                         std::int64_t expires_in_s = 0) ABSL_LOCKS_EXCLUDED(mutex_);
  // The caller behind a token. Unauthenticated for an unknown token, and for an expired one (the
  // message names its user and when it expired, never the token).
  absl::StatusOr<Caller> Authenticate(const std::string& token) ABSL_LOCKS_EXCLUDED(mutex_);
  // The first admin, created when the store has no admin yet; nullopt when one exists.
  absl::StatusOr<std::optional<std::string>> BootstrapAdmin(const std::string& name)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Admins see every user; anyone else only itself. By name.
  absl::StatusOr<std::vector<UserInfo>> Users(const Caller& caller) ABSL_LOCKS_EXCLUDED(mutex_);
  // Deletes a user and its token at once (admin). Its leases stay with its tenant. The last
  // admin cannot be revoked (FailedPrecondition): make another first.
  absl::Status RevokeUser(const Caller& caller, const std::string& name)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // A new token for `name`; the old one stops working at once. Admins rotate anyone's, others
  // only their own. `expires_in_s`: nullopt keeps the token's lifetime (an admin's rotation
  // starts it again from now; a self-rotation keeps the old end), 0 never expires, else seconds
  // from now. Only an admin may move the end later than it is.
  absl::StatusOr<std::string> RotateToken(const Caller& caller, const std::string& name,
                                          std::optional<std::int64_t> expires_in_s)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Audits a failed authentication from `source` (a peer address), durably: `limited` says the
  // source has just been limited (`auth.limit`), else one failure (`auth.fail`). `why` is the
  // refusal's message (it never holds a token).
  absl::Status AuditAuthFailure(const std::string& source, const std::string& why, bool limited)
      ABSL_LOCKS_EXCLUDED(mutex_);
  static constexpr std::int64_t kMaxTokenLifetimeS = 10LL * 366 * 86400;
  // Stored ids (leases, queue entries, audit events) must stay below this, so that the next one
  // never overflows; Open refuses a store that holds a larger one (DataLoss).
  static constexpr std::int64_t kMaxStoredId = std::int64_t{1} << 62;

  absl::Status PutTenant(const Caller& caller, const TenantSpec& tenant)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status DeleteTenant(const Caller& caller, const std::string& name)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<std::vector<TenantSpec>> Tenants(const Caller& caller) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status PutClass(const Caller& caller, const ClassSpec& spec) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status DeleteClass(const Caller& caller, const std::string& name)
      ABSL_LOCKS_EXCLUDED(mutex_);
  std::vector<ClassSpec> Classes() ABSL_LOCKS_EXCLUDED(mutex_);

  absl::StatusOr<AcquireResult> Acquire(const Caller& caller, const AcquireRequest& request)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<Lease> Renew(const Caller& caller, std::int64_t lease_id, std::int64_t ttl_s)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status Release(const Caller& caller, std::int64_t lease_id) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status CancelQueued(const Caller& caller, std::int64_t queue_id)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<std::vector<Lease>> Leases(const Caller& caller, bool active_only = true)
      ABSL_LOCKS_EXCLUDED(mutex_, db_mutex_);
  absl::StatusOr<Lease> GetLease(const Caller& caller, std::int64_t lease_id)
      ABSL_LOCKS_EXCLUDED(mutex_, db_mutex_);
  absl::StatusOr<std::vector<QueueEntry>> Queue(const Caller& caller) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<std::vector<AuditEvent>> Audit(const Caller& caller, const AuditQuery& query)
      ABSL_LOCKS_EXCLUDED(mutex_, db_mutex_);

  // Expires leases past their end, reclaims idle ones (`idle_seconds` returns how long a lease
  // has had no process and no memory in use, or -1 when unknown; for leases it does not know,
  // the agents' ReportUsage figures count), and grants queued requests that now fit. Returns
  // the number of leases ended.
  absl::StatusOr<int> Tick(const std::function<std::int64_t(const Lease&)>& idle_seconds = {})
      ABSL_LOCKS_EXCLUDED(mutex_);

  // The inventory as given to Open, without leases (it never changes).
  const place::Cluster& inventory() const { return inventory_; }

  // ---- agents (admin or agent role)
  // Adds or replaces a machine's GPUs in the inventory. Active leases on its nodes stay where they
  // are when they still fit; those that do not are ended as "lost" and audited. The report is
  // kept in the store, so the machine stays in the inventory across restarts.
  absl::Status ReportNode(const Caller& caller, const NodeReport& report)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<std::vector<NodeReport>> Nodes(const Caller& caller) ABSL_LOCKS_EXCLUDED(mutex_);
  // The active leases on `host`'s nodes, with their claims and what was reported bound.
  absl::StatusOr<std::vector<Assignment>> Assignments(const Caller& caller, const std::string& host)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // The agent set these leases up: records their devices (leases not active or not on `host`
  // are ignored and returned, so the agent can undo them).
  absl::StatusOr<std::vector<std::int64_t>> ReportBound(
      const Caller& caller, const std::string& host,
      const std::map<std::int64_t, std::vector<BoundDevice>>& bound) ABSL_LOCKS_EXCLUDED(mutex_);
  // How long each of `host`'s leases has had no process and no memory in use (seconds, 0 while
  // busy), as its agent measured it. Tick reclaims by these figures while they are fresher than
  // `valid_s`; after that a lease's idleness is unknown (never reclaimed for it). Leases not
  // active on `host` are ignored and returned. Kept in memory only.
  absl::StatusOr<std::vector<std::int64_t>> ReportUsage(
      const Caller& caller, const std::string& host,
      const std::map<std::int64_t, std::int64_t>& idle_s, std::int64_t valid_s)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // ---- usage history (gpuslice/alloc/usage.h)
  // Records one sample, taken now, per lease of `host` (admin or agent role) into the lease's
  // 1-minute bucket. Leases not active on `host` are ignored and returned; bad figures are
  // InvalidArgument, an unknown host NotFound. Staged and committed with the group commit (one
  // statement per lease); returns once durable. Tick rolls minute buckets older than a day up
  // into hour buckets and deletes hour buckets older than 90 days, at most once a minute.
  absl::StatusOr<std::vector<std::int64_t>> RecordUsage(
      const Caller& caller, const std::string& host,
      const std::map<std::int64_t, UsageFigures>& samples) ABSL_LOCKS_EXCLUDED(mutex_);
  // The usage report over the buckets of the last `since_s` seconds (1..90 days), grouped by
  // `by`, with the workloads' verdicts. Admins see every tenant, a tenant's user only its own
  // tenant's leases; agents are refused.
  absl::StatusOr<alloc::UsageReport> UsageReport(const Caller& caller, std::int64_t since_s,
                                                 UsageGroupBy by)
      ABSL_LOCKS_EXCLUDED(mutex_, db_mutex_);

  // ---- layouts (setting and clearing: admin; reading: admin or agent)
  // Fixes the MIG layout of a reported machine's GPUs (gpuslice/alloc/layout.h). When leases
  // stand in the way, nothing changes and the outcome names them; otherwise the layout is stored
  // and from now on only its instances are handed out on those GPUs, while the machine's agent
  // makes the GPUs match. Config errors (including a layout that cannot exist on the machine's
  // GPUs) are InvalidArgument, an unknown config or machine NotFound.
  absl::StatusOr<LayoutOutcome> SetLayout(const Caller& caller, const std::string& host,
                                          const LayoutRequest& request) ABSL_LOCKS_EXCLUDED(mutex_);
  // Back to MIG slices made on demand. Refused like SetLayout when it would change a GPU's MIG
  // mode under a lease (only while the agent has not carried out the layout's mode changes).
  absl::StatusOr<LayoutOutcome> ClearLayout(const Caller& caller, const std::string& host)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // The machine's layout, if one is set.
  absl::StatusOr<std::optional<NodeLayout>> GetLayout(const Caller& caller, const std::string& host)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // The agent carried out `generation` (message empty) or failed to (message says why).
  absl::Status ReportLayout(const Caller& caller, const std::string& host, std::int64_t generation,
                            const std::string& message) ABSL_LOCKS_EXCLUDED(mutex_);

  // ---- alerts (gpuslice/metrics/alerts.h; reporting: admin or agent; reading: any user)
  // A machine's alert changes, as its collector found them (the agent's, or serve's for its own
  // machine): fired alerts become active and are audited as `alert.fire`, cleared ones end and
  // are audited as `alert.clear`, with the alert as detail. An alert fired again while active,
  // or cleared while not active, changes nothing. Alerts are kept in memory: the active ones, and
  // the last kRecentAlerts that ended (the audit keeps them all). Once the changes are durable,
  // the alert listener (SetAlertListener) is told of each.
  absl::Status ReportAlerts(const Caller& caller, const std::string& host,
                            const metrics::AlertChanges& changes) ABSL_LOCKS_EXCLUDED(mutex_);
  struct AlertList {
    std::vector<metrics::Alert> active;  // by host, then key
    std::vector<metrics::Alert> recent;  // ended, newest first
  };
  // Active and recently ended alerts. Admins and agents see all; a tenant's user only alerts on
  // devices its tenant holds.
  absl::StatusOr<AlertList> Alerts(const Caller& caller) ABSL_LOCKS_EXCLUDED(mutex_);
  // Called (outside the service's locks) for every alert that fired (`fired`) or cleared.
  void SetAlertListener(std::function<void(const metrics::Alert&, bool fired)> listener)
      ABSL_LOCKS_EXCLUDED(mutex_);
  static constexpr std::size_t kRecentAlerts = 1000;

  // A copy of the inventory with every active lease placed on it.
  place::Cluster Occupancy() ABSL_LOCKS_EXCLUDED(mutex_);
  // kind() is the store's fixed name ("sqlite", "postgres"): read without db_mutex_.
  std::string_view store_kind() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return db_->kind(); }

 private:
  Service(std::unique_ptr<store::Database> db, place::Cluster inventory, place::Engine engine,
          ServiceOptions options);
  // Reads the store into memory (mutex_ and db_mutex_ held); writes it needs are staged. A row
  // gpuslice could not have written is DataLoss (LoadRows may throw on one; Load catches).
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_, db_mutex_);
  // The steps of Load, in this order (service_load.cc).
  absl::Status LoadRows() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_, db_mutex_);
  // The next lease, queue and audit ids.
  absl::Status LoadIds() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_, db_mutex_);
  // Users, tenants and their quotas.
  absl::Status LoadTenants() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_, db_mutex_);
  // Classes (the default ones into a new store).
  absl::Status LoadClasses() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_, db_mutex_);
  // Reported machines and their layouts, into the inventory.
  absl::Status LoadNodes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_, db_mutex_);
  // Active leases back onto the inventory (those that no longer fit are lost).
  absl::Status AdoptLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_, db_mutex_);
  // The queue entries still waiting.
  absl::Status LoadQueue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_, db_mutex_);

  // Empties memory and loads it again from the store, after a failed commit (mutex_ held; takes
  // db_mutex_).
  absl::Status Reload() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) ABSL_LOCKS_EXCLUDED(db_mutex_);
  // Runs `change` under mutex_, hands what it staged to the group commit, and waits until that
  // is durable. `change` reads and writes the guarded state, so it is written
  // `[&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> T { ... }`.
  template <typename Change>
  std::invoke_result_t<Change&> Changing(Change&& change) ABSL_LOCKS_EXCLUDED(mutex_);
  // Waits until everything staged so far is durable.
  absl::Status Sync() ABSL_LOCKS_EXCLUDED(mutex_);
  // Adds a statement to the change being decided (mutex_ held); Flush hands the change's
  // statements to the group commit, as one, and returns the batch they are in.
  void Stage(std::string sql, std::vector<store::Value> params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  GroupCommit::Ticket Flush() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The group commit's two functions: a batch in one transaction (db_mutex_), and after a failed
  // one, memory read again from the store (mutex_ and db_mutex_). Each takes its locks.
  absl::Status CommitBatch(const GroupCommit::Statements& statements)
      ABSL_LOCKS_EXCLUDED(db_mutex_);
  absl::Status Recover(const std::function<void()>& drop_staged) ABSL_LOCKS_EXCLUDED(mutex_);
  // Admins pass; an agent passes for its own machine only. A refused agent is audited
  // (`agent.refuse`, durable before the answer) and gets PermissionDenied. Call it outside the
  // state lock.
  absl::Status CheckMachine(const Caller& caller, const std::string& host)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<std::string> CreateUserLocked(const Caller& caller, const std::string& name,
                                               const std::string& tenant, Role role,
                                               const std::string& machine,
                                               std::int64_t expires_in_s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The end of a token made now that expires in `expires_in_s` (0: never, 0 is returned);
  // InvalidArgument outside 0..kMaxTokenLifetimeS.
  absl::StatusOr<std::int64_t> ExpiryFrom(std::int64_t expires_in_s) const;
  // Removes a user from memory (mutex_ held).
  void ForgetUser(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::int64_t Now() const { return options_.clock(); }
  // The helpers below decide with the in-memory state: mutex_ held.
  void Audited(const Caller& caller, const std::string& tenant, const std::string& action,
               const std::string& subject, const std::string& purpose, const std::string& detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::StatusOr<place::Request> RequestFor(const AcquireRequest& request,
                                            const ClassSpec** spec_out, std::string* class_name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::string QuotaProblem(const TenantSpec& tenant, const std::string& class_name,
                           double gib) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  double GibOf(const place::Allocation& allocation) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // "GPU 3", "GPU 1 MIG 3g.40gb@4", "GPU 2 share 250m 8192 MiB" per claim.
  // The NVML index of GPU `gpu` of placement node `node` (its position among the node's GPUs
  // when the machine's GPUs are not known).
  int NvmlIndex(int node, int gpu) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::vector<std::string> DeviceLines(int node, const std::vector<place::GpuClaim>& claims) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Lease MakeLease(const place::Allocation& allocation, const std::string& tenant,
                  const std::string& user, const std::string& class_name,
                  const std::string& purpose, std::int64_t ttl_s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The inventory: the local one plus every reported machine, in host order.
  absl::StatusOr<place::Cluster> InventoryWithRemotes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The machine's GPUs as the inventory hands them out: reported, with the layout's MIG modes.
  absl::StatusOr<std::vector<device::GpuInfo>> EffectiveGpus(const std::string& host) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Placement node -> its GPUs (UUID, or "#index" when reported without) in claim order.
  std::map<std::string, std::vector<std::string>> GpuOrder(const std::string& host) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // What the active and draining leases hold on `host`, by NVML index.
  std::vector<HeldDevice> HeldOn(const std::string& host) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Stages the machine's row (report and layout).
  void StageNode(const std::string& host) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Rebuilds the engine on InventoryWithRemotes() and places the active leases on it again; those
  // that no longer fit are ended as lost. The leases of `host` follow their GPUs (by UUID) from
  // `old_order` (GpuOrder before the change) to their new positions.
  absl::Status Replace(const std::string& host,
                       const std::map<std::string, std::vector<std::string>>& old_order)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Binds a new lease's claims when the node is this machine's; remote leases are set up by their
  // agent later. False (and the placement released) when binding failed; `why` says why.
  bool BindNew(const place::Allocation& allocation, Lease* lease, std::string* why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Stages the row of a new active lease.
  void InsertLease(const Lease& lease, const AcquireRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Queues a request that waits for room (`wait_reason`), staged and audited.
  AcquireResult Enqueue(const Caller& caller, const TenantSpec& tenant,
                        const AcquireRequest& request, const place::Request& placement,
                        const std::string& class_name, std::int64_t ttl,
                        const std::string& wait_reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status EndLease(std::int64_t lease_id, const std::string& state, const Caller& actor)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::StatusOr<int> GrantQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Renumber() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Stages the usage roll-up (minute buckets due into hours, expired hours deleted) when the
  // last one was staged a minute or more ago (mutex_ held; service_usage.cc).
  void StageUsageRollUp(std::int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Lock order: mutex_, then db_mutex_ (ABSL_ACQUIRED_BEFORE/AFTER below); mutex_, then the group
  // commit's own lock (which is never held while it commits or recovers). Members marked
  // ABSL_GUARDED_BY are read and written only with their lock held, and the helpers marked
  // ABSL_EXCLUSIVE_LOCKS_REQUIRED are called only with it: clang's -Wthread-safety checks both
  // (scripts/thread_safety.sh, in CI).
  util::Mutex mutex_ ABSL_ACQUIRED_BEFORE(db_mutex_);  // the in-memory state below and staged_
  util::Mutex db_mutex_ ABSL_ACQUIRED_AFTER(mutex_);   // the connection db_
  // By the change being decided, until Flush.
  GroupCommit::Statements staged_ ABSL_GUARDED_BY(mutex_);

  std::unique_ptr<store::Database> db_ ABSL_PT_GUARDED_BY(db_mutex_);
  const place::Cluster inventory_;  // as given to Open, without leases
  place::Engine engine_ ABSL_GUARDED_BY(mutex_);
  // Not guarded: fixed by Open, but for seed_default_classes, which Reload clears and
  // LoadClasses reads with both locks held.
  ServiceOptions options_;
  std::map<std::string, TenantSpec> tenants_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, ClassSpec> classes_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, UserInfo> users_ ABSL_GUARDED_BY(mutex_);  // by name
  // SHA-256 of a token -> user name.
  std::map<std::string, std::string> user_by_token_hash_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, NodeReport> remotes_ ABSL_GUARDED_BY(mutex_);  // by host
  std::map<std::string, NodeLayout> layouts_ ABSL_GUARDED_BY(mutex_);  // by host
  // The generation of a cleared layout, so that the next one continues from it (stored in the
  // machine's row in place of the layout).
  std::map<std::string, std::int64_t> cleared_generation_ ABSL_GUARDED_BY(mutex_);
  struct RemoteIdle {
    std::int64_t idle_s = 0;
    std::int64_t valid_until = 0;
  };
  // By lease, from agents' usage reports.
  std::map<std::int64_t, RemoteIdle> remote_idle_ ABSL_GUARDED_BY(mutex_);
  // By host, then key.
  std::map<std::string, std::map<std::string, metrics::Alert>> alerts_ ABSL_GUARDED_BY(mutex_);
  std::deque<metrics::Alert> recent_alerts_ ABSL_GUARDED_BY(mutex_);  // newest first
  std::function<void(const metrics::Alert&, bool)> alert_listener_ ABSL_GUARDED_BY(mutex_);
  struct Active {
    Lease lease;
    place::Allocation allocation;
  };
  std::map<std::int64_t, Active> active_ ABSL_GUARDED_BY(mutex_);
  // Ended leases whose instances processes still hold: their slots stay taken until Tick can
  // tear the instances down (lost on restart; the binder then refuses those placements).
  std::map<std::int64_t, Active> draining_ ABSL_GUARDED_BY(mutex_);
  struct Queued {
    QueueEntry entry;
    AcquireRequest request;
    place::Request placement;
    std::int64_t ttl_s = 0;
  };
  std::vector<Queued> queue_ ABSL_GUARDED_BY(mutex_);  // in service order
  // When StageUsageRollUp last staged (service clock).
  std::int64_t last_usage_rollup_ ABSL_GUARDED_BY(mutex_) = 0;
  std::int64_t next_lease_ ABSL_GUARDED_BY(mutex_) = 1;
  std::int64_t next_queue_ ABSL_GUARDED_BY(mutex_) = 1;
  std::int64_t next_audit_ ABSL_GUARDED_BY(mutex_) = 1;
  // Last: destroyed first, so that what it commits at shutdown finds the rest of the service.
  GroupCommit commits_;
};

// SHA-256 of a token, hex.
std::string HashToken(const std::string& token);
// A new random API token: "gs_" and 64 hex digits (256 bits from std::random_device).
std::string NewToken();
// "admin", "tenant" or "agent"; and back (anything else reads as tenant).
std::string RoleName(Role role);
Role RoleFromName(const std::string& name);

// The way back from a lost admin token, for whoever can open the store (`gpuslice admin
// recover`): gives admin `name` a new token that never expires, creating the admin if there is
// no user of that name, and audits it as `admin.recover` by `actor`, in one transaction (the
// store is migrated first). FailedPrecondition when `name` is a user of another role. A running
// `gpuslice serve` reads it when it restarts.
absl::StatusOr<std::string> RecoverAdmin(store::Database& db, const std::string& name,
                                         const std::string& actor, std::int64_t now);

}  // namespace gpuslice::alloc
