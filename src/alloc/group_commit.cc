#include "gpuslice/alloc/group_commit.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpuslice::alloc {

// Its fields are the engine's, under its mu_ (done, status) or its committer's (statements,
// once taken).
class GroupCommit::Batch {
 public:
  Statements statements;
  bool done = false;
  absl::Status status;
};

GroupCommit::GroupCommit(CommitFn commit, RecoverFn recover)
    : commit_(std::move(commit)),
      recover_(std::move(recover)),
      pending_(std::make_shared<Batch>()) {}

GroupCommit::~GroupCommit() {
  Ticket last;
  {
    util::MutexLock lock(mu_);
    if (pending_->statements.empty()) return;
    last = pending_;
  }
  (void)Await(last);
}

GroupCommit::Ticket GroupCommit::Stage(Statements statements) {
  util::MutexLock lock(mu_);
  for (Statement& statement : statements) pending_->statements.push_back(std::move(statement));
  return pending_;
}

int GroupCommit::commits() const {
  util::MutexLock lock(mu_);
  return commits_;
}

absl::Status GroupCommit::Await(const Ticket& batch) {
  mu_.Lock();
  while (!batch->done) {
    if (committing_) {
      committed_.Wait(mu_);
      continue;
    }
    committing_ = true;
    // Take everything staged so far; what is staged from now on goes into the next batch.
    const Ticket taken = std::exchange(pending_, std::make_shared<Batch>());
    mu_.Unlock();
    absl::Status status;
    if (!taken->statements.empty()) status = commit_(taken->statements);
    Ticket discarded;
    if (!status.ok()) {
      // The owner's memory holds the failed batch's changes and the staged ones decided on top
      // of them: both go, and the owner reads its store again.
      const absl::Status recovered = recover_([&] {
        util::MutexLock lock(mu_);
        discarded = std::exchange(pending_, std::make_shared<Batch>());
      });
      if (!recovered.ok()) {
        status = absl::InternalError(absl::StrCat(
            status.message(), "; reloading the state failed too: ", recovered.message(),
            " (restart the service)"));
      }
    }
    mu_.Lock();
    if (!taken->statements.empty()) ++commits_;
    taken->status = status;
    taken->done = true;
    if (discarded != nullptr) {
      discarded->status = absl::AbortedError(absl::StrCat(
          "not saved: an earlier change failed to commit (", status.message(), "); retry"));
      discarded->done = true;
    }
    committing_ = false;
    committed_.NotifyAll();
  }
  absl::Status status = batch->status;
  mu_.Unlock();
  return status;
}

}  // namespace gpuslice::alloc
