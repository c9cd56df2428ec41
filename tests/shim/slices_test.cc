// The reader of software slices' accounting (gpuslice/shim/slices.h) on region files made here as
// the interposer makes them: the copy of the region, live and dead slots by their OFD locks (held
// by child processes), a mutex whose holder died, one held too long, files of another layout,
// the directory listing, removal, and PIDs across PID namespaces.
#include "gpuslice/shim/slices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "shim/slice_file.h"

namespace gpuslice::shim {
namespace {

using testing::DieHoldingTheMutex;
using ::testing::HasSubstr;
using testing::OwnPidNamespace;
using ::testing::SizeIs;
using testing::SliceFile;
using testing::SlotHolder;

namespace fs = std::filesystem;

class SlicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(::testing::TempDir()) /
            ("gpuslice_slices_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    if (!HasFailure()) fs::remove_all(dir_, ignored);
  }

  std::string dir_;
};

// An environment variable set (or unset) for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(SlicePathTest, SanitisesTheIdAsTheInterposerDoes) {
  EXPECT_EQ(SlicePath("/d", "lease-12"), "/d/slice-lease-12");
  EXPECT_EQ(SlicePath("/d", "My.Slice_2-b"), "/d/slice-My.Slice_2-b");
  EXPECT_EQ(SlicePath("/d", "a b/../c"), "/d/slice-a_b_.._c");
  EXPECT_EQ(SlicePath("/d", std::string(100, 'x')), "/d/slice-" + std::string(63, 'x'));
}

TEST(SliceDirectoryTest, IsGpusliceShmDirElseDevShm) {
  {
    ScopedEnv env("GPUSLICE_SHM_DIR", "/tmp/somewhere");
    EXPECT_EQ(SliceDirectory(), "/tmp/somewhere");
  }
  {
    ScopedEnv env("GPUSLICE_SHM_DIR", "");
    EXPECT_EQ(SliceDirectory(), "/dev/shm/gpuslice");
  }
  ScopedEnv env("GPUSLICE_SHM_DIR", nullptr);
  EXPECT_EQ(SliceDirectory(), "/dev/shm/gpuslice");
}

