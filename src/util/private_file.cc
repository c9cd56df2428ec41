#include "gpuslice/util/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpuslice::util {
namespace {

absl::Status Failed(const std::string& what, const std::string& path) {
  return absl::PermissionDeniedError(
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

absl::Status WritePrivateFile(const std::string& path, const std::string& content) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  // A leftover (or a planted link) at the temporary name is removed, not followed.
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) return Failed("remove", tmp);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Failed("create", tmp);
  bool ok = ::fchmod(fd, 0600) == 0;  // whatever the umask
  for (std::size_t done = 0; ok && done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const absl::Status written = ok ? absl::OkStatus() : Failed("write", tmp);
  ::close(fd);
  if (written.ok() && ::rename(tmp.c_str(), path.c_str()) == 0) return absl::OkStatus();
  const absl::Status failed = written.ok() ? Failed("rename onto", path) : written;
  ::unlink(tmp.c_str());
  return failed;
}

}  // namespace gpuslice::util
