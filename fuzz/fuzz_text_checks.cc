// The checks between hostile text and a shell or JSON (gpuslice/util/shell.h, utf8.h,
// gpuslice/device/uuid.h) on arbitrary bytes. Invariants: a UTF-8 prefix is valid and no longer
// than asked; a quoted word has balanced quotes and nothing outside them; a device UUID never
// holds a byte a shell or docker would act on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gpuslice/device/uuid.h"
#include "gpuslice/util/shell.h"
#include "gpuslice/util/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (gpuslice::util::IsValidUtf8(text)) {
    for (std::size_t max : {std::size_t{0}, size / 2, size > 0 ? size - 1 : 0}) {
      const std::string prefix = gpuslice::util::Utf8Prefix(text, max);
      if (prefix.size() > max || !gpuslice::util::IsValidUtf8(prefix)) std::abort();
    }
  }
  const std::string quoted = gpuslice::util::ShellQuote(text);
  if (quoted.size() < 2 || quoted.front() != '\'' || quoted.back() != '\'') std::abort();
  if (gpuslice::device::IsDeviceUuid(text) && !gpuslice::util::IsSplitSafeWord(text)) std::abort();
  return 0;
}
