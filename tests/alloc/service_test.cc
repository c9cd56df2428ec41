// The allocation service core (gpuslice/alloc/service.h) on an SQLite file per test with a clock
// the test moves: default classes, tokens, admin checks and input validation, grants and
// refusals, quotas, the queue, renewals, expiry and idle reclaim, durability across reopening,
// lost leases, the audit log, failed commits and concurrent callers.
#include "gpuslice/alloc/service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "alloc/alloc_test_util.h"
#include "gpuslice/store/database.h"
#include "test_util.h"

namespace gpuslice::alloc {
namespace {

using ::testing::ElementsAre;
using testing::FakeClock;
using testing::Faults;
using testing::FaultyDatabase;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::MigA100;
using testing::Overcommit;
using testing::ScratchDir;
using testing::SharedGpus;
using ::testing::SizeIs;
using Outcome = AcquireResult::Outcome;

constexpr std::int64_t kDefaultMaxLease = 8 * 3600;

double ProfileGib(const std::string& model, const std::string& profile) {
  const geometry::Shape& shape = gpuslice::testing::ShapeOf(model);
  return static_cast<double>(shape.profile(gpuslice::testing::P(shape, profile)).memory_mib) /
         1024.0;
}

std::string ProfileName(const std::string& model, int profile) {
  return gpuslice::testing::ShapeOf(model).profile(profile).name;
}

AcquireRequest ClassRequest(const std::string& class_name, const std::string& purpose,
                            bool wait = true) {
  AcquireRequest request;
  request.class_name = class_name;
  request.purpose = purpose;
  request.wait = wait;
  return request;
}

TenantSpec Tenant(const std::string& name) {
  TenantSpec spec;
  spec.name = name;
  return spec;
}

ClassSpec MigClass(const std::string& name, const std::string& a100_profile) {
  ClassSpec spec;
  spec.name = name;
  spec.mig = {{"A100-80GB", a100_profile}};
  return spec;
}

std::string Actions(const std::vector<AuditEvent>& events) {
  std::string out;
  for (const AuditEvent& event : events) absl::StrAppend(&out, event.action, " ");
  return out;
}

class ServiceTest : public ::testing::Test {
 protected:
  std::string DbPath() const { return dir_.path() + "/alloc.db"; }

  ServiceOptions Options() {
    ServiceOptions options;
    options.clock = clock_.Function();
    return options;
  }

  std::unique_ptr<Service> OpenService(const std::vector<place::NodeSpec>& nodes,
                                       std::shared_ptr<Faults> faults = nullptr) {
    absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenSqlite(DbPath());
    EXPECT_TRUE(db.ok()) << db.status();
    if (!db.ok()) return nullptr;
    std::unique_ptr<store::Database> database = *std::move(db);
    if (faults != nullptr) {
      database = std::make_unique<FaultyDatabase>(std::move(database), std::move(faults));
    }
    absl::StatusOr<std::unique_ptr<Service>> service =
        Service::Open(std::move(database), place::testing::MakeCluster(nodes), Options());
    EXPECT_TRUE(service.ok()) << service.status();
    return service.ok() ? *std::move(service) : nullptr;
  }

  // Opens the service on `nodes` and makes the first admin.
  void Start(std::vector<place::NodeSpec> nodes, std::shared_ptr<Faults> faults = nullptr) {
    nodes_ = std::move(nodes);
    service_ = OpenService(nodes_, std::move(faults));
    ASSERT_NE(service_, nullptr);
    absl::StatusOr<std::optional<std::string>> token = service_->BootstrapAdmin("root");
    ASSERT_TRUE(token.ok()) << token.status();
    ASSERT_TRUE(token->has_value());
    admin_token_ = **token;
    absl::StatusOr<Caller> admin = service_->Authenticate(admin_token_);
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *admin;
  }

  // Reopens the service on the same file (the old one is closed first).
  void Reopen(std::vector<place::NodeSpec> nodes) {
    service_.reset();
    nodes_ = std::move(nodes);
    service_ = OpenService(nodes_);
    ASSERT_NE(service_, nullptr);
  }

  // Creates (or updates) the tenant and a user of it; returns the user as a caller.
  Caller AddTenant(const TenantSpec& spec, const std::string& user = "") {
    absl::Status put = service_->PutTenant(admin_, spec);
    EXPECT_TRUE(put.ok()) << put;
    const std::string name = user.empty() ? spec.name + "-user" : user;
    absl::StatusOr<std::string> token =
        service_->CreateUser(admin_, name, spec.name, Role::kTenant);
    EXPECT_TRUE(token.ok()) << token.status();
    if (!token.ok()) return Caller{};
    tokens_[name] = *token;
    absl::StatusOr<Caller> caller = service_->Authenticate(*token);
    EXPECT_TRUE(caller.ok()) << caller.status();
    return caller.ok() ? *caller : Caller{};
  }
  Caller AddTenant(const std::string& name) {
    TenantSpec spec;
    spec.name = name;
    return AddTenant(spec);
  }

  AcquireResult Acquire(const Caller& caller, const AcquireRequest& request) {
    absl::StatusOr<AcquireResult> result = service_->Acquire(caller, request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : AcquireResult{};
  }

  // Acquires and expects a grant.
  Lease Grant(const Caller& caller, const AcquireRequest& request) {
    AcquireResult result = Acquire(caller, request);
    EXPECT_EQ(result.outcome, Outcome::kGranted) << request.purpose << ": " << result.reason;
    return result.lease;
  }
  QueueEntry Enqueue(const Caller& caller, const AcquireRequest& request) {
    AcquireResult result = Acquire(caller, request);
    EXPECT_EQ(result.outcome, Outcome::kQueued) << request.purpose << ": " << result.reason;
    return result.queued;
  }

  std::vector<Lease> LeasesOf(const Caller& caller, bool active_only = true) {
    absl::StatusOr<std::vector<Lease>> leases = service_->Leases(caller, active_only);
    EXPECT_TRUE(leases.ok()) << leases.status();
    return leases.ok() ? *leases : std::vector<Lease>{};
  }
  std::vector<QueueEntry> QueueOf(const Caller& caller) {
    absl::StatusOr<std::vector<QueueEntry>> queue = service_->Queue(caller);
    EXPECT_TRUE(queue.ok()) << queue.status();
    return queue.ok() ? *queue : std::vector<QueueEntry>{};
  }
  Lease LeaseOf(const Caller& caller, std::int64_t id) {
    absl::StatusOr<Lease> lease = service_->GetLease(caller, id);
    EXPECT_TRUE(lease.ok()) << lease.status();
    return lease.ok() ? *lease : Lease{};
  }
  std::vector<Lease> Active() {
    absl::StatusOr<std::vector<Lease>> leases = service_->Leases(admin_);
    EXPECT_TRUE(leases.ok()) << leases.status();
    return leases.ok() ? *leases : std::vector<Lease>{};
  }
  std::vector<Lease> AllLeases() {
    absl::StatusOr<std::vector<Lease>> leases = service_->Leases(admin_, false);
    EXPECT_TRUE(leases.ok()) << leases.status();
    return leases.ok() ? *leases : std::vector<Lease>{};
  }
  std::vector<QueueEntry> Queued() {
    absl::StatusOr<std::vector<QueueEntry>> queue = service_->Queue(admin_);
    EXPECT_TRUE(queue.ok()) << queue.status();
    return queue.ok() ? *queue : std::vector<QueueEntry>{};
  }
  std::vector<AuditEvent> AuditAll() {
    AuditQuery query;
    query.limit = 100000;
    absl::StatusOr<std::vector<AuditEvent>> events = service_->Audit(admin_, query);
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? *events : std::vector<AuditEvent>{};
  }
  std::vector<AuditEvent> AuditOf(const std::string& action) {
    std::vector<AuditEvent> out;
    for (const AuditEvent& event : AuditAll()) {
      if (event.action == action) out.push_back(event);
    }
    return out;
  }
  std::vector<TenantSpec> AllTenants() {
    absl::StatusOr<std::vector<TenantSpec>> tenants = service_->Tenants(admin_);
    EXPECT_TRUE(tenants.ok()) << tenants.status();
    return tenants.ok() ? *tenants : std::vector<TenantSpec>{};
  }
  std::optional<ClassSpec> FindClass(const std::string& name) {
    for (const ClassSpec& spec : service_->Classes()) {
      if (spec.name == name) return spec;
    }
    return std::nullopt;
  }
  void PutClass(const ClassSpec& spec) {
    absl::Status status = service_->PutClass(admin_, spec);
    EXPECT_TRUE(status.ok()) << status;
  }

  // Reads the store directly through a second connection.
  store::Result Sql(const std::string& sql, std::vector<store::Value> params = {}) {
    absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenSqlite(DbPath());
    EXPECT_TRUE(db.ok()) << db.status();
    if (!db.ok()) return {};
    absl::StatusOr<store::Result> result = (*db)->Query(sql, params);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : store::Result{};
  }

  // Acquires `request` as `caller` without waiting until refused; returns the number granted.
  int FillWith(const Caller& caller, AcquireRequest request, int limit = 200) {
    request.wait = false;
    for (int i = 0; i < limit; ++i) {
      request.purpose = absl::StrCat("fill ", i);
      AcquireResult result = Acquire(caller, request);
      if (result.outcome != Outcome::kGranted) {
        EXPECT_EQ(result.outcome, Outcome::kRefused);
        return i;
      }
    }
    ADD_FAILURE() << "never refused after " << limit << " grants";
    return limit;
  }

  ScratchDir dir_;
  FakeClock clock_;
  std::vector<place::NodeSpec> nodes_;
  std::unique_ptr<Service> service_;
  Caller admin_;
  std::string admin_token_;
  std::map<std::string, std::string> tokens_;  // user -> token
};

// ---- defaults

TEST_F(ServiceTest, EmptyStoreIsSeededWithTheDefaultClasses) {
  Start({MigA100("m0", 1)});
  std::vector<std::string> names;
  for (const ClassSpec& spec : service_->Classes()) names.push_back(spec.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("small", "medium", "large", "full"));
  const std::optional<ClassSpec> small = FindClass("small");
  const std::optional<ClassSpec> medium = FindClass("medium");
  const std::optional<ClassSpec> large = FindClass("large");
  const std::optional<ClassSpec> full = FindClass("full");
  ASSERT_TRUE(small && medium && large && full);
  EXPECT_EQ(small->mig.at("A100-80GB"), "1g.10gb");
  EXPECT_EQ(medium->mig.at("A100-80GB"), "2g.20gb");
  EXPECT_EQ(large->mig.at("A100-80GB"), "4g.40gb");
  EXPECT_EQ(small->mig.at("H100-80GB"), "1g.10gb");
  EXPECT_FALSE(small->full);
  EXPECT_EQ(small->share_milli, 0);
  EXPECT_TRUE(full->full);
  EXPECT_TRUE(full->mig.empty());
  EXPECT_EQ(full->share_milli, 0);
  for (const ClassSpec& spec : service_->Classes()) EXPECT_EQ(spec.max_lease_s, kDefaultMaxLease);
  // Every MIG-capable model with a 1-slice profile is in small.
  for (const std::string& model : gpuslice::testing::MigModelIds()) {
    EXPECT_TRUE(small->mig.contains(model)) << model;
  }
  // Seeded in the store, not only in memory.
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM classes").rows[0][0]), 4);
}

// The default classes go into a new store only: a store created without them stays without, and
// classes an admin deleted stay deleted across restarts, even when none is left.
TEST_F(ServiceTest, DefaultClassesOnlyInANewStore) {
  {
    absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenSqlite(DbPath());
    ASSERT_TRUE(db.ok());
    ServiceOptions options = Options();
    options.seed_default_classes = false;
    absl::StatusOr<std::unique_ptr<Service>> service =
        Service::Open(*std::move(db), place::testing::MakeCluster({MigA100("m0", 1)}), options);
    ASSERT_TRUE(service.ok()) << service.status();
    EXPECT_THAT((*service)->Classes(), IsEmpty());
  }
  Start({MigA100("m0", 1)});
  EXPECT_THAT(service_->Classes(), IsEmpty());  // not a new store any more
}

TEST_F(ServiceTest, DeletedDefaultClassesStayDeleted) {
  Start({MigA100("m0", 1)});
  ASSERT_TRUE(service_->DeleteClass(admin_, "medium").ok());
  Reopen({MigA100("m0", 1)});
  EXPECT_FALSE(FindClass("medium").has_value());
  EXPECT_TRUE(FindClass("small").has_value());
  for (const char* name : {"small", "large", "full"}) {
    ASSERT_TRUE(service_->DeleteClass(admin_, name).ok()) << name;
  }
  Reopen({MigA100("m0", 1)});
  EXPECT_THAT(service_->Classes(), IsEmpty());
}

// ---- users and tokens

TEST_F(ServiceTest, BootstrapAdminOnceAndAuthenticate) {
  nodes_ = {MigA100("m0", 1)};
  service_ = OpenService(nodes_);
  ASSERT_NE(service_, nullptr);
  absl::StatusOr<std::optional<std::string>> first = service_->BootstrapAdmin("root");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value());
  EXPECT_FALSE((*first)->empty());
  absl::StatusOr<std::optional<std::string>> second = service_->BootstrapAdmin("other");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->has_value());

