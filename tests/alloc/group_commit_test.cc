// The group-commit engine alone (gpuslice/alloc/group_commit.h): batching, durability before the
// answer, a failed commit reported to every waiter, recovery, and shutdown.
#include "gpuslice/alloc/group_commit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpuslice::alloc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

GroupCommit::Statements Sql(std::initializer_list<const char*> sql) {
  GroupCommit::Statements out;
  for (const char* s : sql) out.push_back(GroupCommit::Statement{s, {}});
  return out;
}

// A store stand-in: records each transaction's statements; the first commit can be held until
// the test lets it go, and commits fail while `fail` is set.
class FakeStore {
 public:
  absl::Status Commit(const GroupCommit::Statements& statements) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      started_ = true;
      started_cv_.notify_all();
      held_cv_.wait(lock, [&] { return !hold_; });
    }
    std::vector<std::string> sql;
    for (const GroupCommit::Statement& s : statements) sql.push_back(s.sql);
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_) return absl::UnavailableError("disk on fire");
    transactions_.push_back(sql);
    return absl::OkStatus();
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
    started_ = false;
  }
  void WaitStarted() {
    std::unique_lock<std::mutex> lock(mu_);
    started_cv_.wait(lock, [&] { return started_; });
  }
  void Let() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
    held_cv_.notify_all();
  }
  void Fail(bool fail) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_ = fail;
  }
  std::vector<std::vector<std::string>> transactions() {
    std::lock_guard<std::mutex> lock(mu_);
    return transactions_;
  }

 private:
  std::mutex mu_;
  std::condition_variable started_cv_, held_cv_;
  bool hold_ = false, started_ = false, fail_ = false;
  std::vector<std::vector<std::string>> transactions_;
};

class GroupCommitTest : public ::testing::Test {
 protected:
  GroupCommit::CommitFn Commit() {
    return [this](const GroupCommit::Statements& s) { return store_.Commit(s); };
  }
  GroupCommit::RecoverFn Recover() {
    return [this](const std::function<void()>& drop) {
      ++recoveries_;
      drop();
      return recover_status_;
    };
  }
  // Waits until `n` threads are blocked in Await behind the commit in flight (they cannot be
  // observed directly: give them time, the outcome does not depend on it).
  static void Settle() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

  FakeStore store_;
  std::atomic<int> recoveries_{0};
  absl::Status recover_status_;
};

TEST_F(GroupCommitTest, AnEmptyBatchIsNotCommitted) {
  GroupCommit engine(Commit(), Recover());
  EXPECT_TRUE(engine.Await(engine.Stage({})).ok());
  EXPECT_EQ(engine.commits(), 0);
  EXPECT_TRUE(store_.transactions().empty());
}

TEST_F(GroupCommitTest, AnswersOnlyOnceItsStatementsAreDurable) {
  GroupCommit engine(Commit(), Recover());
  store_.Hold();
  std::atomic<bool> answered{false};
  std::thread caller([&] {
    EXPECT_TRUE(engine.Await(engine.Stage(Sql({"a1", "a2"}))).ok());
    answered = true;
  });
  store_.WaitStarted();
  Settle();
  EXPECT_FALSE(answered) << "answered before its transaction was durable";
  store_.Let();
  caller.join();
  EXPECT_TRUE(answered);
  EXPECT_THAT(store_.transactions(), ElementsAre(ElementsAre("a1", "a2")));
}

TEST_F(GroupCommitTest, CallsStagedDuringACommitShareTheNextOneAndAreNeverSplit) {
  GroupCommit engine(Commit(), Recover());
  store_.Hold();
  std::thread first([&] { EXPECT_TRUE(engine.Await(engine.Stage(Sql({"first"}))).ok()); });
  store_.WaitStarted();
  // While "first" is being committed, three calls stage; one of them commits all three at once.
  std::vector<std::thread> others;
  for (const char* name : {"b", "c", "d"}) {
    others.emplace_back([&engine, name] {
      const std::string one = std::string(name) + "1", two = std::string(name) + "2";
      GroupCommit::Statements statements;
      statements.push_back({one, {}});
      statements.push_back({two, {}});
      EXPECT_TRUE(engine.Await(engine.Stage(std::move(statements))).ok());
    });
  }
  Settle();
  store_.Let();
  first.join();
  for (std::thread& t : others) t.join();
  const auto transactions = store_.transactions();
  ASSERT_EQ(transactions.size(), 2u);
  EXPECT_THAT(transactions[0], ElementsAre("first"));
  ASSERT_EQ(transactions[1].size(), 6u);
  for (size_t i = 0; i < 6; i += 2) {  // each call's statements together, in its order
    EXPECT_EQ(transactions[1][i].substr(0, 1), transactions[1][i + 1].substr(0, 1));
    EXPECT_EQ(transactions[1][i].substr(1), "1");
    EXPECT_EQ(transactions[1][i + 1].substr(1), "2");
  }
  EXPECT_EQ(engine.commits(), 2);
}

