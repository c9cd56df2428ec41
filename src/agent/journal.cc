#include "gpuslice/agent/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include "nlohmann/json.hpp"

namespace gpuslice::agent {
namespace {

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

constexpr size_t kCompactAbove = 1 << 20;  // start afresh when a finished journal exceeds 1 MiB

}  // namespace

absl::StatusOr<Journal> Journal::Open(const std::string& path) {
  Journal journal(path);
  std::ifstream file(path);
  if (!file) return journal;  // no journal yet: nothing was interrupted
  std::string line;
  std::optional<InterruptedApply> open;
  size_t bytes = 0;
  while (std::getline(file, line)) {
    bytes += line.size() + 1;
    if (line.empty()) continue;
    nlohmann::json entry = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (entry.is_discarded() || !entry.is_object()) continue;  // a torn last line after a crash
    const std::string event = entry.value("event", "");
    if (event == "begin") {
      open = InterruptedApply{entry.value("time", ""), entry.value("description", ""), 0,
                              entry.value("steps", 0), ""};
    } else if (event == "step-started" && open) {
      open->last_step = entry.value("text", "");
    } else if (event == "step-done" && open && entry.value("error", "").empty()) {
      open->steps_done = entry.value("index", 0) + 1;
    } else if (event == "end") {
      open.reset();
    }
  }
  journal.interrupted_ = open;
  if (!open && bytes > kCompactAbove) std::remove(path.c_str());
  return journal;
}

absl::Status Journal::Append(const std::string& json_line) {
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError("cannot write the apply journal " + path_ + ": " +
                                       std::strerror(errno));
  }
  const std::string text = json_line + "\n";
  const ssize_t written = ::write(fd, text.data(), text.size());
  const int sync = ::fsync(fd);
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size()) || sync != 0) {
    return absl::DataLossError("writing the apply journal " + path_ + " failed");
  }
  return absl::OkStatus();
}

absl::Status Journal::Begin(const std::string& description, int total_steps) {
  return Append(nlohmann::json{
      {"event", "begin"}, {"time", UtcNow()}, {"description", description}, {"steps", total_steps}}
                    .dump());
}

absl::Status Journal::StepStarted(int index, const std::string& text) {
  return Append(nlohmann::json{{"event", "step-started"}, {"index", index}, {"text", text}}.dump());
}

absl::Status Journal::StepDone(int index, const std::string& text, const std::string& error) {
  return Append(
      nlohmann::json{{"event", "step-done"}, {"index", index}, {"text", text}, {"error", error}}
          .dump());
}

absl::Status Journal::End(bool ok, const std::string& summary) {
  return Append(
      nlohmann::json{{"event", "end"}, {"time", UtcNow()}, {"ok", ok}, {"summary", summary}}
          .dump());
}

}  // namespace gpuslice::agent
