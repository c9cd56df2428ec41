// slice_region.h: the accounting one software slice shares between its processes.
//
// The CUDA interposer (libgpuslice-cuda.so, src/shim/) keeps each slice's accounting in one file
// mapped shared by every process of the slice: `<dir>/slice-<id>`, where <dir> is
// $GPUSLICE_SHM_DIR or /dev/shm/gpuslice and <id> is the slice id (GPUSLICE_SLICE, else
// "lease-<GPUSLICE_LEASE>"). The agent, `gpuslice measure` and tests read the same file (see
// gpuslice/shim/slices.h); this header is the one contract between them and the interposer.
//
// Rules every writer and reader follows:
//   * The layout below is plain data (no pointers); `magic`, `version` and `size` must match
//     before anything else is read.
//   * `lock` is a process-shared, robust pthread mutex. Every field after it is read and written
//     only while holding it. A holder that died leaves EOWNERDEAD: the next locker marks the mutex
//     consistent and reclaims dead processes' slots before going on.
//   * Each process holds, for as long as it lives, an OFD write lock (fcntl F_OFD_SETLK) on the
//     one byte at offset `SlotLockOffset(i)` of the file, i being its slot. The kernel drops it
//     when the process dies however it dies, so a slot whose byte nobody locks belongs to a dead
//     process: its bytes are uncounted (`used_bytes` -= slot's) and the slot is freed.
//   * Totals in the region (launches, kernel_ns, throttled_ns, refused, ...) are cumulative over
//     the slice's life, dead processes included; `used_bytes` is the live processes' sum.
// Initialisation: the first opener takes flock(LOCK_EX) on the file, finds magic 0, fills the
// header and initialises the mutex, then releases the flock; later openers take flock(LOCK_SH)
// only to wait for that.
#pragma once

#include <pthread.h>

#include <cstdint>

namespace gpuslice::shim {

inline constexpr std::uint32_t kRegionMagic = 0x67736c63u;  // "gslc"
inline constexpr std::uint32_t kRegionVersion = 2;
inline constexpr int kMaxProcesses = 256;
inline constexpr int kSizeHistogramBuckets = 48;  // allocations by floor(log2(bytes))
inline constexpr int kSliceIdSize = 64;           // NUL-terminated, [A-Za-z0-9._-]
inline constexpr int kGpuUuidSize = 48;           // "GPU-xxxxxxxx-...", NUL-terminated

enum class SliceMode : std::uint32_t {
  kEnforce = 0,  // the cap and the share are in force
  kMeasure = 1,  // nothing is refused or throttled; everything is counted and timed
};

enum class SharePolicy : std::uint32_t {
  kStrict = 0,      // never more than the share, even on an idle GPU (the default)
  kBorrowIdle = 1,  // beyond the share while no other slice on the GPU has launched recently
};

struct ProcessSlot {
  std::int32_t pid;           // in the process's own PID namespace; 0 = free slot
  std::int32_t host_pid;      // the first NSpid entry of /proc/self/status when it has more than
                              // one (the PID further out); 0 otherwise: readers resolve it
  std::uint64_t pid_ns;       // inode of /proc/self/ns/pid: with pid, finds the host PID
  std::uint64_t start_ticks;  // field 22 of /proc/self/stat: tells a reused PID apart
  std::uint64_t used_bytes;   // counted now: live allocations and context reservations
  std::uint64_t peak_bytes;
  std::uint64_t context_bytes;  // the part of used_bytes that is context reservations
  std::uint64_t allocations;    // successful allocation calls
  std::uint64_t refused;        // allocation calls refused at the cap
  std::uint64_t launches;       // kernel and graph launches
  std::uint64_t kernel_ns;      // GPU time of its launches, measured with events
  std::uint64_t throttled_ns;   // time its launches were held back for the share
};

struct SliceRegion {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t size;  // sizeof(SliceRegion)
  std::uint32_t
      processes_joined;  // processes that ever took a slot (a process that exits frees its slot)
  pthread_mutex_t lock;

  char slice_id[kSliceIdSize];
  char gpu_uuid[kGpuUuidSize];  // the GPU of the slice's first context; "" until then
  std::uint32_t mode;           // SliceMode
  std::uint32_t policy;         // SharePolicy
  std::uint64_t cap_bytes;      // 0 = no VRAM cap
  std::uint32_t share_milli;    // 1..999 = compute share; 0 or >= 1000 = no compute limit
  std::uint32_t reserved1;
  std::uint64_t context_reserve_bytes;  // counted for each context a process creates
  std::uint64_t created_unix_s;

  std::uint64_t used_bytes;  // sum over live slots
  std::uint64_t peak_bytes;  // highest used_bytes ever
  std::uint64_t allocations;
  std::uint64_t refused;
  std::uint64_t reclaimed_processes;  // dead processes whose slots were reclaimed
  std::uint64_t reclaimed_bytes;      // and the bytes they still held
  std::uint64_t launches;
  std::uint64_t kernel_ns;
  std::uint64_t throttled_ns;

  std::uint64_t last_launch_ns;  // CLOCK_MONOTONIC of the slice's latest launch (relaxed atomic)

  std::uint64_t size_histogram[kSizeHistogramBuckets];
  ProcessSlot slots[kMaxProcesses];
};

// The compute shares of the slices on one GPU: `<dir>/gpu-<uuid>`. Each slice with a share takes
// an entry; every process of the slice holds an OFD read lock on the entry's byte
// (SlotLockOffset(entry)), so the entry is alive while any of them lives. The live entries, in
// index order, divide each period of kSchedulePeriodNs: entry i runs in
// [sum of shares before i, + its share) thousandths of the period (scaled down when the shares add
// up to more than 1000). `generation` changes whenever an entry is taken or freed. Same locking
// and initialisation rules as SliceRegion. The slice's processes publish when the work they
// enqueued is predicted to end (CLOCK_MONOTONIC): `busy_until_ns` for all of it, and
// `overrun_until_ns` for what was launched inside the slice's own window, which the next slice
// waits for (src/shim/throttle.h); after a launch longer than the slice's window,
// `paid_until_ns`, until which the slice's processes launch nothing. All three only rise.
inline constexpr int kMaxScheduledSlices = 64;
inline constexpr std::uint64_t kSchedulePeriodNs = 50'000'000;

struct ScheduleEntry {
  char slice_id[kSliceIdSize];  // "" = free
  std::uint32_t share_milli;
  std::uint32_t policy;            // SharePolicy
  std::uint64_t busy_until_ns;     // atomic
  std::uint64_t overrun_until_ns;  // atomic
  std::uint64_t paid_until_ns;     // atomic
};

struct GpuSchedule {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t size;  // sizeof(GpuSchedule)
  std::uint32_t reserved0;
  pthread_mutex_t lock;
  std::uint64_t generation;
  ScheduleEntry entries[kMaxScheduledSlices];
};

// The byte of the region file whose OFD lock says slot `index` is alive. Beyond the end of the
// file: fcntl locks may cover bytes that do not exist.
inline constexpr long SlotLockOffset(int index) { return (1L << 24) + index; }

}  // namespace gpuslice::shim
