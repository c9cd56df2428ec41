// Reading software slices' accounting files (gpuslice/shim/slices.h) from outside the interposer.
//
// Every read follows the region's rules (gpuslice/shim/slice_region.h): the header is checked
// under a shared flock, so a file that its first opener is still initialising is never taken for
// a slice; the copy is made under the robust mutex; liveness comes from each slot's OFD lock byte.
// Nothing here waits without bound on a process of a slice: the flock and the mutex are tried for
// at most kLockWait, and a slice whose lock is held longer is reported as unavailable.
#include "gpuslice/shim/slices.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpuslice::shim {
namespace {

// The longest a reader waits for a slice's flock (its first opener initialising it) or mutex.
constexpr std::chrono::milliseconds kLockWait{500};

std::string Errno(int error) { return std::strerror(error); }

// A file descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A shared mapping of one SliceRegion, unmapped when it goes out of scope.
class Mapping {
 public:
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (region_ != nullptr) munmap(region_, sizeof(SliceRegion));
  }
  absl::Status Map(int fd, const std::string& path) {
    void* address = mmap(nullptr, sizeof(SliceRegion), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (address == MAP_FAILED) {
      return absl::InternalError(absl::StrCat(path, ": mmap: ", Errno(errno)));
    }
    region_ = static_cast<SliceRegion*>(address);
    return absl::OkStatus();
  }
  SliceRegion* get() const { return region_; }

 private:
  SliceRegion* region_ = nullptr;
};

// flock(operation | LOCK_NB), retried until kLockWait has passed.
bool FlockWithin(int fd, int operation) {
  const auto deadline = std::chrono::steady_clock::now() + kLockWait;
  while (true) {
    if (flock(fd, operation | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Opens `path` read-write (the mutex needs it); a missing file is NotFound.
absl::StatusOr<std::unique_ptr<Fd>> OpenRegion(const std::string& path) {
  auto fd = std::make_unique<Fd>(open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (fd->get() < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such slice"));
    return absl::Status(absl::ErrnoToStatusCode(error), absl::StrCat(path, ": ", Errno(error)));
  }
  return fd;
}

// Checks the header of a mapped region: magic, version and size.
absl::Status CheckHeader(const SliceRegion& region, const std::string& path) {
  if (region.magic == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not a slice region (not initialised)"));
  }
  if (region.magic != kRegionMagic) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not a slice region (magic ", region.magic, ")"));
  }
  if (region.version != kRegionVersion || region.size != sizeof(SliceRegion)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": a slice region of another layout (version ", region.version, ", ",
                     region.size, " bytes; this gpuslice reads version ", kRegionVersion, ", ",
                     sizeof(SliceRegion), " bytes)"));
  }
  return absl::OkStatus();
}

// Maps the region of `fd` and checks its size and header.
absl::Status MapChecked(int fd, const std::string& path, Mapping& mapping) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat(path, ": fstat: ", Errno(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  if (st.st_size < static_cast<off_t>(sizeof(SliceRegion))) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a slice region (", st.st_size,
                                                      " bytes, a region is ", sizeof(SliceRegion),
                                                      ")"));
  }
  if (absl::Status mapped = mapping.Map(fd, path); !mapped.ok()) return mapped;
  return CheckHeader(*mapping.get(), path);
}

// MapChecked, with `take_flock` under a shared flock, so that a region its first opener is still
// filling in (under its exclusive flock) is neither taken for a bad file nor read.
absl::Status MapRegion(int fd, const std::string& path, bool take_flock, Mapping& mapping) {
  if (take_flock && !FlockWithin(fd, LOCK_SH)) {
    return absl::UnavailableError(
        absl::StrCat(path, ": still being initialised by its first process (flock held)"));
  }
  absl::Status status = MapChecked(fd, path, mapping);
  if (take_flock) flock(fd, LOCK_UN);
  return status;
}

// pthread_mutex_clocklock on CLOCK_MONOTONIC (immune to changes of the wall clock). GCC 12's
// ThreadSanitizer does not intercept it, so it would see the unlock without the lock and report
// it: under ThreadSanitizer the wait's deadline is taken on CLOCK_REALTIME instead.
int ClockLock(pthread_mutex_t* mutex, const timespec* monotonic_deadline) {
#if defined(__SANITIZE_THREAD__)
  timespec now_monotonic{};
  timespec now_realtime{};
  clock_gettime(CLOCK_MONOTONIC, &now_monotonic);
  clock_gettime(CLOCK_REALTIME, &now_realtime);
  const long long left_ns = (monotonic_deadline->tv_sec - now_monotonic.tv_sec) * 1'000'000'000LL +
                            (monotonic_deadline->tv_nsec - now_monotonic.tv_nsec);
  const long long until_ns =
      now_realtime.tv_sec * 1'000'000'000LL + now_realtime.tv_nsec + (left_ns > 0 ? left_ns : 0);
  const timespec deadline{static_cast<time_t>(until_ns / 1'000'000'000LL),
                          static_cast<long>(until_ns % 1'000'000'000LL)};
  return pthread_mutex_timedlock(mutex, &deadline);
#else
  return pthread_mutex_clocklock(mutex, CLOCK_MONOTONIC, monotonic_deadline);
#endif
}

// Holds the region's robust mutex for a scope. A holder that died leaves EOWNERDEAD: the mutex is
// marked consistent (the region's counts are taken as they are; the interposer reclaims the dead
// process's slot when it next needs room).
class RegionLock {
 public:
  explicit RegionLock(SliceRegion& region) : region_(region) {}
  RegionLock(const RegionLock&) = delete;
  RegionLock& operator=(const RegionLock&) = delete;
  ~RegionLock() {
    if (held_) pthread_mutex_unlock(&region_.lock);
  }

  absl::Status Lock(const std::string& path) {
    timespec deadline{};
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(kLockWait).count();
    deadline.tv_nsec += static_cast<long>(wait);
    deadline.tv_sec += deadline.tv_nsec / 1'000'000'000L;
    deadline.tv_nsec %= 1'000'000'000L;
    int rc = 0;
    do {
      rc = ClockLock(&region_.lock, &deadline);
    } while (rc == EINTR);
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(&region_.lock);
      rc = 0;
    }
    if (rc == ETIMEDOUT) {
      return absl::UnavailableError(
          absl::StrCat(path, ": its lock has been held for more than ", kLockWait.count(), " ms"));
    }
    if (rc != 0) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": locking it: ", Errno(rc)));
    }
    held_ = true;
    return absl::OkStatus();
  }

 private:
  SliceRegion& region_;
  bool held_ = false;
};

// Whether some open file description holds the OFD lock of slot `index` (its process is alive).
// An error reading the lock says alive: a slot is never called dead without the kernel saying so.
bool SlotAlive(int fd, int index) {
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_start = SlotLockOffset(index);
  probe.l_len = 1;
  probe.l_pid = 0;
  if (fcntl(fd, F_OFD_GETLK, &probe) != 0) return true;
  return probe.l_type != F_UNLCK;
}

std::string Bounded(const char* text, size_t size) {
  return std::string(text, strnlen(text, size));
}

// The last number of the "NSpid:" line of /proc/<dir>/status (the PID in the process's own
// namespace), or 0.
int LastNsPid(const std::string& status_path) {
  Fd fd(open(status_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return 0;
  char buffer[4096];
  size_t length = 0;
  while (length < sizeof buffer) {
    const ssize_t n = read(fd.get(), buffer + length, sizeof buffer - length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    length += static_cast<size_t>(n);
  }
  const absl::string_view text(buffer, length);
  const size_t at = text.find("\nNSpid:");
  if (at == absl::string_view::npos) return 0;
  absl::string_view line = text.substr(at + 7);
  line = line.substr(0, line.find('\n'));
  const size_t end = line.find_last_not_of(" \t");
  if (end == absl::string_view::npos) return 0;
  line = line.substr(0, end + 1);
  const size_t start = line.find_last_of(" \t");
  int pid = 0;
  if (!absl::SimpleAtoi(start == absl::string_view::npos ? line : line.substr(start + 1), &pid)) {
    return 0;
  }
  return pid;
}

// Whether /proc/<proc_pid> is process `pid` of namespace `pid_ns`.
bool IsProcess(const std::string& proc_pid, std::uint64_t pid_ns, int pid) {
  if (LastNsPid(absl::StrCat("/proc/", proc_pid, "/status")) != pid) return false;
  struct stat st {};
  if (stat(absl::StrCat("/proc/", proc_pid, "/ns/pid").c_str(), &st) != 0) return false;
  return static_cast<std::uint64_t>(st.st_ino) == pid_ns;
}

// FindHostPid for several processes in one pass over /proc: (pid_ns, pid) -> host PID, 0 when
// not found.
std::vector<int> FindHostPids(const std::vector<std::pair<std::uint64_t, int>>& wanted) {
  std::vector<int> found(wanted.size(), 0);
  size_t missing = 0;
  // Outside containers the PID is the same here: one look at /proc/<pid> settles it.
  for (size_t i = 0; i < wanted.size(); ++i) {
    const auto& [pid_ns, pid] = wanted[i];
    if (pid > 0 && IsProcess(std::to_string(pid), pid_ns, pid)) {
      found[i] = pid;
    } else if (pid > 0) {
      ++missing;
    }
  }
  if (missing == 0) return found;
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc", error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    int proc_pid = 0;
    if (!absl::SimpleAtoi(name, &proc_pid) || proc_pid <= 0) continue;
    const int last = LastNsPid(absl::StrCat("/proc/", name, "/status"));
    if (last <= 0) continue;
    for (size_t i = 0; i < wanted.size(); ++i) {
      if (found[i] != 0 || wanted[i].second != last) continue;
      struct stat st {};
      if (stat(absl::StrCat("/proc/", name, "/ns/pid").c_str(), &st) != 0) continue;
      if (static_cast<std::uint64_t>(st.st_ino) != wanted[i].first) continue;
      found[i] = proc_pid;
      if (--missing == 0) return found;
    }
  }
  return found;
}

// A copy of the region with each occupied slot's liveness, taken under its mutex.
struct Copy {
  SliceRegion region;
  bool alive[kMaxProcesses];
};

absl::StatusOr<SliceSnapshot> ReadOpen(int fd, const std::string& path, bool take_flock) {
  Mapping mapping;
  if (absl::Status mapped = MapRegion(fd, path, take_flock, mapping); !mapped.ok()) return mapped;
  auto copy = std::make_unique<Copy>();
  {
    RegionLock lock(*mapping.get());
    if (absl::Status locked = lock.Lock(path); !locked.ok()) return locked;
    std::memcpy(static_cast<void*>(&copy->region), mapping.get(), sizeof(SliceRegion));
    // Under the mutex, so that a slot being taken (its OFD lock is set before the mutex is
    // released) is not seen without its lock.
    for (int i = 0; i < kMaxProcesses; ++i) {
      copy->alive[i] = copy->region.slots[i].pid != 0 && SlotAlive(fd, i);
    }
  }
  const SliceRegion& r = copy->region;
  SliceSnapshot snapshot;
  snapshot.path = path;
  snapshot.id = Bounded(r.slice_id, sizeof r.slice_id);
  snapshot.gpu_uuid = Bounded(r.gpu_uuid, sizeof r.gpu_uuid);
  snapshot.mode = r.mode == static_cast<std::uint32_t>(SliceMode::kMeasure) ? SliceMode::kMeasure
                                                                            : SliceMode::kEnforce;
  snapshot.policy = r.policy == static_cast<std::uint32_t>(SharePolicy::kBorrowIdle)
                        ? SharePolicy::kBorrowIdle
                        : SharePolicy::kStrict;
  snapshot.cap_bytes = r.cap_bytes;
  snapshot.share_milli = r.share_milli < 1000 ? static_cast<int>(r.share_milli) : 0;
  snapshot.context_reserve_bytes = r.context_reserve_bytes;
  snapshot.created_unix_s = r.created_unix_s;
  snapshot.used_bytes = r.used_bytes;
  snapshot.peak_bytes = r.peak_bytes;
  snapshot.allocations = r.allocations;
  snapshot.refused = r.refused;
  snapshot.reclaimed_processes = r.reclaimed_processes;
  snapshot.processes_joined = r.processes_joined;
  snapshot.reclaimed_bytes = r.reclaimed_bytes;
  snapshot.launches = r.launches;
  snapshot.kernel_ns = r.kernel_ns;
  snapshot.throttled_ns = r.throttled_ns;
  snapshot.size_histogram.assign(std::begin(r.size_histogram), std::end(r.size_histogram));
  std::vector<std::pair<std::uint64_t, int>> unresolved;
  std::vector<size_t> unresolved_at;
  for (int i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& slot = r.slots[i];
    if (slot.pid == 0) continue;
    SliceProcess process;
    process.pid = slot.pid;
    process.host_pid = slot.host_pid;
    process.pid_ns = slot.pid_ns;
    process.alive = copy->alive[i];
    process.used_bytes = slot.used_bytes;
    process.peak_bytes = slot.peak_bytes;
    process.context_bytes = slot.context_bytes;
    process.allocations = slot.allocations;
    process.refused = slot.refused;
    process.launches = slot.launches;
    process.kernel_ns = slot.kernel_ns;
    process.throttled_ns = slot.throttled_ns;
    // Only a live process is looked for: a dead one's PID may belong to another process now.
    if (process.host_pid == 0 && process.alive && process.pid_ns != 0) {
      unresolved.emplace_back(process.pid_ns, process.pid);
      unresolved_at.push_back(snapshot.processes.size());
    }
    snapshot.processes.push_back(process);
  }
  if (!unresolved.empty()) {
    const std::vector<int> host_pids = FindHostPids(unresolved);
    for (size_t i = 0; i < unresolved.size(); ++i) {
      snapshot.processes[unresolved_at[i]].host_pid = host_pids[i];
    }
  }
  return snapshot;
}

}  // namespace

std::string SliceDirectory() {
  if (const char* dir = std::getenv("GPUSLICE_SHM_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return "/dev/shm/gpuslice";
}

std::string SlicePath(const std::string& directory, const std::string& slice_id) {
  std::string id = slice_id.substr(0, kSliceIdSize - 1);
  for (char& c : id) {
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
    if (!keep) c = '_';
  }
  return absl::StrCat(directory, "/slice-", id);
}

absl::StatusOr<SliceSnapshot> ReadSlice(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Fd>> fd = OpenRegion(path);
  if (!fd.ok()) return fd.status();
  return ReadOpen((*fd)->get(), path, /*take_flock=*/true);
}

SliceList ListSlices(const std::string& directory) {
  SliceList list;
  std::error_code error;
  std::filesystem::directory_iterator it(directory, error);
  if (error) {
    // No directory: no slice has been made on this machine yet.
    if (error != std::errc::no_such_file_or_directory) {
      list.errors.push_back(absl::StrCat(directory, ": ", error.message()));
    }
    return list;
  }
  for (std::filesystem::directory_iterator end; it != end; it.increment(error)) {
    if (error) {
      list.errors.push_back(absl::StrCat(directory, ": ", error.message()));
      break;
    }
    const std::string name = it->path().filename().string();
    if (name.rfind("slice-", 0) != 0) continue;
    // An empty file is a slice its first process is creating (or died creating; the next one
    // initialises it): not a slice yet, and not an error.
    if (std::error_code size_error; it->file_size(size_error) == 0 && !size_error) continue;
    absl::StatusOr<SliceSnapshot> slice = ReadSlice(it->path().string());
    if (slice.ok()) {
      list.slices.push_back(*std::move(slice));
    } else if (!absl::IsNotFound(slice.status())) {  // removed since it was listed
      list.errors.push_back(std::string(slice.status().message()));
    }
  }
  std::sort(list.slices.begin(), list.slices.end(),
            [](const SliceSnapshot& a, const SliceSnapshot& b) {
              return std::tie(a.id, a.path) < std::tie(b.id, b.path);
            });
  return list;
}

absl::Status RemoveSlice(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Fd>> fd = OpenRegion(path);
  if (!fd.ok()) return fd.status();
  // Exclusive: no process of the slice is opening the file while it is checked and unlinked.
  if (!FlockWithin((*fd)->get(), LOCK_EX)) {
    return absl::UnavailableError(absl::StrCat(path, ": a process of the slice is opening it"));
  }
  absl::StatusOr<SliceSnapshot> slice = ReadOpen((*fd)->get(), path, /*take_flock=*/false);
  if (slice.ok()) {
    int alive = 0;
    for (const SliceProcess& process : slice->processes) alive += process.alive ? 1 : 0;
    if (alive > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": ", alive, " process(es) of slice ", slice->id, " still run"));
    }
  } else if (!absl::IsFailedPrecondition(slice.status())) {
    // A file of another layout may go; one that cannot be read now (its lock held) may not.
    return slice.status();
  }
  if (unlink(path.c_str()) != 0) {
    const int error = errno;
    return absl::Status(absl::ErrnoToStatusCode(error),
                        absl::StrCat(path, ": unlink: ", Errno(error)));
  }
  return absl::OkStatus();
}

int FindHostPid(std::uint64_t pid_ns, int pid) {
  if (pid <= 0) return 0;
  return FindHostPids({{pid_ns, pid}}).front();
}

}  // namespace gpuslice::shim
