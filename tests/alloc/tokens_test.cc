// Users and their tokens in the allocation service (gpuslice/alloc/service.h): expiry on a clock
// the test moves, rotation (the old token dies at once; only admins extend a lifetime),
// revocation (never the last admin), who sees whom, persistence across reopening, the audit of
// failed authentications, and the local recovery of a lost admin token (RecoverAdmin).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloc/alloc_test_util.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/store/database.h"

namespace gpuslice::alloc {
namespace {

using testing::FakeClock;
using ::testing::HasSubstr;
using testing::MigA100;
using testing::ScratchDir;

TenantSpec Tenant(const std::string& name) {
  TenantSpec spec;
  spec.name = name;
  return spec;
}

class TokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Open();
    absl::StatusOr<std::optional<std::string>> token = service_->BootstrapAdmin("root");
    ASSERT_TRUE(token.ok() && token->has_value());
    root_token_ = **token;
    root_ = Who(root_token_);
    ASSERT_TRUE(service_->PutTenant(root_, Tenant("team-a")).ok());
  }

  void Open() {
    service_.reset();
    absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenSqlite(Path());
    ASSERT_TRUE(db.ok()) << db.status();
    ServiceOptions options;
    options.clock = clock_.Function();
    absl::StatusOr<std::unique_ptr<Service>> service =
        Service::Open(*std::move(db), place::testing::MakeCluster({MigA100("n1", 1)}), options);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
  }

  std::string Path() const { return dir_.path() + "/tokens.db"; }

  Caller Who(const std::string& token) {
    absl::StatusOr<Caller> caller = service_->Authenticate(token);
    EXPECT_TRUE(caller.ok()) << caller.status();
    return caller.ok() ? *caller : Caller{};
  }

  std::string MakeUser(const std::string& name, std::int64_t expires_in_s = 0,
                       Role role = Role::kTenant) {
    absl::StatusOr<std::string> token = service_->CreateUser(
        root_, name, role == Role::kTenant ? "team-a" : "", role, "", expires_in_s);
    EXPECT_TRUE(token.ok()) << token.status();
    return token.ok() ? *token : "";
  }

  std::vector<std::string> AuditActions() {
    absl::StatusOr<std::vector<AuditEvent>> events = service_->Audit(root_, AuditQuery{});
    EXPECT_TRUE(events.ok()) << events.status();
    std::vector<std::string> actions;
    if (events.ok()) {
      for (const AuditEvent& e : *events) actions.push_back(e.action + ":" + e.subject);
    }
    return actions;
  }

  ScratchDir dir_;
  FakeClock clock_;
  std::unique_ptr<Service> service_;
  std::string root_token_;
  Caller root_;
};

