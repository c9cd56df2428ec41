// Small pure helpers that stand between hostile text and a shell, a file or JSON: shell quoting
// (checked against /bin/sh itself, with random strings), the words that survive an unquoted
// command substitution, UTF-8 checks and cuts, NVML's UUID forms, private files, and the signs
// of NVIDIA hardware serve looks for before simulating a fleet.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include "gpuslice/device/presence.h"
#include "gpuslice/device/uuid.h"
#include "gpuslice/util/clock.h"
#include "gpuslice/util/private_file.h"
#include "gpuslice/util/shell.h"
#include "gpuslice/util/utf8.h"
#include "temp_dir.h"

namespace gpuslice {
namespace {

// What /bin/sh makes of `export V=<quoted>; printf %s "$V"`: the oracle for ShellQuote.
std::string ThroughTheShell(const std::string& value) {
  const std::string script = "export V=" + util::ShellQuote(value) + "; printf %s \"$V\"";
  // The script goes to sh on its standard input, so no other quoting is involved.
  const std::string file = ::testing::TempDir() + "/quote_" + std::to_string(getpid()) + ".sh";
  {
    std::ofstream out(file, std::ios::binary);
    out << script;
  }
  FILE* pipe = ::popen(("sh " + file).c_str(), "r");
  std::string out;
  char buf[4096];
  for (std::size_t n; pipe != nullptr && (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) {
    out.append(buf, n);
  }
  if (pipe != nullptr) ::pclose(pipe);
  return out;
}

TEST(ShellQuote, HostileValuesComeBackUnchanged) {
  for (const std::string& value :
       {std::string("MIG-x'$(id)'"), std::string("a'b\"c`d`$HOME\\n;|&<>*?[x]"), std::string("'"),
        std::string("''"), std::string(""), std::string("new\nline"),
        std::string("$(touch /tmp/gpuslice-pwned)")}) {
    EXPECT_EQ(ThroughTheShell(value), value);
  }
}

RC_GTEST_PROP(ShellQuote, AnyTextWithoutNulComesBackUnchanged, ()) {
  const std::string value = *rc::gen::container<std::string>(
      rc::gen::suchThat(rc::gen::arbitrary<char>(), [](char c) { return c != '\0'; }));
  RC_ASSERT(ThroughTheShell(value) == value);
}

TEST(ShellWords, OnlyWordsThatSurviveSplittingAndGlobbing) {
  EXPECT_TRUE(util::IsSplitSafeWord("--gpus"));
  EXPECT_TRUE(util::IsSplitSafeWord("\"device=GPU-1,MIG-2\""));
  EXPECT_TRUE(util::IsSplitSafeWord("/usr/lib/gpuslice/libgpuslice-cuda.so:/x:ro"));
  for (const char* bad : {"a b", "a\tb", "x*", "?", "[a]", "$(id)", "a'b", "", "a\nb", "~"}) {
    EXPECT_FALSE(util::IsSplitSafeWord(bad)) << bad;
  }
  EXPECT_TRUE(util::IsEnvName("CUDA_VISIBLE_DEVICES"));
  for (const char* bad : {"", "1A", "A-B", "A B", "A=B", "A;id"}) {
    EXPECT_FALSE(util::IsEnvName(bad)) << bad;
  }
}

TEST(Utf8, ValidatesAndCutsBetweenCharacters) {
  EXPECT_TRUE(util::IsValidUtf8("plain é € 😀"));
  for (const std::string& bad : {std::string("\xc3"), std::string("\x80"), std::string("\xc0\xaf"),
                                 std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80")}) {
    EXPECT_FALSE(util::IsValidUtf8(bad));
  }
  const std::string text = std::string(116, 'a') + "\xc3\xa9" + "z";
  EXPECT_EQ(util::Utf8Prefix(text, 117), std::string(116, 'a'));
  EXPECT_EQ(util::Utf8Prefix(text, 118), std::string(116, 'a') + "\xc3\xa9");
  EXPECT_EQ(util::Utf8Prefix("€uro", 2), "");
  EXPECT_FALSE(util::IsPrintableUtf8(std::string("a\0b", 3)));
  EXPECT_FALSE(util::IsPrintableUtf8("a\x1b[2J"));
  EXPECT_TRUE(util::IsPrintableUtf8("a\tb", true));
  EXPECT_FALSE(util::IsPrintableUtf8("a\tb", false));
}

TEST(Utf8, ForTerminalEscapesControlsAndBrokenBytesAndKeepsTheRest) {
  EXPECT_EQ(util::ForTerminal("plain é € 😀 ─┼"), "plain é € 😀 ─┼");
  EXPECT_EQ(util::ForTerminal("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(util::ForTerminal(std::string("a\0\n\t\x7f", 5)), "a\\x00\\x0a\\x09\\x7f");
  EXPECT_EQ(util::ForTerminal("\xc2\x9b"
                              "31m"),
            "\\xc2\\x9b"
            "31m")
      << "C1 CSI";
  EXPECT_EQ(util::ForTerminal("\xc2\xa0"), "\xc2\xa0") << "no-break space is printable";
  EXPECT_EQ(util::ForTerminal("\xc3(\xff"), "\\xc3(\\xff");
}

// Whatever the bytes, what ForTerminal shows is printable UTF-8 (no control character at all).
RC_GTEST_PROP(Utf8, ForTerminalShowsOnlyPrintableText, (const std::string& bytes)) {
  const std::string shown = util::ForTerminal(bytes);
  RC_ASSERT(util::IsPrintableUtf8(shown));
  RC_ASSERT(shown.find("\xc2\x80") == std::string::npos);
}

RC_GTEST_PROP(Utf8, APrefixOfValidTextIsValidAndAsLongAsItCanBe, ()) {
  std::string text;
  for (const int c : *rc::gen::container<std::vector<int>>(rc::gen::inRange(1, 0x10ffff))) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    const auto u = static_cast<unsigned>(c);
    if (u < 0x80) {
      text += static_cast<char>(u);
    } else if (u < 0x800) {
      text += static_cast<char>(0xc0 | (u >> 6));
      text += static_cast<char>(0x80 | (u & 0x3f));
    } else if (u < 0x10000) {
      text += static_cast<char>(0xe0 | (u >> 12));
      text += static_cast<char>(0x80 | ((u >> 6) & 0x3f));
      text += static_cast<char>(0x80 | (u & 0x3f));
    } else {
      text += static_cast<char>(0xf0 | (u >> 18));
      text += static_cast<char>(0x80 | ((u >> 12) & 0x3f));
      text += static_cast<char>(0x80 | ((u >> 6) & 0x3f));
      text += static_cast<char>(0x80 | (u & 0x3f));
    }
  }
  RC_ASSERT(util::IsValidUtf8(text));
  const std::size_t max = *rc::gen::inRange<std::size_t>(0, text.size() + 2);
  const std::string prefix = util::Utf8Prefix(text, max);
  RC_ASSERT(prefix.size() <= max);
  RC_ASSERT(util::IsValidUtf8(prefix));
  RC_ASSERT(text.compare(0, prefix.size(), prefix) == 0);
  // No longer prefix within `max` ends between characters.
  for (std::size_t longer = prefix.size() + 1; longer <= std::min(max, text.size()); ++longer) {
    RC_ASSERT(!util::IsValidUtf8(text.substr(0, longer)));
  }
}

TEST(DeviceUuid, AcceptsWhatNvmlWritesAndNothingElse) {
  EXPECT_TRUE(device::IsGpuUuid("GPU-5e2a2f6d-0c24-9e3a-1f4c-8d2b7a6e9f01"));
  EXPECT_TRUE(device::IsMigUuid("MIG-5e2a2f6d-0c24-9e3a-1f4c-8d2b7a6e9f01"));
  EXPECT_TRUE(device::IsMigUuid("MIG-GPU-5e2a2f6d-0c24-9e3a-1f4c-8d2b7a6e9f01/7/0"));
  for (const char* bad :
       {"", "GPU-", "GPU-r1-0", "MIG-x'$(id)'", "GPU-5e2a2f6d-0c24-9e3a-1f4c-8d2b7a6e9f01 ",
        "GPU-5e2a2f6d-0c24-9e3a-1f4c-8d2b7a6e9f0g",
        "MIG-GPU-5e2a2f6d-0c24-9e3a-1f4c-8d2b7a6e9f01/7",
        "MIG-GPU-5e2a2f6d-0c24-9e3a-1f4c-8d2b7a6e9f01/7/0/1",
        "gpu-5e2a2f6d-0c24-9e3a-1f4c-8d2b7a6e9f01"}) {
    EXPECT_FALSE(device::IsDeviceUuid(bad)) << bad;
  }
}

TEST(PrivateFile, IsWrittenOwnerOnlyAndNeverThroughALink) {
  gpuslice::TempDir dir;
  const std::string path = dir.path() + "/token";
  const std::string victim = dir.path() + "/victim";
  { std::ofstream(victim) << "unchanged"; }
  // A link planted at the temporary name this process would use.
  ASSERT_EQ(::symlink(victim.c_str(), (path + ".tmp." + std::to_string(getpid())).c_str()), 0);
  ASSERT_TRUE(util::WritePrivateFile(path, "secret\n").ok());
  std::ifstream victim_in(victim);
  std::string text((std::istreambuf_iterator<char>(victim_in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "unchanged");
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777u, 0600u);
  EXPECT_FALSE(util::WritePrivateFile(dir.path() + "/no/such/dir/file", "x").ok());
}

TEST(NvidiaTraces, FindsDriverDevicesAndPciGpusOnly) {
  gpuslice::TempDir root;
  EXPECT_TRUE(device::NvidiaTraces(root.path()).empty());
  namespace fs = std::filesystem;
  const auto write = [&](const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(root.path() + path).parent_path());
    std::ofstream(root.path() + path) << text << "\n";
  };
  write("/sys/bus/pci/devices/0000:00:02.0/vendor", "0x8086");  // another vendor's display
  write("/sys/bus/pci/devices/0000:00:02.0/class", "0x030000");
  write("/sys/bus/pci/devices/0000:00:1f.0/vendor", "0x10de");  // NVIDIA, but an audio device
  write("/sys/bus/pci/devices/0000:00:1f.0/class", "0x040300");
  EXPECT_TRUE(device::NvidiaTraces(root.path()).empty());
  write("/sys/bus/pci/devices/0000:3b:00.0/vendor", "0x10de");
  write("/sys/bus/pci/devices/0000:3b:00.0/class", "0x030200");
  write("/dev/nvidiactl", "");
  const std::vector<std::string> found = device::NvidiaTraces(root.path());
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0], "/dev/nvidiactl exists");
  EXPECT_EQ(found[1], "an NVIDIA GPU at PCI 0000:3b:00.0");
}

// The one wall clock of the code: whole seconds since the epoch, the same as time(2).
TEST(EpochNow, IsTheSystemClockInWholeSeconds) {
  const std::int64_t before = static_cast<std::int64_t>(std::time(nullptr));
  const std::int64_t now = util::EpochNow();
  const std::int64_t after = static_cast<std::int64_t>(std::time(nullptr));
  EXPECT_LE(before, now);
  EXPECT_LE(now, after);
  EXPECT_GT(now, 1'600'000'000);  // after September 2020: not a monotonic clock's count
}

}  // namespace
}  // namespace gpuslice
