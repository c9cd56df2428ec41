// The shared files of slices and schedules (src/shim/shared_file.h): a new file is initialised
// once and gets its header; a file of another layout is refused; a file removed while a process
// was opening it (gpuslice's RemoveSlice holds the file's flock while it checks and unlinks) is
// not used: the process opens the path again.
#include "shared_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "gpuslice/shim/slice_region.h"
#include "temp_dir.h"

namespace gpuslice::shim {
namespace {

constexpr std::size_t kSize = 4096;

struct Header {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t size;
};

void CountInit(void* map, const void* context) {
  static_cast<unsigned char*>(map)[kSize - 1] = 7;  // past the header: the init's mark
  ++*static_cast<int*>(const_cast<void*>(context));
}

void Unmap(SharedFile* file) {
  munmap(file->map, kSize);
  close(file->fd);
}

// Whether a process waits for a flock on the file with inode `inode` (a "->" line of /proc/locks).
bool SomeoneWaitsForTheFlock(ino_t inode) {
  std::ifstream locks("/proc/locks");
  const std::string suffix = ":" + std::to_string(inode);
  for (std::string line; std::getline(locks, line);) {
    if (line.find("->") == std::string::npos || line.find("FLOCK") == std::string::npos) continue;
    std::istringstream fields(line);
    for (std::string field; fields >> field;) {
      if (field.size() > suffix.size() &&
          field.compare(field.size() - suffix.size(), suffix.size(), suffix) == 0) {
        return true;
      }
    }
  }
  return false;
}

// Each test maps `path_` (in a fresh directory) with CountInit counting into `inits_`.
class SharedFileTest : public ::testing::Test {
 protected:
  bool Map(SharedFile* file, std::string* error) {
    return MapSharedFile(path_, kSize, "test file", CountInit, &inits_, file, error);
  }

  TempDir dir_;
  const std::string path_ = dir_ / "slice-x";
  int inits_ = 0;
};

TEST_F(SharedFileTest, ANewFileIsInitialisedOnceAndGetsItsHeader) {
  SharedFile first;
  std::string error;
  ASSERT_TRUE(Map(&first, &error)) << error;
  SharedFile second;
  ASSERT_TRUE(Map(&second, &error)) << error;
  EXPECT_EQ(inits_, 1);
  const auto* header = static_cast<const Header*>(second.map);
  EXPECT_EQ(header->magic, kRegionMagic);
  EXPECT_EQ(header->version, kRegionVersion);
  EXPECT_EQ(header->size, kSize);
  EXPECT_EQ(static_cast<const unsigned char*>(second.map)[kSize - 1], 7);
  Unmap(&first);
  Unmap(&second);
}

TEST_F(SharedFileTest, AFileOfAnotherLayoutIsRefusedAndLeftAsItIs) {
  SharedFile file;
  std::string error;
  ASSERT_TRUE(Map(&file, &error)) << error;
  static_cast<Header*>(file.map)->version = kRegionVersion + 1;
  SharedFile again;
  EXPECT_FALSE(Map(&again, &error));
  EXPECT_NE(error.find("another layout"), std::string::npos) << error;
  EXPECT_NE(error.find(path_), std::string::npos) << error;
  EXPECT_EQ(again.map, nullptr);
  EXPECT_EQ(static_cast<Header*>(file.map)->version, kRegionVersion + 1);
  Unmap(&file);
}

// The remover holds the flock; the opener has the file open and waits for the lock; the remover
// unlinks the file and lets go. The opener must not keep the unlinked file (its accounting would
// be seen by no one): it opens the path again and creates the slice's file anew.
TEST_F(SharedFileTest, AFileRemovedWhileItWasOpenedIsOpenedAgain) {
  SharedFile old;
  std::string error;
  ASSERT_TRUE(Map(&old, &error)) << error;
  struct stat removed {};
  ASSERT_EQ(fstat(old.fd, &removed), 0);
  ASSERT_EQ(flock(old.fd, LOCK_EX), 0);

  SharedFile opened;
  std::string open_error;
  std::future<bool> opener =
      std::async(std::launch::async, [&] { return Map(&opened, &open_error); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!SomeoneWaitsForTheFlock(removed.st_ino) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(SomeoneWaitsForTheFlock(removed.st_ino)) << "the opener never waited for the lock";
  ASSERT_EQ(unlink(path_.c_str()), 0);
  flock(old.fd, LOCK_UN);

  ASSERT_TRUE(opener.get()) << open_error;
  struct stat now_at_path {};
  ASSERT_EQ(stat(path_.c_str(), &now_at_path), 0) << "the opener did not create the file again";
  struct stat mapped {};
  ASSERT_EQ(fstat(opened.fd, &mapped), 0);
  EXPECT_GT(mapped.st_nlink, 0u);
  EXPECT_EQ(mapped.st_ino, now_at_path.st_ino);
  EXPECT_EQ(inits_, 2);  // the new file was initialised
  Unmap(&opened);
  Unmap(&old);
}

}  // namespace
}  // namespace gpuslice::shim
