// A file mapped shared by processes that do not trust each other to be alive: a slice's
// accounting (SliceRegion) or a GPU's schedule (GpuSchedule), both of which start with
// magic, version and size and hold a robust process-shared mutex.
//
// MapSharedFile opens (creating, mode 0666) `path`, grows it to `size`, maps it, and — under an
// exclusive flock, so two first openers cannot both initialise it — either finds a header that
// matches (kRegionMagic, kRegionVersion, `size`) or, in a new file, calls `init` on the mapping
// and then writes the header last. On failure it returns false with a sentence naming `what` and
// the path, and leaves nothing open. A file unlinked between its open and the lock (a slice
// removed meanwhile) is not used: the path is opened again.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <string>

namespace gpuslice::shim {

struct SharedFile {
  int fd = -1;
  void* map = nullptr;
};

bool MapSharedFile(const std::string& path, std::size_t size, const std::string& what,
                   void (*init)(void* map, const void* context), const void* context,
                   SharedFile* out, std::string* error);

// Whether another open file description holds a lock on byte SlotLockOffset(index) of `fd` (the
// liveness of a slice's process or a schedule's entry). This process's own lock does not show.
// When the kernel cannot tell, it answers true: nothing is reclaimed on a guess.
bool ByteLockedByOthers(int fd, int index);

// Initialises a process-shared, robust mutex in shared memory.
void InitRobustMutex(pthread_mutex_t* mutex);

}  // namespace gpuslice::shim