  absl::StatusOr<Caller> admin = service_->Authenticate(**first);
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(admin->role, Role::kAdmin);
  EXPECT_EQ(admin->user, "root");
  EXPECT_EQ(admin->tenant, "");

  EXPECT_EQ(service_->Authenticate("gs_wrong").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(service_->Authenticate("").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(service_->Authenticate(**first + "x").status().code(),
            absl::StatusCode::kUnauthenticated);
  // Only one admin row exists.
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM users WHERE role = 'admin'").rows[0][0]), 1);
}

TEST_F(ServiceTest, TokensAreStoredHashed) {
  EXPECT_EQ(HashToken("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Start({MigA100("m0", 1)});
  const Caller alice = AddTenant(Tenant("team-a"), "alice");
  const std::string token = tokens_.at("alice");
  EXPECT_EQ(alice.user, "alice");
  EXPECT_EQ(alice.tenant, "team-a");
  EXPECT_EQ(alice.role, Role::kTenant);
  EXPECT_NE(token, admin_token_);

  const store::Result rows = Sql("SELECT name, tenant, role, token_hash, created_at FROM users");
  ASSERT_EQ(rows.rows.size(), 2u);
  std::map<std::string, std::string> hash_of;
  for (const store::Row& row : rows.rows) {
    for (const store::Value& cell : row) {
      EXPECT_THAT(store::AsText(cell), ::testing::Not(HasSubstr(token)));
      EXPECT_THAT(store::AsText(cell), ::testing::Not(HasSubstr(admin_token_)));
    }
    hash_of[store::AsText(row[0])] = store::AsText(row[3]);
  }
  EXPECT_EQ(hash_of["alice"], HashToken(token));
  EXPECT_EQ(hash_of["root"], HashToken(admin_token_));
  EXPECT_EQ(HashToken(token).size(), 64u);
}

TEST_F(ServiceTest, CreateUserChecksItsInput) {
  Start({MigA100("m0", 1)});
  AddTenant("team-a");
  EXPECT_EQ(service_->CreateUser(admin_, "team-a-user", "team-a", Role::kTenant).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(service_->CreateUser(admin_, "bob", "no-such-tenant", Role::kTenant).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(service_->CreateUser(admin_, "bad name", "team-a", Role::kTenant).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->CreateUser(admin_, "ops", "team-a", Role::kAdmin).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> ops = service_->CreateUser(admin_, "ops", "", Role::kAdmin);
  ASSERT_TRUE(ops.ok()) << ops.status();
  absl::StatusOr<Caller> caller = service_->Authenticate(*ops);
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->role, Role::kAdmin);
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM users").rows[0][0]), 3);
}

// ---- admin operations and validation

TEST_F(ServiceTest, AdminOperationsRefuseATenantCaller) {
  Start({MigA100("m0", 1)});
  const Caller tenant = AddTenant("team-a");
  const std::vector<AuditEvent> audit_before = AuditAll();
  const size_t classes_before = service_->Classes().size();

  TenantSpec other;
  other.name = "team-b";
  EXPECT_EQ(service_->PutTenant(tenant, other).code(), absl::StatusCode::kPermissionDenied);
  TenantSpec self;
  self.name = "team-a";
  self.may_take_full = true;
  EXPECT_EQ(service_->PutTenant(tenant, self).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_->DeleteTenant(tenant, "team-a").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_->PutClass(tenant, MigClass("mine", "7g")).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_->DeleteClass(tenant, "small").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_->CreateUser(tenant, "eve", "team-a", Role::kTenant).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_->CreateUser(tenant, "eve", "", Role::kAdmin).status().code(),
            absl::StatusCode::kPermissionDenied);

  const std::vector<TenantSpec> tenants = AllTenants();
  ASSERT_THAT(tenants, SizeIs(1));
  EXPECT_FALSE(tenants[0].may_take_full);
  EXPECT_EQ(service_->Classes().size(), classes_before);
  EXPECT_TRUE(FindClass("small").has_value());
  EXPECT_EQ(AuditAll().size(), audit_before.size());
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM users").rows[0][0]), 2);
  // A tenant sees only itself.
  absl::StatusOr<std::vector<TenantSpec>> seen = service_->Tenants(tenant);
  ASSERT_TRUE(seen.ok());
  ASSERT_THAT(*seen, SizeIs(1));
  EXPECT_EQ((*seen)[0].name, "team-a");
}

TEST_F(ServiceTest, BadTenantInputIsInvalidArgumentAndChangesNothing) {
  Start({MigA100("m0", 1)});
  TenantSpec good;
  good.name = "team-a";
  good.max_slices = {{"small", 2}};
  good.max_gib = 50;
  ASSERT_TRUE(service_->PutTenant(admin_, good).ok());
  const size_t audit_before = AuditAll().size();

  auto bad = [&](const std::string& what, TenantSpec spec) {
    absl::Status status = service_->PutTenant(admin_, spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what << ": " << status;
  };
  for (const std::string& name : {std::string(""), std::string("has space"), std::string("a/b"),
                                  std::string("ümlaut"), std::string(65, 'x')}) {
    TenantSpec spec;
    spec.name = name;
    bad("name '" + name + "'", spec);
  }
  TenantSpec negative = good;
  negative.max_gib = -1;
  bad("negative max_gib", negative);
  TenantSpec huge = good;
  huge.max_gib = 1e12;
  bad("huge max_gib", huge);
  TenantSpec priority = good;
  priority.priority = 5000;
  bad("priority", priority);
  TenantSpec unknown_class = good;
  unknown_class.max_slices = {{"no-such-class", 1}};
  bad("quota for an unknown class", unknown_class);
  TenantSpec negative_quota = good;
  negative_quota.max_slices = {{"small", -1}};
  bad("negative quota", negative_quota);

  const std::vector<TenantSpec> tenants = AllTenants();
  ASSERT_THAT(tenants, SizeIs(1));
  EXPECT_EQ(tenants[0].name, "team-a");
  EXPECT_EQ(tenants[0].max_gib, 50.0);
  EXPECT_EQ(tenants[0].max_slices, (std::map<std::string, int>{{"small", 2}}));
  EXPECT_EQ(AuditAll().size(), audit_before);
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM tenants").rows[0][0]), 1);
  const store::Result quotas = Sql("SELECT class, max_slices FROM quotas");
  ASSERT_EQ(quotas.rows.size(), 1u);
  EXPECT_EQ(store::AsText(quotas.rows[0][0]), "small");
  EXPECT_EQ(store::AsInt(quotas.rows[0][1]), 2);
}

// Regression (PutTenant, NaN max_gib; fixed): input TenantSpec{name="team-nan", max_gib=NaN};
// expected InvalidArgument (NaN is not within 0..10000000); before the fix AlreadyExists, because
// the range check `max_gib < 0 || max_gib > 1e7` lets NaN through, SQLite binds NaN as NULL and the
// NOT NULL constraint of tenants.max_gib fails, which the store reports as a constraint violation.
TEST_F(ServiceTest, NanMaxGibIsInvalidArgument) {
  Start({MigA100("m0", 1)});
  TenantSpec spec;
  spec.name = "team-nan";
  spec.max_gib = std::numeric_limits<double>::quiet_NaN();
  absl::Status status = service_->PutTenant(admin_, spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(AllTenants(), IsEmpty());
}

TEST_F(ServiceTest, BadClassInputIsInvalidArgumentAndChangesNothing) {
  Start({MigA100("m0", 1)});
  const std::vector<ClassSpec> before = service_->Classes();
  const size_t audit_before = AuditAll().size();
  auto bad = [&](const std::string& what, const ClassSpec& spec) {
    absl::Status status = service_->PutClass(admin_, spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what << ": " << status;
  };
  ClassSpec two_kinds = MigClass("two", "1g");
  two_kinds.full = true;
  bad("mig and full", two_kinds);
  ClassSpec mig_and_share = MigClass("two", "1g");
  mig_and_share.share_milli = 100;
  bad("mig and share", mig_and_share);
  ClassSpec share_and_full;
  share_and_full.name = "two";
  share_and_full.vram_mib = 1024;
  share_and_full.full = true;
  bad("share and full", share_and_full);
  ClassSpec none;
  none.name = "none";
  bad("no kind", none);
  bad("unknown model", [] {
    ClassSpec spec;
    spec.name = "unknown-model";
    spec.mig = {{"Z100-1TB", "1g"}};
    return spec;
  }());
  bad("model without MIG", [] {
    ClassSpec spec;
    spec.name = "no-mig";
    spec.mig = {{"L40S", "1g"}};
    return spec;
  }());
  bad("unknown profile", MigClass("unknown-profile", "9g.99gb"));
  bad("unknown short profile", MigClass("unknown-short", "8g"));
  bad("bad name", MigClass("bad name", "1g"));
  bad("empty name", MigClass("", "1g"));
  ClassSpec share_over;
  share_over.name = "share-over";
  share_over.share_milli = 1500;
  bad("share_milli over 1000", share_over);
  ClassSpec zero_lease = MigClass("zero-lease", "1g");
  zero_lease.max_lease_s = 0;
  bad("max_lease_s 0", zero_lease);
  ClassSpec negative_idle = MigClass("negative-idle", "1g");
  negative_idle.idle_timeout_s = -1;
  bad("negative idle timeout", negative_idle);
  // Replacing an existing class with a bad spec keeps the old one.
  ClassSpec bad_small = MigClass("small", "9g");
  bad("bad replacement of small", bad_small);

  const std::vector<ClassSpec> after = service_->Classes();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].name, before[i].name);
    EXPECT_EQ(after[i].mig, before[i].mig);
  }
  EXPECT_EQ(AuditAll().size(), audit_before);
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM classes").rows[0][0]),
            static_cast<std::int64_t>(before.size()));
}

TEST_F(ServiceTest, PutClassAndPutTenantReplace) {
  Start({MigA100("m0", 1)});
  ClassSpec shares;
  shares.name = "half";
  shares.share_milli = 500;
  shares.vram_mib = 8192;
  shares.max_lease_s = 600;
  PutClass(shares);
  std::optional<ClassSpec> half = FindClass("half");
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->share_milli, 500);
  EXPECT_EQ(half->vram_mib, 8192);
  EXPECT_EQ(half->max_lease_s, 600);
  shares.max_lease_s = 900;
  PutClass(shares);
  half = FindClass("half");
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->max_lease_s, 900);
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM classes WHERE name = 'half'").rows[0][0]), 1);

  TenantSpec spec;
  spec.name = "team-a";
  spec.max_slices = {{"small", 2}, {"half", 1}};
  ASSERT_TRUE(service_->PutTenant(admin_, spec).ok());
  spec.max_slices = {{"medium", 3}};
  spec.priority = 7;
  ASSERT_TRUE(service_->PutTenant(admin_, spec).ok());
  const std::vector<TenantSpec> tenants = AllTenants();
  ASSERT_THAT(tenants, SizeIs(1));
  EXPECT_EQ(tenants[0].priority, 7);
  EXPECT_EQ(tenants[0].max_slices, (std::map<std::string, int>{{"medium", 3}}));
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM quotas").rows[0][0]), 1);
}

TEST_F(ServiceTest, DeleteTenantAndClassRefuseWhileInUse) {
  Start({MigA100("m0", 1)});
  PutClass(MigClass("big", "7g"));
  TenantSpec spec;
  spec.name = "team-a";
  spec.max_slices = {{"big", 5}};
  const Caller a = AddTenant(spec);
  const Caller b = AddTenant("team-b");
  const Lease held = Grant(a, ClassRequest("big", "hold"));
  const QueueEntry waiting = Enqueue(b, ClassRequest("big", "wait"));

  EXPECT_EQ(service_->DeleteTenant(admin_, "team-a").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(service_->DeleteClass(admin_, "big").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(service_->DeleteTenant(admin_, "nobody").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(service_->DeleteClass(admin_, "nothing").code(), absl::StatusCode::kNotFound);

  // Deleting team-b drops its queue entry and its users.
  ASSERT_TRUE(service_->DeleteTenant(admin_, "team-b").ok());
  EXPECT_THAT(Queued(), IsEmpty());
  EXPECT_EQ(service_->Authenticate(tokens_.at("team-b-user")).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(store::AsText(Sql("SELECT state FROM queue WHERE id = ?", {waiting.id}).rows[0][0]),
            "cancelled");

  ASSERT_TRUE(service_->Release(a, held.id).ok());
  EXPECT_THAT(Active(), IsEmpty());  // nothing was granted to the deleted tenant
  ASSERT_TRUE(service_->DeleteClass(admin_, "big").ok());
  EXPECT_FALSE(FindClass("big").has_value());
  ASSERT_THAT(AllTenants(), SizeIs(1));
  EXPECT_TRUE(AllTenants()[0].max_slices.empty());  // the quota went with the class
  ASSERT_TRUE(service_->DeleteTenant(admin_, "team-a").ok());
  EXPECT_THAT(AllTenants(), IsEmpty());
  EXPECT_THAT(Actions(AuditAll()), HasSubstr("tenant.delete"));
  EXPECT_THAT(Actions(AuditAll()), HasSubstr("class.delete"));
}

// ---- acquire

TEST_F(ServiceTest, GrantOfSmallGivesAMigSliceForTheClassMaximum) {
  Start({MigA100("m0", 2)});
  const Caller a = AddTenant("team-a");
  const std::int64_t now = clock_.now();
  AcquireResult result = Acquire(a, ClassRequest("small", "notebook"));
  ASSERT_EQ(result.outcome, Outcome::kGranted) << result.reason;
  const Lease& lease = result.lease;
  EXPECT_GT(lease.id, 0);
  EXPECT_EQ(lease.tenant, "team-a");
  EXPECT_EQ(lease.user, "team-a-user");
  EXPECT_EQ(lease.class_name, "small");
  EXPECT_EQ(lease.purpose, "notebook");
  EXPECT_EQ(lease.node, "m0");
  EXPECT_EQ(lease.state, "active");
  EXPECT_EQ(lease.granted_at, now);
  EXPECT_EQ(lease.expires_at, now + kDefaultMaxLease);
  EXPECT_DOUBLE_EQ(lease.memory_gib, ProfileGib("A100-80GB", "1g.10gb"));
  ASSERT_THAT(lease.claims, SizeIs(1));
  ASSERT_THAT(lease.devices, SizeIs(1));
  const place::GpuClaim& claim = lease.claims[0];
  EXPECT_TRUE(claim.gpu == 0 || claim.gpu == 1) << claim.gpu;
  EXPECT_EQ(ProfileName("A100-80GB", claim.mig_profile), "1g.10gb");
  EXPECT_GE(claim.mig_start, 0);
  EXPECT_EQ(lease.devices[0], absl::StrCat("GPU ", claim.gpu, " MIG 1g.10gb@", claim.mig_start));
  EXPECT_THAT(lease.devices[0], ::testing::StartsWith("GPU "));

  // It is listed, readable by id, and in the store.
  const std::vector<Lease> mine = LeasesOf(a);
  ASSERT_THAT(mine, SizeIs(1));
  EXPECT_EQ(mine[0].id, lease.id);
  absl::StatusOr<Lease> got = service_->GetLease(a, lease.id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->devices, lease.devices);
  const store::Result row =
      Sql("SELECT state, node, expires_at, purpose FROM leases WHERE id = ?", {lease.id});
  ASSERT_EQ(row.rows.size(), 1u);
  EXPECT_EQ(store::AsText(row.rows[0][0]), "active");
  EXPECT_EQ(store::AsText(row.rows[0][1]), "m0");
  EXPECT_EQ(store::AsInt(row.rows[0][2]), lease.expires_at);
  EXPECT_EQ(store::AsText(row.rows[0][3]), "notebook");
}

TEST_F(ServiceTest, AcquireChecksItsRequest) {
  Start({MigA100("m0", 2)});
  const Caller a = AddTenant("team-a");
  const size_t audit_before = AuditAll().size();
  EXPECT_EQ(service_->Acquire(a, ClassRequest("small", "")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->Acquire(a, ClassRequest("small", std::string(2000, 'p'))).status().code(),
            absl::StatusCode::kInvalidArgument);
  AcquireRequest two = ClassRequest("small", "two kinds");
  two.profile = "3g";
  EXPECT_EQ(service_->Acquire(a, two).status().code(), absl::StatusCode::kInvalidArgument);
  AcquireRequest none;
  none.purpose = "nothing";
  EXPECT_EQ(service_->Acquire(a, none).status().code(), absl::StatusCode::kInvalidArgument);
  AcquireRequest negative_ttl = ClassRequest("small", "ttl");
  negative_ttl.ttl_s = -1;
  EXPECT_EQ(service_->Acquire(a, negative_ttl).status().code(), absl::StatusCode::kInvalidArgument);
  AcquireRequest share_over;
  share_over.share_milli = 1200;
  share_over.purpose = "too much";
  EXPECT_EQ(service_->Acquire(a, share_over).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->Acquire(a, ClassRequest("no-such-class", "x")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(Active(), IsEmpty());
  EXPECT_EQ(AuditAll().size(), audit_before);
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM leases").rows[0][0]), 0);
}

TEST_F(ServiceTest, TtlAboveTheClassMaximumIsRefusedAndAShorterOneIsKept) {
  Start({MigA100("m0", 2)});
  const Caller a = AddTenant("team-a");
  AcquireRequest too_long = ClassRequest("small", "long");
  too_long.ttl_s = kDefaultMaxLease + 1;
  AcquireResult refused = Acquire(a, too_long);
  EXPECT_EQ(refused.outcome, Outcome::kRefused);
  EXPECT_THAT(refused.reason, HasSubstr("maximum"));
  AcquireRequest short_one = ClassRequest("small", "short");
  short_one.ttl_s = 600;
  const Lease lease = Grant(a, short_one);
  EXPECT_EQ(lease.expires_at, clock_.now() + 600);
}

TEST_F(ServiceTest, FullGpuOnlyForTenantsAllowedToTakeThem) {
  Start({MigA100("m0", 2)});
  const Caller a = AddTenant("team-a");
  AcquireResult refused = Acquire(a, ClassRequest("full", "big training"));
  EXPECT_EQ(refused.outcome, Outcome::kRefused);
  EXPECT_THAT(refused.reason, HasSubstr("full"));
  EXPECT_THAT(Active(), IsEmpty());

  TenantSpec spec;
  spec.name = "team-b";
  spec.may_take_full = true;
  const Caller b = AddTenant(spec);
  const Lease lease = Grant(b, ClassRequest("full", "big training"));
  ASSERT_THAT(lease.claims, SizeIs(1));
  EXPECT_TRUE(lease.claims[0].whole);
  EXPECT_EQ(lease.devices, std::vector<std::string>{absl::StrCat("GPU ", lease.claims[0].gpu)});
  EXPECT_DOUBLE_EQ(lease.memory_gib,
                   static_cast<double>(gpuslice::testing::Model("A100-80GB").memory_mib) / 1024.0);
  // The other GPU too, then no more.
  Grant(b, ClassRequest("full", "second"));
  AcquireResult third = Acquire(b, ClassRequest("full", "third", false));
  EXPECT_EQ(third.outcome, Outcome::kRefused);
  EXPECT_FALSE(third.reason.empty());
  EXPECT_EQ(Overcommit(nodes_, Active()), "");
}

TEST_F(ServiceTest, PerClassSliceQuota) {
  Start({MigA100("m0", 2)});
  TenantSpec spec;
  spec.name = "team-a";
  spec.max_slices = {{"small", 2}};
  const Caller a = AddTenant(spec);
  const Lease first = Grant(a, ClassRequest("small", "one"));
  Grant(a, ClassRequest("small", "two"));
  AcquireResult third = Acquire(a, ClassRequest("small", "three"));  // wait=true: still refused
  EXPECT_EQ(third.outcome, Outcome::kRefused);
  EXPECT_THAT(third.reason, HasSubstr("over quota"));
  EXPECT_THAT(Queued(), IsEmpty());
  // With slice quotas, a class without one is not the tenant's to take (wave 1 let it through
  // unlimited), nor is the same slice asked for by profile.
  AcquireResult other = Acquire(a, ClassRequest("medium", "other class"));
  EXPECT_EQ(other.outcome, Outcome::kRefused);
  EXPECT_THAT(other.reason, HasSubstr("only for the classes small"));
  AcquireRequest by_profile;
  by_profile.profile = "1g.10gb";
  by_profile.purpose = "same slice, other name";
  EXPECT_EQ(Acquire(a, by_profile).outcome, Outcome::kRefused);
  // Another tenant is not limited by team-a's quota.
  const Caller b = AddTenant("team-b");
  Grant(b, ClassRequest("small", "b"));
  Grant(b, ClassRequest("small", "b"));
  Grant(b, ClassRequest("small", "b"));
  // Releasing one makes room within the quota.
  ASSERT_TRUE(service_->Release(a, first.id).ok());
  Grant(a, ClassRequest("small", "three again"));
  int held = 0;
  for (const Lease& lease : LeasesOf(a)) held += lease.class_name == "small" ? 1 : 0;
  EXPECT_EQ(held, 2);
}

TEST_F(ServiceTest, MaxGibQuota) {
  Start({MigA100("m0", 2)});
  const double small_gib = ProfileGib("A100-80GB", "1g.10gb");
  TenantSpec spec;
  spec.name = "team-a";
  spec.max_gib = small_gib * 2.5;
  const Caller a = AddTenant(spec);
  Grant(a, ClassRequest("small", "one"));
  Grant(a, ClassRequest("small", "two"));
  AcquireResult third = Acquire(a, ClassRequest("small", "three"));
  EXPECT_EQ(third.outcome, Outcome::kRefused);
  EXPECT_THAT(third.reason, HasSubstr("over quota"));
  EXPECT_THAT(third.reason, HasSubstr("GiB"));
  // A bigger slice does not fit the remaining half slice either.
  EXPECT_EQ(Acquire(a, ClassRequest("medium", "bigger")).outcome, Outcome::kRefused);
  EXPECT_THAT(Active(), SizeIs(2));
  // Exactly at the limit is allowed.
  spec.max_gib = small_gib * 3;
  ASSERT_TRUE(service_->PutTenant(admin_, spec).ok());
  Grant(a, ClassRequest("small", "three at the limit"));
  double held = 0;
  for (const Lease& lease : Active()) held += lease.memory_gib;
  EXPECT_LE(held, spec.max_gib + 1e-9);
}

TEST_F(ServiceTest, ProfileRequestOnMigGpus) {
  Start({MigA100("m0", 1)});
  const Caller a = AddTenant("team-a");
  AcquireRequest profile;
  profile.profile = "3g";
  profile.purpose = "profile";
  const Lease mig = Grant(a, profile);
  EXPECT_EQ(mig.class_name, "profile:3g");
  EXPECT_EQ(mig.node, "m0");
  ASSERT_THAT(mig.devices, SizeIs(1));
  EXPECT_THAT(mig.devices[0], HasSubstr(" MIG 3g.40gb@"));
  EXPECT_DOUBLE_EQ(mig.memory_gib, ProfileGib("A100-80GB", "3g.40gb"));
  EXPECT_EQ(mig.expires_at, clock_.now() + kDefaultMaxLease);
  AcquireRequest full_name;
  full_name.profile = "1g.10gb";
  full_name.purpose = "exact name";
  const Lease exact = Grant(a, full_name);
  EXPECT_EQ(exact.class_name, "profile:1g.10gb");
  EXPECT_EQ(Overcommit(nodes_, Active()), "");
}

TEST_F(ServiceTest, ShareRequestOnSharedGpus) {
  Start({SharedGpus("s0", 2, 24576)});
  const Caller a = AddTenant("team-a");
  AcquireRequest share;
  share.share_milli = 250;
  share.vram_mib = 6144;
  share.purpose = "share";
  const Lease shared = Grant(a, share);
  EXPECT_EQ(shared.class_name, "share");
  EXPECT_EQ(shared.node, "s0");
  ASSERT_THAT(shared.claims, SizeIs(1));
  EXPECT_EQ(shared.claims[0].milli, 250);
  EXPECT_EQ(shared.claims[0].vram_mib, 6144);
  EXPECT_EQ(shared.devices, std::vector<std::string>{absl::StrCat("GPU ", shared.claims[0].gpu,
                                                                  " share 250m 6144 MiB")});
  EXPECT_DOUBLE_EQ(shared.memory_gib, 6.0);

  // A compute-only share is counted as its fraction of the GPU's memory.
  AcquireRequest compute_only;
  compute_only.share_milli = 500;
  compute_only.purpose = "compute";
  AcquireResult half = Acquire(a, compute_only);
  ASSERT_EQ(half.outcome, Outcome::kGranted) << half.reason;
  EXPECT_DOUBLE_EQ(half.lease.memory_gib, 12.0);
  EXPECT_EQ(Overcommit(nodes_, Active()), "");
}

// A mistyped class or profile is NotFound with the closest names, never queued.
TEST_F(ServiceTest, AnUnknownClassOrProfileSuggestsTheClosest) {
  Start({MigA100("m0", 1)});
  const Caller a = AddTenant("team-a");
  absl::StatusOr<AcquireResult> klass = service_->Acquire(a, ClassRequest("smal", "typo"));
  ASSERT_FALSE(klass.ok());
  EXPECT_EQ(klass.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(klass.status().message(), HasSubstr("class 'smal' does not exist"));
  EXPECT_THAT(klass.status().message(), HasSubstr("did you mean 'small'?"));
  AcquireRequest profile;
  profile.profile = "3g.40g";
  profile.purpose = "typo";
  absl::StatusOr<AcquireResult> typo = service_->Acquire(a, profile);
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(typo.status().message(), HasSubstr("profile '3g.40g' is on no GPU of this fleet"));
  EXPECT_THAT(typo.status().message(), HasSubstr("'3g.40gb'"));
  // A profile of another model is named as missing from this fleet, with no wild guess.
  profile.profile = "1g.18gb";
  absl::StatusOr<AcquireResult> other = service_->Acquire(a, profile);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("is on no GPU of this fleet"));
  EXPECT_THAT(Queued(), IsEmpty());
}

TEST_F(ServiceTest, ClassNoNodeCouldEverHoldIsRefusedNotQueued) {
  Start({MigA100("m0", 1)});
  ClassSpec hopper;
  hopper.name = "hopper";
  hopper.mig = {{"H100-80GB", "1g"}};
  PutClass(hopper);
  const Caller a = AddTenant("team-a");
  AcquireResult result = Acquire(a, ClassRequest("hopper", "wrong fleet"));
  EXPECT_EQ(result.outcome, Outcome::kRefused);
  EXPECT_THAT(result.reason, HasSubstr("never satisfiable"));
  EXPECT_THAT(Queued(), IsEmpty());
}

TEST_F(ServiceTest, AdminsCannotAcquire) {
  Start({MigA100("m0", 1)});
  EXPECT_EQ(service_->Acquire(admin_, ClassRequest("small", "admin")).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(Active(), IsEmpty());
}

TEST_F(ServiceTest, TenantsSeeAndChangeOnlyTheirOwnLeases) {
  Start({MigA100("m0", 1)});
  PutClass(MigClass("big", "7g"));
  const Caller a = AddTenant("team-a");
  const Caller b = AddTenant("team-b");
  const Lease lease = Grant(a, ClassRequest("big", "a's work"));
  const QueueEntry queued = Enqueue(a, ClassRequest("big", "a's next"));

  EXPECT_THAT(LeasesOf(b), IsEmpty());
  EXPECT_THAT(LeasesOf(b, false), IsEmpty());
  EXPECT_EQ(service_->GetLease(b, lease.id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(service_->Renew(b, lease.id, 60).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(service_->Release(b, lease.id).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(QueueOf(b), IsEmpty());
  EXPECT_EQ(service_->CancelQueued(b, queued.id).code(), absl::StatusCode::kNotFound);
  AuditQuery of_a;
  of_a.tenant = "team-a";
  EXPECT_EQ(service_->Audit(b, of_a).status().code(), absl::StatusCode::kPermissionDenied);
  absl::StatusOr<std::vector<AuditEvent>> own = service_->Audit(b, AuditQuery{});
  ASSERT_TRUE(own.ok()) << own.status();
  for (const AuditEvent& event : *own) EXPECT_EQ(event.tenant, "team-b") << event.action;

  // Nothing changed for team-a.
  absl::StatusOr<Lease> still = service_->GetLease(a, lease.id);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->state, "active");
  EXPECT_EQ(still->expires_at, lease.expires_at);
  EXPECT_THAT(QueueOf(a), SizeIs(1));
  absl::StatusOr<std::vector<AuditEvent>> a_audit = service_->Audit(a, AuditQuery{});
  ASSERT_TRUE(a_audit.ok());
  EXPECT_THAT(Actions(*a_audit), HasSubstr("grant"));
  for (const AuditEvent& event : *a_audit) EXPECT_EQ(event.tenant, "team-a");
  // The admin sees and may release it.
  ASSERT_TRUE(service_->GetLease(admin_, lease.id).ok());
  EXPECT_TRUE(service_->Release(admin_, lease.id).ok());
}

// ---- the queue

TEST_F(ServiceTest, QueueWhenFullAndGrantTheHeadOnRelease) {
  Start({MigA100("m0", 1)});
  PutClass(MigClass("big", "7g"));
  const Caller a = AddTenant("team-a");
  const Caller b = AddTenant("team-b");
  const Lease fill = Grant(a, ClassRequest("big", "fill"));

  // No queue yet and no room: wait=false is refused with the engine's reason.
  AcquireResult no_wait = Acquire(b, ClassRequest("big", "now or never", false));
  EXPECT_EQ(no_wait.outcome, Outcome::kRefused);
  EXPECT_FALSE(no_wait.reason.empty());

  clock_.Advance(5);
  AcquireResult first = Acquire(a, ClassRequest("big", "q1"));
  ASSERT_EQ(first.outcome, Outcome::kQueued) << first.reason;
  EXPECT_EQ(first.queued.position, 1);
  EXPECT_EQ(first.queued.tenant, "team-a");
  EXPECT_EQ(first.queued.purpose, "q1");
  EXPECT_EQ(first.queued.class_name, "big");
  EXPECT_EQ(first.queued.enqueued_at, clock_.now());
  EXPECT_FALSE(first.reason.empty());
  const QueueEntry second = Enqueue(b, ClassRequest("big", "q2"));
  EXPECT_EQ(second.position, 2);
  EXPECT_NE(second.id, first.queued.id);
  AcquireResult behind = Acquire(b, ClassRequest("big", "no wait", false));
  EXPECT_EQ(behind.outcome, Outcome::kRefused);
  EXPECT_FALSE(behind.reason.empty());

  std::vector<QueueEntry> queue = Queued();
  ASSERT_THAT(queue, SizeIs(2));
  EXPECT_EQ(queue[0].id, first.queued.id);
  EXPECT_EQ(queue[0].position, 1);
  EXPECT_EQ(queue[1].id, second.id);
  EXPECT_EQ(queue[1].position, 2);
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM queue WHERE state = 'queued'").rows[0][0]), 2);

  clock_.Advance(100);
  ASSERT_TRUE(service_->Release(a, fill.id).ok());
  std::vector<Lease> active = Active();
  ASSERT_THAT(active, SizeIs(1));
  EXPECT_EQ(active[0].purpose, "q1");
  EXPECT_EQ(active[0].tenant, "team-a");
  EXPECT_EQ(active[0].user, "team-a-user");
  EXPECT_EQ(active[0].class_name, "big");
  EXPECT_EQ(active[0].granted_at, clock_.now());
  EXPECT_EQ(active[0].expires_at, clock_.now() + kDefaultMaxLease);
  queue = Queued();
  ASSERT_THAT(queue, SizeIs(1));
  EXPECT_EQ(queue[0].id, second.id);
  EXPECT_EQ(queue[0].position, 1);
  EXPECT_EQ(
      store::AsText(Sql("SELECT state FROM queue WHERE id = ?", {first.queued.id}).rows[0][0]),
      "granted");

  ASSERT_TRUE(service_->Release(a, active[0].id).ok());
  active = Active();
  ASSERT_THAT(active, SizeIs(1));
  EXPECT_EQ(active[0].purpose, "q2");
  EXPECT_EQ(active[0].tenant, "team-b");
  EXPECT_THAT(Queued(), IsEmpty());
  EXPECT_EQ(Overcommit(nodes_, Active()), "");
}

TEST_F(ServiceTest, HigherPriorityFirstThenFifo) {
  Start({MigA100("m0", 1)});
  PutClass(MigClass("big", "7g"));
  const Caller low = AddTenant("low");
  TenantSpec high_spec;
  high_spec.name = "high";
  high_spec.priority = 5;
  const Caller high = AddTenant(high_spec);
  const Lease fill = Grant(low, ClassRequest("big", "fill"));
  const QueueEntry low1 = Enqueue(low, ClassRequest("big", "low1"));
  EXPECT_EQ(low1.position, 1);
  const QueueEntry high1 = Enqueue(high, ClassRequest("big", "high1"));
  EXPECT_EQ(high1.position, 1);  // ahead of low1
  const QueueEntry low2 = Enqueue(low, ClassRequest("big", "low2"));
  EXPECT_EQ(low2.position, 3);
  const QueueEntry high2 = Enqueue(high, ClassRequest("big", "high2"));
  EXPECT_EQ(high2.position, 2);

  std::vector<std::string> order;
  for (const QueueEntry& entry : Queued()) order.push_back(entry.purpose);
  EXPECT_THAT(order, ElementsAre("high1", "high2", "low1", "low2"));
  std::vector<int> positions;
  for (const QueueEntry& entry : Queued()) positions.push_back(entry.position);
  EXPECT_THAT(positions, ElementsAre(1, 2, 3, 4));

  std::vector<std::string> granted;
  std::int64_t holding = fill.id;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(service_->Release(admin_, holding).ok());
    std::vector<Lease> active = Active();
    ASSERT_THAT(active, SizeIs(1));
    granted.push_back(active[0].purpose);
    holding = active[0].id;
  }
  EXPECT_THAT(granted, ElementsAre("high1", "high2", "low1", "low2"));
}

// Regression (Acquire, queue entries that cannot be served; fixed): input: one A100-80GB node with
// 2 GPUs and a class "big" (7g); team-b fills both GPUs; team-a (max_slices big=1) queues q1 and
// q2; team-b releases both leases, so q1 is granted and q2 stays queued because team-a is at its
// quota, and one GPU is free. Then team-c asks for "big" with wait=false. Expected: granted (there
// is room now and the only request ahead cannot take it: GrantQueued itself skips it); before the
// fix: refused with "requests of this class are queued ahead" (and with wait=true it is queued
// behind q2 while the GPU stays idle until the next Tick), because Acquire treats any queued entry
// of the class as ahead of it.
TEST_F(ServiceTest, AQueueEntryBlockedByItsOwnQuotaDoesNotBlockOthers) {
  Start({MigA100("m0", 2)});
  PutClass(MigClass("big", "7g"));
  TenantSpec a_spec = Tenant("team-a");
  a_spec.max_slices = {{"big", 1}};
  const Caller a = AddTenant(a_spec);
  const Caller b = AddTenant("team-b");
  const Caller c = AddTenant("team-c");
  const Lease b1 = Grant(b, ClassRequest("big", "b1"));
  const Lease b2 = Grant(b, ClassRequest("big", "b2"));
  Enqueue(a, ClassRequest("big", "q1"));
  Enqueue(a, ClassRequest("big", "q2"));
  ASSERT_TRUE(service_->Release(b, b1.id).ok());
  ASSERT_TRUE(service_->Release(b, b2.id).ok());
  std::vector<Lease> active = Active();
  ASSERT_THAT(active, SizeIs(1));
  EXPECT_EQ(active[0].purpose, "q1");
  ASSERT_THAT(Queued(), SizeIs(1));  // q2: team-a is at its quota

  AcquireResult result = Acquire(c, ClassRequest("big", "c", false));
  EXPECT_EQ(result.outcome, Outcome::kGranted) << result.reason;
  EXPECT_EQ(Overcommit(nodes_, Active()), "");
}

TEST_F(ServiceTest, PositionsAreCountedPerClass) {
  Start({MigA100("m0", 1)});
  PutClass(MigClass("big", "7g"));
  const Caller a = AddTenant("team-a");
  Grant(a, ClassRequest("big", "fill"));
  const QueueEntry big = Enqueue(a, ClassRequest("big", "big"));
  const QueueEntry small = Enqueue(a, ClassRequest("small", "small"));
  const QueueEntry small2 = Enqueue(a, ClassRequest("small", "small2"));
  EXPECT_EQ(big.position, 1);
  EXPECT_EQ(small.position, 1);
  EXPECT_EQ(small2.position, 2);
}

TEST_F(ServiceTest, CancelQueuedRemovesTheEntry) {
  Start({MigA100("m0", 1)});
  PutClass(MigClass("big", "7g"));
  const Caller a = AddTenant("team-a");
  const Caller b = AddTenant("team-b");
  const Lease fill = Grant(a, ClassRequest("big", "fill"));
  const QueueEntry q1 = Enqueue(a, ClassRequest("big", "q1"));
  const QueueEntry q2 = Enqueue(b, ClassRequest("big", "q2"));
  const QueueEntry q3 = Enqueue(a, ClassRequest("big", "q3"));

  EXPECT_EQ(service_->CancelQueued(b, q1.id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(service_->CancelQueued(a, 9999).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(service_->CancelQueued(a, q1.id).ok());
  EXPECT_EQ(service_->CancelQueued(a, q1.id).code(), absl::StatusCode::kNotFound);
  std::vector<QueueEntry> queue = Queued();
  ASSERT_THAT(queue, SizeIs(2));
  EXPECT_EQ(queue[0].id, q2.id);
  EXPECT_EQ(queue[0].position, 1);
  EXPECT_EQ(queue[1].id, q3.id);
  EXPECT_EQ(queue[1].position, 2);
  EXPECT_EQ(store::AsText(Sql("SELECT state FROM queue WHERE id = ?", {q1.id}).rows[0][0]),
            "cancelled");
  const std::vector<AuditEvent> cancels = AuditOf("cancel");
  ASSERT_THAT(cancels, SizeIs(1));
  EXPECT_EQ(cancels[0].subject, absl::StrCat("queue ", q1.id));
  EXPECT_EQ(cancels[0].actor, "team-a-user");
  EXPECT_EQ(cancels[0].purpose, "q1");

  // The admin may cancel anyone's entry.
  ASSERT_TRUE(service_->CancelQueued(admin_, q3.id).ok());
  ASSERT_TRUE(service_->Release(a, fill.id).ok());
  const std::vector<Lease> active = Active();
  ASSERT_THAT(active, SizeIs(1));
  EXPECT_EQ(active[0].purpose, "q2");
  EXPECT_THAT(Queued(), IsEmpty());
}

// ---- renew, expiry and idle reclaim

TEST_F(ServiceTest, RenewExtendsWithinTheClassMaximum) {
  Start({MigA100("m0", 1)});
  ClassSpec short_class = MigClass("short", "1g");
  short_class.max_lease_s = 600;
  PutClass(short_class);
  const Caller a = AddTenant("team-a");
  const Lease lease = Grant(a, ClassRequest("short", "work"));
  EXPECT_EQ(lease.expires_at, clock_.now() + 600);

  clock_.Advance(100);
  absl::StatusOr<Lease> renewed = service_->Renew(a, lease.id, 300);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(renewed->expires_at, clock_.now() + 300);
  EXPECT_EQ(LeaseOf(a, lease.id).expires_at, clock_.now() + 300);
  EXPECT_EQ(store::AsInt(Sql("SELECT expires_at FROM leases WHERE id = ?", {lease.id}).rows[0][0]),
            clock_.now() + 300);

  clock_.Advance(50);
  renewed = service_->Renew(a, lease.id, 0);  // 0: the class's maximum
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(renewed->expires_at, clock_.now() + 600);
  const std::int64_t expires = renewed->expires_at;

  EXPECT_EQ(service_->Renew(a, lease.id, 601).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->Renew(a, lease.id, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LeaseOf(a, lease.id).expires_at, expires);
  EXPECT_THAT(AuditOf("renew"), SizeIs(2));

  ASSERT_TRUE(service_->Release(a, lease.id).ok());
  EXPECT_EQ(service_->Renew(a, lease.id, 60).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ServiceTest, TickExpiresLeasesAndGrantsTheQueue) {
  Start({MigA100("m0", 1)});
  PutClass(MigClass("big", "7g"));
  const Caller a = AddTenant("team-a");
  const Caller b = AddTenant("team-b");
  AcquireRequest request = ClassRequest("big", "short job");
  request.ttl_s = 60;
  const Lease lease = Grant(a, request);
  const QueueEntry waiting = Enqueue(b, ClassRequest("big", "next job"));

  clock_.Advance(59);
  absl::StatusOr<int> ended = service_->Tick();
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(*ended, 0);
  EXPECT_EQ(LeaseOf(a, lease.id).state, "active");
  EXPECT_THAT(Queued(), SizeIs(1));

  clock_.Advance(1);  // now == expires_at
  ended = service_->Tick();
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(*ended, 1);
  absl::StatusOr<Lease> expired = service_->GetLease(a, lease.id);
  ASSERT_TRUE(expired.ok());
  EXPECT_EQ(expired->state, "expired");
  EXPECT_EQ(expired->ended_at, clock_.now());
  EXPECT_EQ(store::AsText(Sql("SELECT state FROM leases WHERE id = ?", {lease.id}).rows[0][0]),
            "expired");
  const std::vector<Lease> active = Active();
  ASSERT_THAT(active, SizeIs(1));
  EXPECT_EQ(active[0].purpose, "next job");
  EXPECT_EQ(active[0].tenant, "team-b");
  EXPECT_THAT(Queued(), IsEmpty());
  (void)waiting;
  const std::vector<AuditEvent> expiries = AuditOf("expire");
  ASSERT_THAT(expiries, SizeIs(1));
  EXPECT_EQ(expiries[0].subject, absl::StrCat("lease ", lease.id));
  EXPECT_EQ(expiries[0].tenant, "team-a");
  EXPECT_EQ(expiries[0].purpose, "short job");
  EXPECT_EQ(expiries[0].actor, "gpuslice");
}

TEST_F(ServiceTest, IdleLeasesAreReclaimedOnlyWhenKnownIdleLongEnough) {
  Start({MigA100("m0", 1)});
  ClassSpec idle = MigClass("idle", "1g");
  idle.idle_timeout_s = 300;
  PutClass(idle);
  PutClass(MigClass("never", "1g"));  // idle_timeout_s 0
  const Caller a = AddTenant("team-a");
  const Lease reclaimable = Grant(a, ClassRequest("idle", "maybe idle"));
  const Lease kept = Grant(a, ClassRequest("never", "kept"));

  std::map<std::int64_t, std::int64_t> idle_for = {{reclaimable.id, 299}, {kept.id, 1000000}};
  auto probe = [&](const Lease& lease) { return idle_for.at(lease.id); };
  absl::StatusOr<int> ended = service_->Tick(probe);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(*ended, 0);
  idle_for[reclaimable.id] = -1;  // unknown: never reclaimed
  ended = service_->Tick(probe);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(*ended, 0);
  ended = service_->Tick();  // no probe
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(*ended, 0);
  EXPECT_THAT(Active(), SizeIs(2));

  idle_for[reclaimable.id] = 300;
  ended = service_->Tick(probe);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(*ended, 1);
  EXPECT_EQ(LeaseOf(a, reclaimable.id).state, "reclaimed");
  EXPECT_EQ(LeaseOf(a, kept.id).state, "active");
  const std::vector<AuditEvent> reclaims = AuditOf("reclaim");
  ASSERT_THAT(reclaims, SizeIs(1));
  EXPECT_EQ(reclaims[0].subject, absl::StrCat("lease ", reclaimable.id));
  EXPECT_EQ(reclaims[0].purpose, "maybe idle");
}

// ---- durability

TEST_F(ServiceTest, ReopeningRestoresEverythingAndNeverHandsOutALeasedSlice) {
  const std::vector<place::NodeSpec> nodes = {MigA100("m0", 1), MigA100("m1", 1)};
  Start(nodes);
  ClassSpec big = MigClass("big", "7g");
  big.max_lease_s = 7200;
  big.idle_timeout_s = 900;
  PutClass(big);
  TenantSpec a_spec;
  a_spec.name = "team-a";
  a_spec.priority = 2;
  a_spec.max_slices = {{"small", 3}};
  a_spec.max_gib = 100;
  const Caller a = AddTenant(a_spec);
  TenantSpec b_spec;
  b_spec.name = "team-b";
  b_spec.may_take_full = true;
  b_spec.priority = 1;
  const Caller b = AddTenant(b_spec);

  const Lease big_lease = Grant(b, ClassRequest("big", "train"));  // fills one node
  clock_.Advance(10);
  const Lease small1 = Grant(a, ClassRequest("small", "nb1"));
  const Lease small2 = Grant(a, ClassRequest("small", "nb2"));
  EXPECT_NE(small1.node, big_lease.node);
  EXPECT_EQ(small2.node, small1.node);
  clock_.Advance(10);
  const QueueEntry waiting = Enqueue(b, ClassRequest("big", "train2"));
  ASSERT_TRUE(service_->Release(a, small1.id).ok());
  clock_.Advance(10);
  ASSERT_TRUE(service_->Renew(b, big_lease.id, 3600).ok());

  const std::vector<Lease> active_before = Active();
  const std::vector<QueueEntry> queue_before = Queued();
  const std::vector<TenantSpec> tenants_before = AllTenants();
  const std::vector<ClassSpec> classes_before = service_->Classes();
  const std::vector<AuditEvent> audit_before = AuditAll();
  ASSERT_THAT(active_before, SizeIs(2));
  ASSERT_THAT(queue_before, SizeIs(1));

  clock_.Advance(10);
  Reopen(nodes);

  const std::vector<Lease> active_after = Active();
  ASSERT_EQ(active_after.size(), active_before.size());
  for (size_t i = 0; i < active_after.size(); ++i) {
    const Lease& x = active_before[i];
    const Lease& y = active_after[i];
    EXPECT_EQ(y.id, x.id);
    EXPECT_EQ(y.tenant, x.tenant);
    EXPECT_EQ(y.user, x.user);
    EXPECT_EQ(y.class_name, x.class_name);
    EXPECT_EQ(y.purpose, x.purpose);
    EXPECT_EQ(y.node, x.node);
    EXPECT_EQ(y.devices, x.devices);
    EXPECT_DOUBLE_EQ(y.memory_gib, x.memory_gib);
    EXPECT_EQ(y.granted_at, x.granted_at);
    EXPECT_EQ(y.expires_at, x.expires_at);
    EXPECT_EQ(y.state, "active");
    ASSERT_EQ(y.claims.size(), x.claims.size());
    for (size_t c = 0; c < y.claims.size(); ++c) {
      EXPECT_EQ(y.claims[c].gpu, x.claims[c].gpu);
      EXPECT_EQ(y.claims[c].mig_profile, x.claims[c].mig_profile);
      EXPECT_EQ(y.claims[c].mig_start, x.claims[c].mig_start);
      EXPECT_EQ(y.claims[c].whole, x.claims[c].whole);
    }
  }
  const std::vector<QueueEntry> queue_after = Queued();
  ASSERT_THAT(queue_after, SizeIs(1));
  EXPECT_EQ(queue_after[0].id, waiting.id);
  EXPECT_EQ(queue_after[0].tenant, "team-b");
  EXPECT_EQ(queue_after[0].user, "team-b-user");
  EXPECT_EQ(queue_after[0].class_name, "big");
  EXPECT_EQ(queue_after[0].purpose, "train2");
  EXPECT_EQ(queue_after[0].priority, 1);
  EXPECT_EQ(queue_after[0].enqueued_at, queue_before[0].enqueued_at);
  EXPECT_EQ(queue_after[0].position, 1);

  const std::vector<TenantSpec> tenants_after = AllTenants();
  ASSERT_EQ(tenants_after.size(), tenants_before.size());
  for (size_t i = 0; i < tenants_after.size(); ++i) {
    EXPECT_EQ(tenants_after[i].name, tenants_before[i].name);
    EXPECT_EQ(tenants_after[i].may_take_full, tenants_before[i].may_take_full);
    EXPECT_EQ(tenants_after[i].priority, tenants_before[i].priority);
    EXPECT_EQ(tenants_after[i].max_slices, tenants_before[i].max_slices);
    EXPECT_DOUBLE_EQ(tenants_after[i].max_gib, tenants_before[i].max_gib);
  }
  const std::vector<ClassSpec> classes_after = service_->Classes();
  ASSERT_EQ(classes_after.size(), classes_before.size());
  for (size_t i = 0; i < classes_after.size(); ++i) {
    EXPECT_EQ(classes_after[i].name, classes_before[i].name);
    EXPECT_EQ(classes_after[i].mig, classes_before[i].mig);
    EXPECT_EQ(classes_after[i].full, classes_before[i].full);
    EXPECT_EQ(classes_after[i].share_milli, classes_before[i].share_milli);
    EXPECT_EQ(classes_after[i].max_lease_s, classes_before[i].max_lease_s);
    EXPECT_EQ(classes_after[i].idle_timeout_s, classes_before[i].idle_timeout_s);
  }
  const std::vector<AuditEvent> audit_after = AuditAll();
  ASSERT_EQ(audit_after.size(), audit_before.size());
  for (size_t i = 0; i < audit_after.size(); ++i) {
    EXPECT_EQ(audit_after[i].id, audit_before[i].id);
    EXPECT_EQ(audit_after[i].at, audit_before[i].at);
    EXPECT_EQ(audit_after[i].action, audit_before[i].action);
    EXPECT_EQ(audit_after[i].actor, audit_before[i].actor);
    EXPECT_EQ(audit_after[i].subject, audit_before[i].subject);
    EXPECT_EQ(audit_after[i].purpose, audit_before[i].purpose);
  }
  // Tokens still work; no second admin is bootstrapped.
  EXPECT_TRUE(service_->Authenticate(admin_token_).ok());
  absl::StatusOr<Caller> b_again = service_->Authenticate(tokens_.at("team-b-user"));
  ASSERT_TRUE(b_again.ok());
  EXPECT_EQ(b_again->tenant, "team-b");
  absl::StatusOr<std::optional<std::string>> bootstrap = service_->BootstrapAdmin("root2");
  ASSERT_TRUE(bootstrap.ok());
  EXPECT_FALSE(bootstrap->has_value());
  // Quotas still count the reloaded leases: team-a holds 1 of 3 small.
  Grant(a, ClassRequest("small", "a2"));
  Grant(a, ClassRequest("small", "a3"));
  EXPECT_THAT(Acquire(a, ClassRequest("small", "a4")).reason, HasSubstr("over quota"));

  // Fill what is left: no slice that is still leased is handed out again.
  const Caller c = AddTenant("team-c");
  const int more = FillWith(c, ClassRequest("small", ""));
  EXPECT_EQ(more, 7 - 3);  // one A100-80GB holds seven 1g.10gb; team-a has three, the other GPU
                           // is taken whole by 7g
  const std::vector<Lease> filled = Active();
  EXPECT_EQ(Overcommit(nodes_, filled), "");
  std::set<std::int64_t> ids;
  for (const Lease& lease : AllLeases()) EXPECT_TRUE(ids.insert(lease.id).second) << lease.id;

  // The reloaded queue still works: releasing the big lease grants train2.
  ASSERT_TRUE(service_->Release(b, big_lease.id).ok());
  bool train2 = false;
  for (const Lease& lease : Active()) train2 = train2 || lease.purpose == "train2";
  EXPECT_TRUE(train2);
  EXPECT_THAT(Queued(), IsEmpty());
  EXPECT_EQ(Overcommit(nodes_, Active()), "");
}

TEST_F(ServiceTest, ReopeningOnSharedGpusKeepsTheSharesAccounted) {
  const std::vector<place::NodeSpec> nodes = {SharedGpus("s0", 2, 24576)};
  Start(nodes);
  const Caller a = AddTenant("team-a");
  AcquireRequest share;
  share.share_milli = 300;
  share.vram_mib = 4096;
  share.purpose = "infer";
  Grant(a, share);
  Grant(a, share);
  Grant(a, share);
  Reopen(nodes);
  EXPECT_THAT(Active(), SizeIs(3));
  const int more = FillWith(a, share);
  EXPECT_EQ(more, 3);  // three 300m shares per GPU, two GPUs
  const std::vector<Lease> active = Active();
  EXPECT_THAT(active, SizeIs(6));
  EXPECT_EQ(Overcommit(nodes_, active), "");
  std::map<int, int> milli_per_gpu;
  for (const Lease& lease : active) {
    for (const place::GpuClaim& claim : lease.claims) milli_per_gpu[claim.gpu] += claim.milli;
  }
  for (const auto& [gpu, milli] : milli_per_gpu) EXPECT_LE(milli, 1000) << "GPU " << gpu;
}

TEST_F(ServiceTest, LeaseOnANodeGoneFromTheInventoryIsLostOnOpen) {
  Start({MigA100("m0", 1), MigA100("m1", 1)});
  PutClass(MigClass("big", "7g"));
  const Caller a = AddTenant("team-a");
  const Lease on_first = Grant(a, ClassRequest("big", "first"));
  const Lease on_second = Grant(a, ClassRequest("big", "second"));
  ASSERT_NE(on_first.node, on_second.node);
  const Lease& lost = on_first.node == "m1" ? on_first : on_second;
  const Lease& kept = on_first.node == "m1" ? on_second : on_first;

  clock_.Advance(30);
  Reopen({MigA100("m0", 1)});
  const std::vector<Lease> active = Active();
  ASSERT_THAT(active, SizeIs(1));
  EXPECT_EQ(active[0].id, kept.id);
  absl::StatusOr<Lease> gone = service_->GetLease(a, lost.id);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->state, "lost");
  EXPECT_EQ(gone->ended_at, clock_.now());
  const std::vector<AuditEvent> losses = AuditOf("lose");
  ASSERT_THAT(losses, SizeIs(1));
  EXPECT_EQ(losses[0].subject, absl::StrCat("lease ", lost.id));
  EXPECT_EQ(losses[0].tenant, "team-a");
  EXPECT_EQ(losses[0].purpose, lost.purpose);
  EXPECT_THAT(losses[0].detail, HasSubstr("m1"));

  // Reopening again does not lose it a second time, and the kept lease stays.
  Reopen({MigA100("m0", 1)});
  EXPECT_THAT(AuditOf("lose"), SizeIs(1));
  EXPECT_THAT(Active(), SizeIs(1));
}

TEST_F(ServiceTest, LeaseOnAGpuGoneFromTheInventoryIsLostOnOpen) {
  Start({MigA100("m0", 2)});
  const Caller a = AddTenant("team-a");
  TenantSpec b_spec;
  b_spec.name = "team-b";
  b_spec.may_take_full = true;
  const Caller b = AddTenant(b_spec);
  const Lease l0 = Grant(b, ClassRequest("full", "gpu a"));
  const Lease l1 = Grant(b, ClassRequest("full", "gpu b"));
  (void)a;
  const Lease& on_gpu1 = l0.claims[0].gpu == 1 ? l0 : l1;
  Reopen({MigA100("m0", 1)});
  absl::StatusOr<Lease> gone = service_->GetLease(admin_, on_gpu1.id);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->state, "lost");
  EXPECT_THAT(Active(), SizeIs(1));
  EXPECT_THAT(AuditOf("lose"), SizeIs(1));
}

// ---- audit

TEST_F(ServiceTest, EveryChangeIsAuditedWithActorTenantAndPurpose) {
  Start({MigA100("m0", 1)});
  ClassSpec big = MigClass("big", "7g");
  big.idle_timeout_s = 60;
  PutClass(big);
  TenantSpec spec;
  spec.name = "team-a";
  spec.max_slices = {{"small", 0}, {"big", 10}};
  const Caller a = AddTenant(spec, "alice");
  AcquireRequest short_big = ClassRequest("big", "p-grant");
  short_big.ttl_s = 10;
  const Lease first = Grant(a, short_big);        // grant
  Enqueue(a, ClassRequest("big", "p-queue"));     // queue
  Acquire(a, ClassRequest("small", "p-refuse"));  // refuse (quota 0)
  clock_.Advance(10);
  ASSERT_TRUE(service_->Tick().ok());  // expire + grant from the queue
  std::vector<Lease> active = Active();
  ASSERT_THAT(active, SizeIs(1));
  ASSERT_TRUE(service_->Tick([](const Lease&) { return std::int64_t{60}; }).ok());  // reclaim
  const Lease third = Grant(a, ClassRequest("big", "p-release"));
  ASSERT_TRUE(service_->Release(a, third.id).ok());  // release
  (void)first;

  const std::vector<AuditEvent> events = AuditAll();
  auto find = [&](const std::string& action, const std::string& purpose,
                  const std::string& tenant) -> const AuditEvent* {
    for (const AuditEvent& event : events) {
      if (event.action == action && event.purpose == purpose && event.tenant == tenant) {
        return &event;
      }
    }
    return nullptr;
  };
  struct Expected {
    std::string action, purpose, actor, tenant;
  };
  for (const Expected& e : std::vector<Expected>{
           {"class.put", "", "root", ""},
           {"tenant.put", "", "root", "team-a"},
           {"user.create", "", "root", "team-a"},
           {"grant", "p-grant", "alice", "team-a"},
           {"queue", "p-queue", "alice", "team-a"},
           {"refuse", "p-refuse", "alice", "team-a"},
           {"expire", "p-grant", "gpuslice", "team-a"},
           {"grant", "p-queue", "gpuslice", "team-a"},
           {"reclaim", "p-queue", "gpuslice", "team-a"},
           {"grant", "p-release", "alice", "team-a"},
           {"release", "p-release", "alice", "team-a"},
       }) {
    const AuditEvent* event = find(e.action, e.purpose, e.tenant);
    if (event == nullptr) {
      ADD_FAILURE() << "no '" << e.action << "' event with purpose '" << e.purpose << "' in "
                    << Actions(events);
      continue;
    }
    EXPECT_EQ(event->actor, e.actor) << e.action;
    EXPECT_GT(event->at, 0) << e.action;
    EXPECT_FALSE(event->detail.empty()) << e.action;
  }
  const AuditEvent* class_put = find("class.put", "", "");
  ASSERT_NE(class_put, nullptr);
  EXPECT_EQ(class_put->subject, "big");
  const AuditEvent* refusal = find("refuse", "p-refuse", "team-a");
  ASSERT_NE(refusal, nullptr);
  EXPECT_THAT(refusal->detail, HasSubstr("over quota"));
  // Ids increase with time.
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_GT(events[i].id, events[i - 1].id);
    EXPECT_GE(events[i].at, events[i - 1].at);
  }
  // A token never appears in the audit.
  for (const AuditEvent& event : events) {
    EXPECT_THAT(event.detail, ::testing::Not(HasSubstr(tokens_.at("alice"))));
  }
}

TEST_F(ServiceTest, AuditQueryFiltersBySinceTenantAndLimit) {
  Start({MigA100("m0", 1)});
  const std::int64_t t0 = clock_.now();
  const Caller a = AddTenant("team-a");
  const Caller b = AddTenant("team-b");
  clock_.Advance(100);
  const Lease lease = Grant(a, ClassRequest("small", "a work"));
  Grant(b, ClassRequest("small", "b work"));
  clock_.Advance(100);
  ASSERT_TRUE(service_->Release(a, lease.id).ok());

  AuditQuery since;
  since.since = t0 + 100;
  absl::StatusOr<std::vector<AuditEvent>> recent = service_->Audit(admin_, since);
  ASSERT_TRUE(recent.ok()) << recent.status();
  EXPECT_EQ(Actions(*recent), "grant grant release ");
  for (const AuditEvent& event : *recent) EXPECT_GE(event.at, t0 + 100);
  since.since = t0 + 101;
  absl::StatusOr<std::vector<AuditEvent>> later = service_->Audit(admin_, since);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(Actions(*later), "release ");

  // A limit keeps the newest events, oldest first.
  AuditQuery limited;
  limited.limit = 2;
  absl::StatusOr<std::vector<AuditEvent>> last_two = service_->Audit(admin_, limited);
  ASSERT_TRUE(last_two.ok());
  ASSERT_THAT(*last_two, SizeIs(2));
  const std::vector<AuditEvent> all = AuditAll();
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ((*last_two)[0].id, all[all.size() - 2].id);
  EXPECT_EQ((*last_two)[1].id, all[all.size() - 1].id);

  AuditQuery of_b;
  of_b.tenant = "team-b";
  absl::StatusOr<std::vector<AuditEvent>> b_events = service_->Audit(admin_, of_b);
  ASSERT_TRUE(b_events.ok());
  EXPECT_FALSE(b_events->empty());
  for (const AuditEvent& event : *b_events) EXPECT_EQ(event.tenant, "team-b");

  AuditQuery zero;
  zero.limit = 0;
  EXPECT_EQ(service_->Audit(admin_, zero).status().code(), absl::StatusCode::kInvalidArgument);
  AuditQuery too_many;
  too_many.limit = 100001;
  EXPECT_EQ(service_->Audit(a, too_many).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- failed commits

TEST_F(ServiceTest, AFailedCommitChangesNothing) {
  auto faults = std::make_shared<Faults>();
  Start({MigA100("m0", 1)}, faults);
  PutClass(MigClass("big", "7g"));
  const Caller a = AddTenant("team-a");
  const size_t audit_before = AuditAll().size();

  faults->fail_commits = 1;
  EXPECT_FALSE(service_->Acquire(a, ClassRequest("big", "lost grant")).ok());
  EXPECT_THAT(Active(), IsEmpty());
  EXPECT_EQ(AuditAll().size(), audit_before);
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM leases").rows[0][0]), 0);

  const Lease lease = Grant(a, ClassRequest("big", "grant"));  // the GPU was not kept
  EXPECT_EQ(lease.id, 1);
  faults->fail_commits = 1;
  EXPECT_FALSE(service_->Acquire(a, ClassRequest("big", "lost queue")).ok());
  EXPECT_THAT(Queued(), IsEmpty());

  faults->fail_commits = 1;
  EXPECT_FALSE(service_->Release(a, lease.id).ok());
  ASSERT_THAT(Active(), SizeIs(1));
  EXPECT_EQ(store::AsText(Sql("SELECT state FROM leases WHERE id = ?", {lease.id}).rows[0][0]),
            "active");

  faults->fail_commits = 1;
  EXPECT_FALSE(service_->Renew(a, lease.id, 60).ok());
  EXPECT_EQ(LeaseOf(a, lease.id).expires_at, lease.expires_at);

  TenantSpec changed;
  changed.name = "team-a";
  changed.priority = 9;
  faults->fail_commits = 1;
  EXPECT_FALSE(service_->PutTenant(admin_, changed).ok());
  EXPECT_EQ(AllTenants().at(0).priority, 0);
  faults->fail_commits = 1;
  ClassSpec changed_class = MigClass("big", "3g");
  EXPECT_FALSE(service_->PutClass(admin_, changed_class).ok());
  EXPECT_EQ(FindClass("big").value().mig.at("A100-80GB"), "7g");
  faults->fail_commits = 1;
  EXPECT_FALSE(service_->CreateUser(admin_, "ghost", "team-a", Role::kTenant).ok());
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM users WHERE name = 'ghost'").rows[0][0]), 0);

  // Everything works again afterwards.
  EXPECT_EQ(faults->fail_commits, 0);
  ASSERT_TRUE(service_->Release(a, lease.id).ok());
  EXPECT_THAT(Active(), IsEmpty());
  EXPECT_EQ(Grant(a, ClassRequest("big", "again")).id, 2);
}

// ---- group commit

// Holds the first commit until the test lets it go.
class CommitGate {
 public:
  std::function<void()> Hook() {
    return [this] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (open_) return;
      holding_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return open_; });
    };
  }
  void WaitUntilHolding() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return holding_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool holding_ = false;
  bool open_ = false;
};

TEST_F(ServiceTest, CallsMadeDuringACommitShareTheNextOne) {
  auto faults = std::make_shared<Faults>();
  Start({MigA100("m0", 2)}, faults);
  const Caller a = AddTenant("team-a");
  CommitGate gate;
  faults->before_commit = gate.Hook();
  const int commits_before = faults->commits;

  std::thread first([&] {
    absl::StatusOr<AcquireResult> r = service_->Acquire(a, ClassRequest("small", "first"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->outcome, AcquireResult::Outcome::kGranted);
  });
  gate.WaitUntilHolding();
  std::vector<std::thread> later;
  for (int i = 0; i < 3; ++i) {
    later.emplace_back([&] {
      absl::StatusOr<AcquireResult> r = service_->Acquire(a, ClassRequest("small", "later"));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->outcome, AcquireResult::Outcome::kGranted);
    });
  }
  // All three are decided (visible in memory) while the first commit is still held.
  while (Active().size() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM leases").rows[0][0]), 0);
  gate.Open();
  first.join();
  for (std::thread& t : later) t.join();

  EXPECT_EQ(faults->commits - commits_before, 2);  // the first, then the three together
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM leases WHERE state = 'active'").rows[0][0]), 4);
  EXPECT_EQ(store::AsInt(Sql("SELECT COUNT(*) FROM audit WHERE action = 'grant'").rows[0][0]), 4);
  EXPECT_EQ(Overcommit(nodes_, Active()), "");
}

TEST_F(ServiceTest, AFailedCommitAlsoFailsTheCallsStagedBehindItAndReloads) {
  auto faults = std::make_shared<Faults>();
  Start({MigA100("m0", 1)}, faults);
  const Caller a = AddTenant("team-a");
  const Lease kept = Grant(a, ClassRequest("small", "kept"));
  const size_t audit_before = AuditAll().size();
  CommitGate gate;
  faults->before_commit = gate.Hook();
  faults->fail_commits = 1;

  absl::Status first_status;
  std::thread first(
      [&] { first_status = service_->Acquire(a, ClassRequest("small", "lost first")).status(); });
  gate.WaitUntilHolding();
  absl::Status release_status;
  std::thread release([&] { release_status = service_->Release(a, kept.id); });
  // The release is decided on top of the grant being committed.
  while (Active().size() != 1 || Active()[0].id == kept.id) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  gate.Open();
  first.join();
  release.join();

  EXPECT_EQ(first_status.code(), absl::StatusCode::kDataLoss) << first_status;
  EXPECT_EQ(release_status.code(), absl::StatusCode::kAborted) << release_status;
  EXPECT_THAT(release_status.message(), ::testing::HasSubstr("retry"));
  // Memory is what the store holds: the kept lease only.
  ASSERT_THAT(Active(), SizeIs(1));
  EXPECT_EQ(Active()[0].id, kept.id);
  EXPECT_EQ(AuditAll().size(), audit_before);
  // And the service goes on from there.
  ASSERT_TRUE(service_->Release(a, kept.id).ok());
  EXPECT_EQ(Grant(a, ClassRequest("small", "next")).id, kept.id + 1);
  EXPECT_EQ(Overcommit(nodes_, Active()), "");
}

// ---- concurrency

TEST_F(ServiceTest, ConcurrentAcquireAndReleaseKeepQuotasAndCounts) {
  Start({MigA100("m0", 2)});
  constexpr int kThreads = 8;
  constexpr int kCycles = 50;
  constexpr int kTenants = 4;
  const double small_gib = ProfileGib("A100-80GB", "1g.10gb");
  std::vector<Caller> users;
  for (int t = 0; t < kTenants; ++t) {
    TenantSpec spec;
    spec.name = absl::StrCat("tenant-", t);
    spec.max_slices = {{"small", 1}};
    spec.max_gib = small_gib * 1.5;
    absl::Status put = service_->PutTenant(admin_, spec);
    ASSERT_TRUE(put.ok()) << put;
  }
  for (int i = 0; i < kThreads; ++i) {
    const std::string tenant = absl::StrCat("tenant-", i % kTenants);
    absl::StatusOr<std::string> token =
        service_->CreateUser(admin_, absl::StrCat("user-", i), tenant, Role::kTenant);
    ASSERT_TRUE(token.ok()) << token.status();
    absl::StatusOr<Caller> caller = service_->Authenticate(*token);
    ASSERT_TRUE(caller.ok());
    users.push_back(*caller);
  }

  std::atomic<int> grants{0};
  std::atomic<int> refusals{0};
  std::atomic<int> errors{0};
  std::atomic<int> quota_violations{0};
  std::atomic<int> bad_reasons{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const Caller& user = users[static_cast<size_t>(i)];
      for (int cycle = 0; cycle < kCycles; ++cycle) {
        absl::StatusOr<AcquireResult> result =
            service_->Acquire(user, ClassRequest("small", absl::StrCat(user.user, " #", cycle),
                                                 /*wait=*/false));
        if (!result.ok()) {
          ++errors;
          continue;
        }
        if (result->outcome != Outcome::kGranted) {
          ++refusals;
          if (result->reason.find("over quota") == std::string::npos) ++bad_reasons;
          continue;
        }
        ++grants;
        absl::StatusOr<std::vector<Lease>> held = service_->Leases(user);
        if (!held.ok() || held->size() > 1) ++quota_violations;
        if (!service_->Release(user, result->lease.id).ok()) ++errors;
      }
    });
  }
  // Readers and the ticker run alongside.
  std::thread reader([&] {
    while (!done) {
      absl::StatusOr<std::vector<Lease>> all = service_->Leases(admin_);
      if (!all.ok()) {
        ++errors;
        continue;
      }
      std::map<std::string, int> per_tenant;
      for (const Lease& lease : *all) ++per_tenant[lease.tenant];
      for (const auto& [tenant, count] : per_tenant) {
        if (count > 1) ++quota_violations;
      }
      if (!Overcommit(nodes_, *all).empty()) ++quota_violations;
      if (!service_->Tick().ok()) ++errors;
      std::this_thread::yield();
    }
  });
  for (std::thread& thread : threads) thread.join();
  done = true;
  reader.join();

  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(quota_violations.load(), 0);
  EXPECT_EQ(bad_reasons.load(), 0);
  EXPECT_EQ(grants.load() + refusals.load(), kThreads * kCycles);
  EXPECT_GT(grants.load(), 0);
  EXPECT_THAT(Active(), IsEmpty());
  EXPECT_THAT(Queued(), IsEmpty());

  const std::vector<AuditEvent> events = AuditAll();
  std::map<std::string, int> count;
  std::map<std::string, int> grants_per_tenant;
  std::map<std::string, int> releases_per_tenant;
  for (const AuditEvent& event : events) {
    ++count[event.action];
    if (event.action == "grant") ++grants_per_tenant[event.tenant];
    if (event.action == "release") ++releases_per_tenant[event.tenant];
  }
  EXPECT_EQ(count["grant"], grants.load());
  EXPECT_EQ(count["release"], grants.load());
  EXPECT_EQ(count["refuse"], refusals.load());
  EXPECT_EQ(grants_per_tenant, releases_per_tenant);
  std::set<std::int64_t> ids;
  for (const AuditEvent& event : events) EXPECT_TRUE(ids.insert(event.id).second);
  const std::vector<Lease> history = AllLeases();
  EXPECT_EQ(static_cast<int>(history.size()), grants.load());
  for (const Lease& lease : history) EXPECT_EQ(lease.state, "released") << lease.id;
}

}  // namespace
}  // namespace gpuslice::alloc
