// gpuslice/alloc/group_commit.h
//
// The group-commit engine of the allocation service (alloc::Service): calls stage statements,
// and each waits until the transaction holding them is durable before it answers. Calls that
// stage while one transaction is being committed are committed together in the next one, so many
// callers share one fsync.
//
//   * Stage(statements) adds one call's statements to the batch being staged, as one (a call's
//     statements are never split between transactions), and returns that batch's ticket.
//   * Await(ticket) returns once the ticket's batch is committed, with the commit's status. When
//     no other thread is committing, the caller commits: it takes everything staged so far as one
//     batch and runs the `commit` function on it (with no lock of the engine held); the others
//     wait for it. An empty batch is not committed (OK at once).
//   * When a commit fails, every waiter of that batch gets its error, and every waiter of the
//     batch staged meanwhile (decided on top of the failed one) gets Aborted ("not saved: an
//     earlier change failed to commit (...); retry"). Before anyone is answered, the engine calls
//     `recover`, which must call `drop_staged` (which sets that staged batch aside) under the
//     owner's state lock and bring the owner's memory back to what is durable; when it fails too,
//     the failed batch's error says so ("reloading the state failed too: ...").
//   * Shutdown: the destructor commits whatever is still staged (nothing a call staged is lost);
//     it must not run while another thread is in Stage or Await.
//
// Lock order: the owner stages under its own state lock, so its lock comes before the engine's;
// the engine calls `commit` and `recover` with none of its locks held.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "gpuslice/store/database.h"
#include "gpuslice/util/mutex.h"

namespace gpuslice::alloc {

class GroupCommit {
 public:
  struct Statement {
    std::string sql;
    std::vector<store::Value> params;
  };
  using Statements = std::vector<Statement>;
  class Batch;
  // A batch being staged or committed; Await answers for it.
  using Ticket = std::shared_ptr<Batch>;
  // Runs `statements` in one transaction; OK only once they are durable. One thread at a time.
  using CommitFn = std::function<absl::Status(const Statements& statements)>;
  // After a failed commit: calls `drop_staged` (under the owner's state lock) and reloads.
  using RecoverFn = std::function<absl::Status(const std::function<void()>& drop_staged)>;

  GroupCommit(CommitFn commit, RecoverFn recover);
  ~GroupCommit();
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  // Adds one call's statements (possibly none) to the batch being staged; its ticket.
  Ticket Stage(Statements statements) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the ticket's batch is committed (committing it when nobody else is).
  absl::Status Await(const Ticket& ticket) ABSL_LOCKS_EXCLUDED(mu_);
  // How many transactions were committed (or tried) so far.
  int commits() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const CommitFn commit_;
  const RecoverFn recover_;
  mutable util::Mutex mu_;
  util::CondVar committed_;
  bool committing_ ABSL_GUARDED_BY(mu_) = false;
  Ticket pending_ ABSL_GUARDED_BY(mu_);
  int commits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpuslice::alloc
