// gpuslice/util/private_file.h — files only their owner may read (tokens, keys), written so that
// no other user can ever read them or redirect the write.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace gpuslice::util {

// Writes `content` to `path` atomically: a temporary file beside it, created new with mode 0600
// (O_EXCL, O_NOFOLLOW: a link planted at the temporary name is refused, never followed), synced,
// then renamed over `path`. On failure `path` is unchanged and the temporary file is removed.
absl::Status WritePrivateFile(const std::string& path, const std::string& content);

}  // namespace gpuslice::util
