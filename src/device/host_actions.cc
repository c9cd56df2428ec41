// DefaultHostActions: what production does outside NVML (nvidia-smi resets, signals).
#include "gpuslice/device/host_actions.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/util/subprocess.h"

namespace gpuslice::device {
namespace {

std::string Str(int value) { return std::to_string(value); }
std::string GpuText(int gpu) { return "GPU " + Str(gpu); }

// Runs `argv` (PATH lookup), returns its exit status (127 if it could not be run, -1 if no child
// could be started) and output.
int RunCommand(const std::vector<std::string>& argv, std::string* output) {
  util::SubprocessOptions options;
  options.argv = argv;
  options.output = util::SubprocessOptions::Output::kCapture;
  absl::StatusOr<util::Subprocess> child = util::Subprocess::Start(std::move(options));
  if (!child.ok()) return absl::IsInternal(child.status()) ? -1 : 127;
  absl::StatusOr<util::ExitStatus> done = child->Wait();
  *output += child->output();
  return done.ok() ? done->ShellCode() : -1;
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string FirstLines(const std::string& text, size_t max_chars) {
  std::string out;
  for (char c : text) {
    if (out.size() >= max_chars) {
      out += "…";
      break;
    }
    out.push_back(c == '\n' ? ' ' : c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

class DefaultActions : public HostActions {
 public:
  absl::Status ResetGpu(int gpu) override {
    // NVML has no public reset function: nvidia-smi does it.
    const std::vector<std::string> argv = {"nvidia-smi", "--gpu-reset", "-i", Str(gpu)};
    std::string output;
    const int status = RunCommand(argv, &output);
    if (status == 0) return absl::OkStatus();
    const std::string command = "nvidia-smi --gpu-reset -i " + Str(gpu);
    if (status == 127) {
      return absl::UnavailableError("cannot reset " + GpuText(gpu) +
                                    ": NVML has no reset function and `" + command +
                                    "` could not be run (nvidia-smi not on PATH?)");
    }
    if (status < 0) {
      return absl::InternalError("cannot run `" + command + "`: " + std::strerror(errno));
    }
    // nvidia-smi exits with the NVML code for most failures; its text tells the rest.
    const std::string text = Lower(output);
    const bool known_code =
        status > 0 && status < 128 && NvmlCodeName(status) != "NVML_ERROR_" + Str(status);
    int code = kNvmlUnknown;
    if (text.find("in use") != std::string::npos) {
      code = kNvmlInUse;
    } else if (known_code) {
      code = status;
    } else if (text.find("not supported") != std::string::npos) {
      code = kNvmlNotSupported;
    } else if (text.find("permission") != std::string::npos) {
      code = kNvmlNoPermission;
    }
    std::string detail = FirstLines(output, 300);
    return NvmlError(code, "`" + command + "` exited with " + Str(status) +
                               (detail.empty() ? std::string() : " (\"" + detail + "\")"));
  }

  absl::Status TerminateProcess(std::uint32_t pid, int grace_seconds) override {
    return SignalProcess(pid, grace_seconds);
  }
};

}  // namespace

std::unique_ptr<HostActions> DefaultHostActions() { return std::make_unique<DefaultActions>(); }

}  // namespace gpuslice::device