TEST_F(GroupCommitTest, AFailedCommitIsReportedToEveryWaiterAndAbortsWhatWasStagedOnTopOfIt) {
  GroupCommit engine(Commit(), Recover());
  // Two calls in one batch: both get the commit's error.
  const GroupCommit::Ticket a = engine.Stage(Sql({"a"}));
  const GroupCommit::Ticket b = engine.Stage(Sql({"b"}));
  store_.Fail(true);
  store_.Hold();
  std::promise<absl::Status> a_status;
  std::thread a_thread([&] { a_status.set_value(engine.Await(a)); });
  store_.WaitStarted();
  // Staged while the failing batch is in flight: decided on top of it, so it is not saved.
  const GroupCommit::Ticket c = engine.Stage(Sql({"c"}));
  std::promise<absl::Status> c_status;
  std::thread c_thread([&] { c_status.set_value(engine.Await(c)); });
  Settle();
  store_.Let();
  const absl::Status b_status = engine.Await(b);
  a_thread.join();
  c_thread.join();
  const absl::Status a_result = a_status.get_future().get();
  const absl::Status c_result = c_status.get_future().get();
  EXPECT_EQ(a_result.code(), absl::StatusCode::kUnavailable) << a_result;
  EXPECT_EQ(b_status, a_result);
  EXPECT_EQ(c_result.code(), absl::StatusCode::kAborted) << c_result;
  EXPECT_THAT(c_result.message(), HasSubstr("not saved: an earlier change failed to commit"));
  EXPECT_THAT(c_result.message(), HasSubstr("disk on fire"));
  EXPECT_EQ(recoveries_, 1);
  EXPECT_TRUE(store_.transactions().empty());
  // The engine goes on: the next call commits.
  store_.Fail(false);
  EXPECT_TRUE(engine.Await(engine.Stage(Sql({"d"}))).ok());
  EXPECT_THAT(store_.transactions(), ElementsAre(ElementsAre("d")));
}

TEST_F(GroupCommitTest, ARecoveryThatFailsTooIsInTheError) {
  recover_status_ = absl::DataLossError("store unreadable");
  GroupCommit engine(Commit(), Recover());
  store_.Fail(true);
  const absl::Status status = engine.Await(engine.Stage(Sql({"a"})));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("disk on fire"));
  EXPECT_THAT(status.message(), HasSubstr("reloading the state failed too: store unreadable"));
}

TEST_F(GroupCommitTest, StatementsStagedUnderTheRecoveryAreCommittedNext) {
  // The owner's reload may stage statements of its own (a lease found lost, say): they are kept.
  GroupCommit* engine_ptr = nullptr;
  GroupCommit engine(Commit(), [&](const std::function<void()>& drop) {
    drop();
    (void)engine_ptr->Stage(Sql({"reloaded"}));
    return absl::OkStatus();
  });
  engine_ptr = &engine;
  store_.Fail(true);
  EXPECT_FALSE(engine.Await(engine.Stage(Sql({"a"}))).ok());
  store_.Fail(false);
  EXPECT_TRUE(engine.Await(engine.Stage({})).ok());
  EXPECT_THAT(store_.transactions(), ElementsAre(ElementsAre("reloaded")));
}

TEST_F(GroupCommitTest, ShutdownCommitsWhatIsStillStaged) {
  {
    GroupCommit engine(Commit(), Recover());
    EXPECT_TRUE(engine.Await(engine.Stage(Sql({"a"}))).ok());
    (void)engine.Stage(Sql({"left", "behind"}));  // staged, never awaited
  }
  EXPECT_THAT(store_.transactions(), ElementsAre(ElementsAre("a"), ElementsAre("left", "behind")));
}

TEST_F(GroupCommitTest, ShutdownWithNothingStagedCommitsNothing) {
  { GroupCommit engine(Commit(), Recover()); }
  EXPECT_TRUE(store_.transactions().empty());
}

TEST_F(GroupCommitTest, ManyCallersShareTransactionsAndAllAreDurable) {
  GroupCommit engine(Commit(), Recover());
  constexpr int kThreads = 8, kCalls = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&engine, t] {
      for (int i = 0; i < kCalls; ++i) {
        GroupCommit::Statements statements;
        statements.push_back({std::to_string(t * kCalls + i), {}});
        EXPECT_TRUE(engine.Await(engine.Stage(std::move(statements))).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  size_t statements = 0;
  for (const auto& transaction : store_.transactions()) statements += transaction.size();
  EXPECT_EQ(statements, size_t{kThreads * kCalls});
  EXPECT_LE(engine.commits(), kThreads * kCalls);
}

}  // namespace
}  // namespace gpuslice::alloc