TEST_F(SlicesTest, CopiesTheRegionAndTellsLiveSlotsFromDeadOnes) {
  const std::string path = SlicePath(dir_, "lease-7");
  SliceFile file(path, "lease-7");
  ASSERT_TRUE(file.ok());
  SliceRegion& r = file.region();
  std::snprintf(r.gpu_uuid, sizeof r.gpu_uuid, "%s", "GPU-0a1b2c3d-0000-1111-2222-333344445555");
  r.mode = static_cast<std::uint32_t>(SliceMode::kEnforce);
  r.policy = static_cast<std::uint32_t>(SharePolicy::kBorrowIdle);
  r.cap_bytes = 8ull << 30;
  r.share_milli = 250;
  r.context_reserve_bytes = 320ull << 20;
  r.created_unix_s = 1700000000;
  r.allocations = 40;
  r.refused = 3;
  r.reclaimed_processes = 2;
  r.reclaimed_bytes = 1ull << 30;
  r.launches = 1000;
  r.kernel_ns = 2'500'000'000;
  r.throttled_ns = 500'000'000;
  r.size_histogram[20] = 39;
  r.size_histogram[30] = 1;

  // Slot 0: a live process (a child holding its lock byte), pid as this namespace sees it.
  SlotHolder live(path, 0);
  ASSERT_TRUE(live.held());
  ProcessSlot& first = file.AddProcess(0, live.pid(), 3ull << 30);
  first.launches = 600;
  first.kernel_ns = 1'500'000'000;
  first.context_bytes = 320ull << 20;
  // Slot 5: a process that died without giving its slot back (nobody holds its byte).
  file.AddProcess(5, 999'999, 1ull << 30);
  // Slot 9: alive, with the host PID it recorded itself.
  SlotHolder recorded(path, 9);
  ASSERT_TRUE(recorded.held());
  file.AddProcess(9, 17, 0).host_pid = 4242;

  absl::StatusOr<SliceSnapshot> slice = ReadSlice(path);
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->path, path);
  EXPECT_EQ(slice->id, "lease-7");
  EXPECT_EQ(slice->gpu_uuid, "GPU-0a1b2c3d-0000-1111-2222-333344445555");
  EXPECT_EQ(slice->mode, SliceMode::kEnforce);
  EXPECT_EQ(slice->policy, SharePolicy::kBorrowIdle);
  EXPECT_EQ(slice->cap_bytes, 8ull << 30);
  EXPECT_EQ(slice->share_milli, 250);
  EXPECT_EQ(slice->context_reserve_bytes, 320ull << 20);
  EXPECT_EQ(slice->created_unix_s, 1700000000u);
  EXPECT_EQ(slice->used_bytes, 4ull << 30);
  EXPECT_EQ(slice->peak_bytes, 4ull << 30);
  EXPECT_EQ(slice->allocations, 40u);
  EXPECT_EQ(slice->refused, 3u);
  EXPECT_EQ(slice->reclaimed_processes, 2u);
  EXPECT_EQ(slice->reclaimed_bytes, 1ull << 30);
  EXPECT_EQ(slice->launches, 1000u);
  EXPECT_EQ(slice->kernel_ns, 2'500'000'000u);
  EXPECT_EQ(slice->throttled_ns, 500'000'000u);
  ASSERT_THAT(slice->size_histogram, SizeIs(kSizeHistogramBuckets));
  EXPECT_EQ(slice->size_histogram[20], 39u);
  EXPECT_EQ(slice->size_histogram[30], 1u);

  ASSERT_THAT(slice->processes, SizeIs(3));
  const SliceProcess& a = slice->processes[0];
  EXPECT_EQ(a.pid, live.pid());
  EXPECT_TRUE(a.alive);
  EXPECT_EQ(a.host_pid, live.pid()) << "resolved through /proc: same namespace, same PID";
  EXPECT_EQ(a.pid_ns, OwnPidNamespace());
  EXPECT_EQ(a.used_bytes, 3ull << 30);
  EXPECT_EQ(a.context_bytes, 320ull << 20);
  EXPECT_EQ(a.launches, 600u);
  EXPECT_EQ(a.kernel_ns, 1'500'000'000u);
  const SliceProcess& dead = slice->processes[1];
  EXPECT_EQ(dead.pid, 999'999);
  EXPECT_FALSE(dead.alive);
  EXPECT_EQ(dead.host_pid, 0) << "a dead process's PID is not looked up";
  EXPECT_EQ(dead.used_bytes, 1ull << 30);
  const SliceProcess& own = slice->processes[2];
  EXPECT_TRUE(own.alive);
  EXPECT_EQ(own.host_pid, 4242) << "the slot's own host PID";

  // The reader changed nothing: the dead slot is still there for the interposer to reclaim.
  EXPECT_EQ(r.slots[5].pid, 999'999);
  EXPECT_EQ(r.used_bytes, 4ull << 30);

  // Once the live process dies, its slot reads dead.
  live.Stop();
  slice = ReadSlice(path);
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_FALSE(slice->processes[0].alive);
  EXPECT_TRUE(slice->processes[2].alive);
}

TEST_F(SlicesTest, AShareOfTheWholeGpuIsNoComputeLimit) {
  SliceFile file(SlicePath(dir_, "whole"), "whole");
  ASSERT_TRUE(file.ok());
  file.region().share_milli = 1000;
  file.region().mode = static_cast<std::uint32_t>(SliceMode::kMeasure);
  absl::StatusOr<SliceSnapshot> slice = ReadSlice(file.path());
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->share_milli, 0);
  EXPECT_EQ(slice->mode, SliceMode::kMeasure);
  EXPECT_EQ(slice->cap_bytes, 0u);
  EXPECT_TRUE(slice->processes.empty());
}

TEST_F(SlicesTest, AMutexWhoseHolderDiedIsMadeConsistentAndReadable) {
  SliceFile file(SlicePath(dir_, "orphan"), "orphan");
  ASSERT_TRUE(file.ok());
  file.region().launches = 5;
  ASSERT_TRUE(DieHoldingTheMutex(file.path()));
  absl::StatusOr<SliceSnapshot> slice = ReadSlice(file.path());
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->launches, 5u);
  // The mutex is consistent and free again: the next locker gets it plainly.
  EXPECT_EQ(pthread_mutex_trylock(&file.region().lock), 0);
  EXPECT_EQ(pthread_mutex_unlock(&file.region().lock), 0);
  EXPECT_TRUE(ReadSlice(file.path()).ok());
}

TEST_F(SlicesTest, AMutexHeldTooLongIsUnavailableNotAWaitForever) {
  SliceFile file(SlicePath(dir_, "busy"), "busy");
  ASSERT_TRUE(file.ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    const char answer = pthread_mutex_lock(&file.region().lock) == 0 ? 'y' : 'n';
    if (write(ready[1], &answer, 1) != 1) _exit(1);
    while (true) pause();
  }
  ASSERT_GT(holder, 0);
  char answer = 0;
  ASSERT_EQ(read(ready[0], &answer, 1), 1);
  close(ready[0]);
  close(ready[1]);
  ASSERT_EQ(answer, 'y');
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<SliceSnapshot> slice = ReadSlice(file.path());
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(absl::IsUnavailable(slice.status())) << slice.status();
  EXPECT_THAT(slice.status().message(), HasSubstr("lock"));
  EXPECT_LT(waited, std::chrono::seconds(3));
  // The holder dies: the next read takes the mutex over.
  kill(holder, SIGKILL);
  int status = 0;
  waitpid(holder, &status, 0);
  EXPECT_TRUE(ReadSlice(file.path()).ok());
}

TEST_F(SlicesTest, AMissingFileIsNotFoundAndAnotherLayoutFailedPrecondition) {
  EXPECT_TRUE(absl::IsNotFound(ReadSlice(dir_ + "/slice-none").status()));
  {
    SliceFile file(dir_ + "/slice-magic", "magic");
    ASSERT_TRUE(file.ok());
    file.region().magic = 0x12345678;
    absl::StatusOr<SliceSnapshot> slice = ReadSlice(file.path());
    EXPECT_TRUE(absl::IsFailedPrecondition(slice.status())) << slice.status();
    EXPECT_THAT(slice.status().message(), HasSubstr("magic"));
  }
  {
    SliceFile file(dir_ + "/slice-version", "version");
    ASSERT_TRUE(file.ok());
    file.region().version = kRegionVersion + 1;
    EXPECT_TRUE(absl::IsFailedPrecondition(ReadSlice(file.path()).status()));
  }
  {
    SliceFile file(dir_ + "/slice-size", "size");
    ASSERT_TRUE(file.ok());
    file.region().size = sizeof(SliceRegion) - 8;
    EXPECT_TRUE(absl::IsFailedPrecondition(ReadSlice(file.path()).status()));
  }
  {
    std::ofstream(dir_ + "/slice-short") << "too short";
    absl::StatusOr<SliceSnapshot> slice = ReadSlice(dir_ + "/slice-short");
    EXPECT_TRUE(absl::IsFailedPrecondition(slice.status())) << slice.status();
    EXPECT_THAT(slice.status().message(), HasSubstr("bytes"));
  }
  fs::create_directory(dir_ + "/slice-dir");
  EXPECT_FALSE(ReadSlice(dir_ + "/slice-dir").ok());
}

TEST_F(SlicesTest, ListSlicesReadsEverySliceFileSortedAndNamesTheBadOnes) {
  SliceFile b(SlicePath(dir_, "b"), "b");
  SliceFile a(SlicePath(dir_, "a"), "a");
  SliceFile bad(SlicePath(dir_, "bad"), "bad");
  ASSERT_TRUE(a.ok() && b.ok() && bad.ok());
  bad.region().magic = 1;
  a.region().launches = 3;
  std::ofstream(dir_ + "/notes") << "not a slice";
  std::ofstream(dir_ + "/slice-being-created");  // empty: its first process is creating it
  const SliceList list = ListSlices(dir_);
  ASSERT_THAT(list.slices, SizeIs(2));
  EXPECT_EQ(list.slices[0].id, "a");
  EXPECT_EQ(list.slices[0].launches, 3u);
  EXPECT_EQ(list.slices[1].id, "b");
  ASSERT_THAT(list.errors, SizeIs(1));
  EXPECT_THAT(list.errors[0], HasSubstr("slice-bad"));

  const SliceList none = ListSlices(dir_ + "/missing");
  EXPECT_TRUE(none.slices.empty());
  EXPECT_TRUE(none.errors.empty()) << "no directory: no slices yet, not an error";
}

TEST_F(SlicesTest, RemoveSliceRefusesWhileAProcessLives) {
  SliceFile file(SlicePath(dir_, "done"), "done");
  ASSERT_TRUE(file.ok());
  SlotHolder live(file.path(), 2);
  ASSERT_TRUE(live.held());
  file.AddProcess(2, live.pid(), 100);
  absl::Status removed = RemoveSlice(file.path());
  EXPECT_TRUE(absl::IsFailedPrecondition(removed)) << removed;
  EXPECT_TRUE(fs::exists(file.path()));
  live.Stop();
  removed = RemoveSlice(file.path());
  EXPECT_TRUE(removed.ok()) << removed;
  EXPECT_FALSE(fs::exists(file.path()));
  EXPECT_TRUE(absl::IsNotFound(RemoveSlice(file.path())));
  // A file of another layout may be removed.
  std::ofstream(dir_ + "/slice-old") << "an old layout";
  EXPECT_TRUE(RemoveSlice(dir_ + "/slice-old").ok());
  EXPECT_FALSE(fs::exists(dir_ + "/slice-old"));
}

TEST(FindHostPidTest, FindsThisProcessAndNothingForAnUnknownPidOrNamespace) {
  const std::uint64_t own = OwnPidNamespace();
  ASSERT_NE(own, 0u);
  EXPECT_EQ(FindHostPid(own, getpid()), getpid());
  int pid_max = 0;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  ASSERT_GT(pid_max, 0);
  EXPECT_EQ(FindHostPid(own, pid_max + 1), 0);
  EXPECT_EQ(FindHostPid(own + 1, getpid()), 0);
  EXPECT_EQ(FindHostPid(own, 0), 0);
}

// A process in a PID namespace of its own (PID 1 there) is found by its PID in this one.
TEST(FindHostPidTest, FindsAProcessOfAnotherPidNamespace) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    // Answers: the grandchild's PID here (0 when no namespace could be made), its namespace.
    long answer[2] = {0, 0};
    if (unshare(CLONE_NEWPID) != 0) {
      if (write(pipe_fds[1], answer, sizeof answer) != sizeof answer) _exit(1);
      _exit(0);
    }
    const pid_t inner = fork();  // PID 1 of the new namespace
    if (inner == 0) {
      while (true) pause();
    }
    struct stat st {};
    if (inner < 0 || stat(("/proc/" + std::to_string(inner) + "/ns/pid").c_str(), &st) != 0) {
      if (write(pipe_fds[1], answer, sizeof answer) != sizeof answer) _exit(1);
      _exit(0);
    }
    answer[0] = inner;
    answer[1] = static_cast<long>(st.st_ino);
    if (write(pipe_fds[1], answer, sizeof answer) != sizeof answer) _exit(1);
    int status = 0;
    waitpid(inner, &status, 0);  // until the test kills it
    _exit(0);
  }
  ASSERT_GT(child, 0);
  close(pipe_fds[1]);
  long answer[2] = {0, 0};
  ASSERT_EQ(read(pipe_fds[0], answer, sizeof answer), static_cast<ssize_t>(sizeof answer));
  close(pipe_fds[0]);
  const pid_t inner = static_cast<pid_t>(answer[0]);
  std::optional<int> found;
  if (inner > 0) found = FindHostPid(static_cast<std::uint64_t>(answer[1]), 1);
  if (inner > 0) kill(inner, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  if (inner <= 0) GTEST_SKIP() << "no PID namespace can be made here (unshare: not permitted)";
  EXPECT_EQ(found, inner);
}

}  // namespace
}  // namespace gpuslice::shim
