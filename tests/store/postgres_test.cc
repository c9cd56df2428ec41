// The store contract and the allocation service on a real PostgreSQL server. The server comes from
// GPUSLICE_PG_URL when set (.ci/run starts one), else this test starts a throwaway one on loopback
// with scripts/pg_test_server.sh; without PostgreSQL installed the tests are skipped.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/store/database.h"
#include "gtest/gtest.h"
#include "require.h"

namespace gpuslice::store {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Run(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  if (pclose(pipe) != 0) return "";
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// A loopback port no socket holds now (the kernel's choice), for the server to listen on. The
// port used to be 20000 + pid % 20000, which other tests' servers (ports picked in 20000-50000)
// could hold at the same time under ctest -j: then the server did not start.
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// One server for the whole binary.
class PostgresEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (const char* url = std::getenv("GPUSLICE_PG_URL"); url != nullptr && *url != '\0') {
      url_ = url;
      return;
    }
    dir_ = fs::temp_directory_path() / ("gpuslice-pg-test-" + std::to_string(getpid()));
    const int port = FreeLoopbackPort();
    url_ = Run(std::string(GPUSLICE_SOURCE_DIR) + "/scripts/pg_test_server.sh start " +
               dir_.string() + " " + std::to_string(port) + " 2>/dev/null");
    started_ = !url_.empty();
  }
  void TearDown() override {
    if (started_) {
      Run(std::string(GPUSLICE_SOURCE_DIR) + "/scripts/pg_test_server.sh stop " + dir_.string());
      std::error_code ignored;
      fs::remove_all(dir_, ignored);
    }
  }
  static const std::string& url() { return url_; }

 private:
  static inline std::string url_;
  fs::path dir_;
  bool started_ = false;
};

const auto* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new PostgresEnvironment);  // NOLINT: owned by gtest

class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (PostgresEnvironment::url().empty()) {
      GPUSLICE_SKIP_OR_FAIL_IN_CI("no PostgreSQL server available");
    }
    absl::StatusOr<std::unique_ptr<Database>> db = OpenPostgres(PostgresEnvironment::url());
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    // A clean schema per test.
    ASSERT_TRUE(db_->Exec("DROP SCHEMA public CASCADE").ok());
    ASSERT_TRUE(db_->Exec("CREATE SCHEMA public").ok());
  }
  std::unique_ptr<Database> db_;
};

TEST_F(PostgresTest, TypedValuesAndParameters) {
  ASSERT_TRUE(db_->Exec("CREATE TABLE t (i BIGINT, d DOUBLE PRECISION, s TEXT)").ok());
  const Value row[] = {std::int64_t{-42}, 2.5, std::string("it's ? here")};
  ASSERT_TRUE(db_->Exec("INSERT INTO t (i, d, s) VALUES (?, ?, ?)", row).ok());
  const Value null_row[] = {std::monostate{}, std::monostate{}, std::monostate{}};
  ASSERT_TRUE(db_->Exec("INSERT INTO t (i, d, s) VALUES (?, ?, ?)", null_row).ok());
  absl::StatusOr<Result> result =
      db_->Query("SELECT i, d, s FROM t WHERE s = '?' OR s IS NOT NULL");
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->rows.size(), 1u);
  EXPECT_EQ(std::get<std::int64_t>(result->rows[0][0]), -42);
  EXPECT_EQ(std::get<double>(result->rows[0][1]), 2.5);
  EXPECT_EQ(std::get<std::string>(result->rows[0][2]), "it's ? here");
  EXPECT_EQ(result->columns, (std::vector<std::string>{"i", "d", "s"}));
  absl::StatusOr<Result> nulls = db_->Query("SELECT i, s FROM t WHERE i IS NULL");
  ASSERT_TRUE(nulls.ok());
  ASSERT_EQ(nulls->rows.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(nulls->rows[0][0]));
  EXPECT_EQ(db_->kind(), "postgres");
  EXPECT_THAT(db_->where(), HasSubstr("127.0.0.1"));
}

TEST_F(PostgresTest, ConstraintViolationIsAlreadyExists) {
  ASSERT_TRUE(db_->Exec("CREATE TABLE u (k TEXT PRIMARY KEY)").ok());
  const Value key[] = {std::string("a")};
  ASSERT_TRUE(db_->Exec("INSERT INTO u (k) VALUES (?)", key).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(db_->Exec("INSERT INTO u (k) VALUES (?)", key)));
}

