#include "gpuslice/device/presence.h"

#include <filesystem>
#include <fstream>
#include <system_error>

namespace gpuslice::device {
namespace {

std::string FirstLine(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::vector<std::string> NvidiaTraces(const std::string& root) {
  namespace fs = std::filesystem;
  const fs::path base(root);
  std::vector<std::string> found;
  std::error_code ec;
  for (const char* path : {"proc/driver/nvidia/version", "dev/nvidiactl", "dev/nvidia0"}) {
    if (fs::exists(base / path, ec)) found.push_back(std::string("/") + path + " exists");
  }
  const fs::path pci = base / "sys/bus/pci/devices";
  if (fs::is_directory(pci, ec)) {
    for (const fs::directory_entry& device : fs::directory_iterator(pci, ec)) {
      if (FirstLine(device.path() / "vendor") != "0x10de") continue;
      if (FirstLine(device.path() / "class").rfind("0x03", 0) != 0) continue;
      found.push_back("an NVIDIA GPU at PCI " + device.path().filename().string());
    }
  }
  return found;
}

}  // namespace gpuslice::device