TEST_F(TokensTest, AnExpiredTokenIsRefusedNamingItsUserNotTheToken) {
  const std::string token = MakeUser("ann", 3600);
  EXPECT_EQ(Who(token).user, "ann");
  clock_.Advance(3599);
  EXPECT_TRUE(service_->Authenticate(token).ok());
  clock_.Advance(1);
  absl::StatusOr<Caller> expired = service_->Authenticate(token);
  ASSERT_EQ(expired.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(expired.status().message(), HasSubstr("'ann' expired at"));
  EXPECT_THAT(expired.status().message(), ::testing::Not(HasSubstr(token)));
}

TEST_F(TokensTest, LifetimesOutsideOneSecondToTenYearsAreRefused) {
  for (std::int64_t bad : {std::int64_t{-1}, Service::kMaxTokenLifetimeS + 1}) {
    EXPECT_EQ(service_->CreateUser(root_, "x", "team-a", Role::kTenant, "", bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_TRUE(
      service_->CreateUser(root_, "y", "team-a", Role::kTenant, "", Service::kMaxTokenLifetimeS)
          .ok());
}

TEST_F(TokensTest, RotationKillsTheOldTokenAtOnceAndSurvivesReopening) {
  const std::string old_token = MakeUser("ann");
  absl::StatusOr<std::string> fresh = service_->RotateToken(root_, "ann", std::nullopt);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_NE(*fresh, old_token);
  EXPECT_EQ(service_->Authenticate(old_token).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Who(*fresh).user, "ann");
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(service_->Authenticate(old_token).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Who(*fresh).tenant, "team-a");
  EXPECT_THAT(AuditActions(), ::testing::Contains("user.rotate:ann"));
}

TEST_F(TokensTest, AnAdminsRotationStartsTheLifetimeAgainFromNow) {
  MakeUser("ann", 3600);
  clock_.Advance(3000);
  absl::StatusOr<std::string> fresh = service_->RotateToken(root_, "ann", std::nullopt);
  ASSERT_TRUE(fresh.ok());
  clock_.Advance(3599);
  EXPECT_TRUE(service_->Authenticate(*fresh).ok());
  clock_.Advance(1);
  EXPECT_FALSE(service_->Authenticate(*fresh).ok());
  // An expired token can be rotated by an admin, and 0 makes it last forever.
  absl::StatusOr<std::string> forever = service_->RotateToken(root_, "ann", 0);
  ASSERT_TRUE(forever.ok());
  clock_.Advance(Service::kMaxTokenLifetimeS);
  EXPECT_TRUE(service_->Authenticate(*forever).ok());
}

TEST_F(TokensTest, UsersRotateOnlyTheirOwnTokenAndNeverExtendIt) {
  const Caller ann = Who(MakeUser("ann", 3600));
  MakeUser("bob");
  EXPECT_EQ(service_->RotateToken(ann, "bob", std::nullopt).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_->RotateToken(ann, "ann", 7200).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_->RotateToken(ann, "ann", 0).status().code(),
            absl::StatusCode::kPermissionDenied);
  clock_.Advance(1000);
  absl::StatusOr<std::string> same_end = service_->RotateToken(ann, "ann", std::nullopt);
  ASSERT_TRUE(same_end.ok()) << same_end.status();
  clock_.Advance(2599);
  EXPECT_TRUE(service_->Authenticate(*same_end).ok());
  clock_.Advance(1);
  EXPECT_FALSE(service_->Authenticate(*same_end).ok()) << "self-rotation kept the old end";
  // A shorter life is always allowed.
  const Caller bob = Who(service_->RotateToken(root_, "bob", 0).value());
  EXPECT_TRUE(service_->RotateToken(bob, "bob", 60).ok());
}

TEST_F(TokensTest, RevocationEndsTheTokenButNeverTheLastAdmin) {
  const std::string ann_token = MakeUser("ann");
  const Caller ann = Who(ann_token);
  EXPECT_EQ(service_->RevokeUser(ann, "root").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_->RevokeUser(root_, "nobody").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(service_->RevokeUser(root_, "ann").ok());
  EXPECT_FALSE(service_->Authenticate(ann_token).ok());
  absl::Status last = service_->RevokeUser(root_, "root");
  EXPECT_EQ(last.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(last.message(), HasSubstr("last admin"));
  const std::string ops = MakeUser("ops", 0, Role::kAdmin);
  EXPECT_TRUE(service_->RevokeUser(Who(ops), "root").ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_FALSE(service_->Authenticate(ann_token).ok());
  EXPECT_FALSE(service_->Authenticate(root_token_).ok());
  EXPECT_TRUE(service_->Authenticate(ops).ok());
  // A revoked name can be made again, with a new token.
  root_ = Who(ops);
  EXPECT_NE(MakeUser("ann"), ann_token);
}

TEST_F(TokensTest, AdminsSeeEveryUserOthersOnlyThemselves) {
  const Caller ann = Who(MakeUser("ann", 60));
  MakeUser("bob");
  absl::StatusOr<std::vector<UserInfo>> all = service_->Users(root_);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].name, "ann");
  EXPECT_EQ((*all)[0].expires_at, clock_.now() + 60);
  absl::StatusOr<std::vector<UserInfo>> own = service_->Users(ann);
  ASSERT_TRUE(own.ok());
  ASSERT_EQ(own->size(), 1u);
  EXPECT_EQ((*own)[0].name, "ann");
}

TEST_F(TokensTest, DeletingATenantDeletesItsUsersTokens) {
  const std::string token = MakeUser("ann");
  ASSERT_TRUE(service_->DeleteTenant(root_, "team-a").ok());
  EXPECT_FALSE(service_->Authenticate(token).ok());
  EXPECT_EQ(service_->Users(root_)->size(), 1u);
}

TEST_F(TokensTest, FailedAuthenticationsAreAuditedDurably) {
  ASSERT_TRUE(service_->AuditAuthFailure("192.0.2.7", "unknown API token", false).ok());
  ASSERT_TRUE(service_->AuditAuthFailure("192.0.2.7", "unknown API token", true).ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_THAT(AuditActions(),
              ::testing::IsSupersetOf({"auth.fail:192.0.2.7", "auth.limit:192.0.2.7"}));
}

TEST_F(TokensTest, RecoveryGivesAnAdminANewTokenThroughTheStoreAlone) {
  const std::string ann_token = MakeUser("ann");
  service_.reset();  // serve is stopped
  absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenSqlite(Path());
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(RecoverAdmin(**db, "ann", "local:test", clock_.now()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RecoverAdmin(**db, "bad name", "local:test", clock_.now()).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> root = RecoverAdmin(**db, "root", "local:test", clock_.now());
  ASSERT_TRUE(root.ok()) << root.status();
  absl::StatusOr<std::string> rescue = RecoverAdmin(**db, "rescue", "local:test", clock_.now());
  ASSERT_TRUE(rescue.ok()) << rescue.status();
  db->reset();
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_FALSE(service_->Authenticate(root_token_).ok()) << "the lost token still works";
  EXPECT_EQ(Who(*root).role, Role::kAdmin);
  EXPECT_EQ(Who(*rescue).role, Role::kAdmin);
  EXPECT_EQ(Who(ann_token).user, "ann");
  root_ = Who(*root);
  absl::StatusOr<std::vector<AuditEvent>> events = service_->Audit(root_, AuditQuery{});
  ASSERT_TRUE(events.ok());
  int recovered = 0;
  for (const AuditEvent& e : *events) {
    if (e.action == "admin.recover") {
      ++recovered;
      EXPECT_EQ(e.actor, "local:test");
    }
  }
  EXPECT_EQ(recovered, 2);
  // The service goes on numbering audit events after the recovery's.
  ASSERT_TRUE(service_->PutTenant(root_, Tenant("team-b")).ok());
}

}  // namespace
}  // namespace gpuslice::alloc