TEST_F(PostgresTest, TransactionsCommitAndRollBack) {
  ASSERT_TRUE(db_->Exec("CREATE TABLE v (x BIGINT)").ok());
  {
    Transaction txn(*db_);
    ASSERT_TRUE(txn.status().ok());
    const Value one[] = {std::int64_t{1}};
    ASSERT_TRUE(db_->Exec("INSERT INTO v (x) VALUES (?)", one).ok());
  }  // rolled back
  {
    Transaction txn(*db_);
    const Value two[] = {std::int64_t{2}};
    ASSERT_TRUE(db_->Exec("INSERT INTO v (x) VALUES (?)", two).ok());
    ASSERT_TRUE(txn.Commit().ok());
  }
  absl::StatusOr<Result> rows = db_->Query("SELECT x FROM v");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(AsInt(rows->rows[0][0]), 2);
}

TEST_F(PostgresTest, MigrationsAreIdempotentAndRefuseANewerSchema) {
  ASSERT_TRUE(Migrate(*db_).ok());
  ASSERT_TRUE(Migrate(*db_).ok());
  absl::StatusOr<int> version = CurrentVersion(*db_);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, SchemaVersion());
  const Value newer[] = {std::int64_t{SchemaVersion() + 1}};
  ASSERT_TRUE(db_->Exec("INSERT INTO schema_version (version) VALUES (?)", newer).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(Migrate(*db_)));
}

TEST_F(PostgresTest, BadUrlFailsWithoutThePassword) {
  absl::StatusOr<std::unique_ptr<Database>> db =
      OpenPostgres("postgres://someone:secret-pw@127.0.0.1:1/none?connect_timeout=2");
  ASSERT_FALSE(db.ok());
  EXPECT_TRUE(absl::IsUnavailable(db.status()));
  EXPECT_THAT(std::string(db.status().message()), ::testing::Not(HasSubstr("secret-pw")));
}

// The allocation service behaves the same on PostgreSQL: grant, queue, release, reopen.
TEST_F(PostgresTest, ServiceGrantsQueuesAndSurvivesAReopen) {
  const hw::GpuModel* a100 = hw::Catalog::Builtin().Find("A100-80GB");
  ASSERT_NE(a100, nullptr);
  auto inventory = [&] {
    place::NodeSpec node;
    node.name = "gpu-1";
    node.model = "A100-80GB";
    node.cpu_milli = 64000;
    node.memory_mib = 262144;
    node.gpus = 1;
    node.mode = place::GpuMode::kMig;
    node.hardware = a100;
    return *place::Cluster::Create({node});
  };
  std::int64_t now = 1000;
  alloc::ServiceOptions options;
  options.clock = [&] { return now; };
  absl::StatusOr<std::unique_ptr<alloc::Service>> service =
      alloc::Service::Open(std::move(db_), inventory(), options);
  ASSERT_TRUE(service.ok()) << service.status();
  const alloc::Caller admin{"root", "", alloc::Role::kAdmin, ""};
  alloc::TenantSpec team;
  team.name = "team-a";
  ASSERT_TRUE((*service)->PutTenant(admin, team).ok());
  const alloc::Caller user{"ann", "team-a", alloc::Role::kTenant, ""};
  alloc::AcquireRequest large;
  large.class_name = "large";
  large.purpose = "training run";
  absl::StatusOr<alloc::AcquireResult> first = (*service)->Acquire(user, large);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->outcome, alloc::AcquireResult::Outcome::kGranted);
  absl::StatusOr<alloc::AcquireResult> second = (*service)->Acquire(user, large);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->outcome, alloc::AcquireResult::Outcome::kQueued) << second->reason;
  EXPECT_EQ(second->queued.position, 1);
  service->reset();

  absl::StatusOr<std::unique_ptr<Database>> db = OpenPostgres(PostgresEnvironment::url());
  ASSERT_TRUE(db.ok());
  absl::StatusOr<std::unique_ptr<alloc::Service>> reopened =
      alloc::Service::Open(*std::move(db), inventory(), options);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<std::vector<alloc::Lease>> leases = (*reopened)->Leases(user);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 1u);
  EXPECT_EQ(leases->front().id, first->lease.id);
  absl::StatusOr<std::vector<alloc::QueueEntry>> queue = (*reopened)->Queue(user);
  ASSERT_TRUE(queue.ok());
  ASSERT_EQ(queue->size(), 1u);
  ASSERT_TRUE((*reopened)->Release(user, first->lease.id).ok());
  leases = (*reopened)->Leases(user);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 1u);  // the queued request got the freed slice
  EXPECT_NE(leases->front().id, first->lease.id);
  absl::StatusOr<std::vector<alloc::AuditEvent>> audit = (*reopened)->Audit(admin, {});
  ASSERT_TRUE(audit.ok());
  std::vector<std::string> actions;
  for (const alloc::AuditEvent& event : *audit) actions.push_back(event.action);
  EXPECT_THAT(actions, ::testing::IsSupersetOf({"tenant.put", "grant", "queue", "release"}));
}

}  // namespace
}  // namespace gpuslice::store
