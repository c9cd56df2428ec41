// `gpuslice measure -- CMD`: runs CMD under the CUDA interposer in measuring mode (nothing refused
// or throttled, everything counted and timed: docs/SHIM.md), then reports what its slice used —
// peak VRAM, allocations by size, launches, kernel time, processes — and, for every GPU model of
// the catalog, the smallest MIG profile that holds the peak with the planner's headroom.
// --workload-out writes the measurement as a `gpuslice plan -w` workloads file.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common.h"
#include "gpuslice/plan/model.h"
#include "gpuslice/plan/sizing.h"
#include "gpuslice/shim/slices.h"
#include "gpuslice/util/subprocess.h"
#include "interposer_path.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

constexpr double kMib = 1024.0 * 1024.0;
constexpr double kGib = 1024.0 * kMib;

struct MeasureOptions {
  std::string name;
  std::string kind = "inference";
  double headroom_pct = -1;  // < 0: the planner's default for the kind
  bool json_output = false;
  bool keep = false;
  std::string workload_out;
  std::vector<std::string> command;
};

// The child being measured, for the signal handler (0 until it exists), and a signal that
// arrived before it did.
std::atomic<pid_t> g_child{0};
std::atomic<int> g_pending_signal{0};

// Forwards SIGINT/SIGTERM sent to gpuslice to the child. A terminal's Ctrl-C (si_code
// SI_KERNEL) already reached the child, which is in the same process group: not sent twice.
void ForwardSignal(int signal, siginfo_t* info, void*) {
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  const pid_t child = g_child.load();
  if (child > 0) {
    kill(child, signal);
  } else {
    g_pending_signal.store(signal);
  }
}

// "64 MiB" for a power of two.
std::string PowerOfTwoText(int exponent) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const int unit = exponent / 10;
  return absl::StrCat(std::uint64_t{1} << (exponent - unit * 10), " ",
                      kUnits[static_cast<size_t>(unit)]);
}

// Bucket i of the size histogram holds allocations of [2^i, 2^(i+1)) bytes: "64-128 MiB",
// "512 KiB-1 MiB".
std::string BucketText(int bucket) {
  const std::string low = PowerOfTwoText(bucket);
  const std::string high = PowerOfTwoText(bucket + 1);
  const size_t low_space = low.find(' ');
  const size_t high_space = high.find(' ');
  if (low.substr(low_space) == high.substr(high_space)) {
    return absl::StrCat(low.substr(0, low_space), "-", high);
  }
  return absl::StrCat(low, "-", high);
}

std::string MibText(std::uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / kMib);
}

// Peak bytes in GiB rounded up to 0.1 (at least 0.1: the planner wants a positive peak).
double PeakGibRoundedUp(std::uint64_t bytes) {
  const double tenths = std::ceil(static_cast<double>(bytes) / kGib * 10.0 - 1e-9);
  return std::max(tenths, 1.0) / 10.0;
}

bool ValidWorkloadName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// The command's basename with every character the planner does not take in a name made '-'.
std::string NameFromCommand(const std::string& command) {
  std::string name = std::filesystem::path(command).filename().string();
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '-';
  }
  if (name.size() > 128) name.resize(128);
  return name.empty() ? "measured" : name;
}

// Shell-like text of the command, for messages.
std::string CommandText(const std::vector<std::string>& command) {
  std::vector<std::string> words;
  for (const std::string& word : command) {
    const bool plain =
        !word.empty() && word.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
    words.push_back(plain ? word
                          : absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'"));
  }
  return absl::StrJoin(words, " ");
}

// A fresh directory for the slice's accounting file, under $TMPDIR or /tmp.
absl::StatusOr<std::string> MakeTempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat((tmp != nullptr && *tmp != '\0') ? tmp : "/tmp", "/gpuslice-measure-XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot make a directory like ", pattern, ": ", std::strerror(errno)));
  }
  return std::string(buffer.data());
}

// Processes leave the slice's file when they exit (their slot is cleared), so the processes of a
// run are collected while it runs: the slice is read every 50 ms, and each process is kept with
// its figures as last seen. A process that lived less than that and was not left behind in a
// slot is missed from the list; processes_seen is the slice's own count of processes that joined.
class ProcessWatcher {
 public:
  explicit ProcessWatcher(std::string path) : path_(std::move(path)) {}
  // Started after the fork, so that the child is forked from a process with one thread.
  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ProcessWatcher() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // Adds `slice`'s slots to what was seen; returns every process seen, in order of appearance.
  std::vector<shim::SliceProcess> Seen(const shim::SliceSnapshot& slice) {
    std::lock_guard<std::mutex> lock(mutex_);
    AddLocked(slice);
    return seen_;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      lock.unlock();
      absl::StatusOr<shim::SliceSnapshot> slice = shim::ReadSlice(path_);
      lock.lock();
      if (slice.ok()) AddLocked(*slice);
      wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stop_; });
    }
  }
  void AddLocked(const shim::SliceSnapshot& slice) {
    for (const shim::SliceProcess& p : slice.processes) {
      bool found = false;
      for (shim::SliceProcess& known : seen_) {
        if (known.pid == p.pid && known.pid_ns == p.pid_ns) {
          known = p;
          found = true;
        }
      }
      if (!found) seen_.push_back(p);
    }
  }

  std::string path_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<shim::SliceProcess> seen_;
  std::thread thread_;
};

struct ChildResult {
  int exit_code = 1;
  double wall_s = 0;
};

// Runs the command with the measuring environment; forwards SIGINT and SIGTERM to it. Returns
// its exit code (128 + signal if it was killed) and wall time.
ChildResult RunChild(const MeasureOptions& o, const std::string& interposer,
                     const std::string& slice_id, const std::string& shm_dir,
                     ProcessWatcher* watcher) {
  ChildResult result;
  const char* preload = std::getenv("LD_PRELOAD");
  const std::string preload_value = PrependPreload(interposer, preload != nullptr ? preload : "");
  struct sigaction action = {};
  action.sa_sigaction = ForwardSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  struct sigaction old_int = {};
  struct sigaction old_term = {};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);

  const auto start = std::chrono::steady_clock::now();
  util::SubprocessOptions options;
  options.argv = o.command;
  options.set_env = {{"LD_PRELOAD", preload_value},
                     {"GPUSLICE_MODE", "measure"},
                     {"GPUSLICE_SLICE", slice_id},
                     {"GPUSLICE_SHM_DIR", shm_dir}};
  options.unset_env = {"GPUSLICE_VRAM_LIMIT_MIB", "GPUSLICE_COMPUTE_SHARE_MILLI"};
  // The signals forwarded here are the command's as they were before (a signal before exec
  // does what it would have done).
  options.child_signals = {{SIGINT, old_int.sa_handler == SIG_IGN},
                           {SIGTERM, old_term.sa_handler == SIG_IGN}};
  absl::StatusOr<util::Subprocess> child = util::Subprocess::Start(std::move(options));
  int status_code = 0;
  if (!child.ok()) {
    std::cerr << "gpuslice measure: " << child.status().message() << "\n";
    status_code = absl::IsNotFound(child.status()) ? 127 : 126;
  } else {
    g_child.store(child->pid());
    watcher->Start();
    if (int s = g_pending_signal.exchange(0); s != 0) child->Signal(s);
    absl::StatusOr<util::ExitStatus> done = child->Wait();
    if (!done.ok()) std::cerr << "gpuslice measure: " << done.status().message() << "\n";
    status_code = done.ok() ? done->ShellCode() : 0;
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  g_child.store(0);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  result.exit_code = status_code;
  return result;
}

struct ModelFit {
  const hw::GpuModel* model = nullptr;
  std::string instance;  // "1g.10gb", "whole GPU", or "" when it does not fit
  std::string explanation;
};

// The planner's sizing of one replica of the measured peak on every model of the catalog.
std::vector<ModelFit> SizeOnCatalog(const hw::Catalog& catalog, const plan::Workload& workload,
                                    const plan::SizingPolicy& policy) {
  std::vector<ModelFit> fits;
  for (const hw::GpuModel& model : catalog.models()) {
    const plan::WorkloadSizing sizing = plan::SizeWorkload(workload, {&model}, policy);
    ModelFit fit;
    fit.model = &model;
    if (!sizing.options.empty()) fit.instance = plan::InstanceName(sizing.options.front());
    fit.explanation = sizing.explanation.empty() ? absl::StrCat(model.id, ": not possible")
                                                 : sizing.explanation.front();
    fits.push_back(std::move(fit));
  }
  return fits;
}

std::string WorkloadYaml(const MeasureOptions& o, const plan::Workload& workload,
                         const shim::SliceSnapshot& slice, double headroom) {
  const std::string command =
      absl::StrReplaceAll(CommandText(o.command), {{"\n", " "}, {"\r", " "}});
  std::string yaml = absl::StrCat(
      "# Measured with gpuslice measure: ", command, "\n",
      absl::StrFormat("# peak %s, counting %s per CUDA context; %d allocation(s), %d launch(es)\n",
                      MibText(slice.peak_bytes), MibText(slice.context_reserve_bytes),
                      slice.allocations, slice.launches),
      "# Use: gpuslice plan -w THIS_FILE -f fleet.yaml\n");
  if (o.headroom_pct >= 0) {
    absl::StrAppend(&yaml, "policy:\n", absl::StrFormat("  memory_headroom: %.4g\n", headroom),
                    absl::StrFormat("  fine_tune_headroom: %.4g\n", headroom));
  }
  absl::StrAppend(&yaml, "workloads:\n", "  - name: \"", workload.name, "\"\n",
                  "    kind: ", std::string(plan::ToString(workload.kind)), "\n",
                  "    replicas: 1\n",
                  absl::StrFormat("    peak_memory_gib: %.1f\n", workload.peak_memory_gib),
                  "    measured: true\n");
  return yaml;
}

bool WriteFile(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      PrintError(absl::StrCat("--workload-out: cannot write ", temp));
      std::remove(temp.c_str());
      return false;
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    PrintError(absl::StrCat("--workload-out: cannot rename ", temp, " to ", path));
    std::remove(temp.c_str());
    return false;
  }
  return true;
}

int Measure(const MeasureOptions& o, const GlobalOptions& global) {
  const std::optional<plan::WorkloadKind> kind = plan::ParseWorkloadKind(o.kind);
  if (!kind) {
    PrintError(absl::StrCat("--kind '", o.kind, "': inference, notebook, batch or fine-tune"));
    return kExitBadInput;
  }
  if (!o.name.empty() && !ValidWorkloadName(o.name)) {
    PrintError(absl::StrCat("--name '", o.name,
                            "': letters, digits, '.', '_' and '-' only (a planner workload name)"));
    return kExitBadInput;
  }
  if (o.command.empty()) {
    PrintError("give the command to measure after --: gpuslice measure -- CMD ARGS...");
    return kExitBadInput;
  }
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  const absl::StatusOr<std::string> interposer = FindInterposer();
  if (!interposer.ok()) {
    PrintError(std::string(interposer.status().message()));
    return 1;
  }
  const absl::StatusOr<std::string> shm_dir = MakeTempDir();
  if (!shm_dir.ok()) {
    PrintError(std::string(shm_dir.status().message()));
    return 1;
  }
  const std::string slice_id =
      absl::StrCat("measure-", getpid(), "-", static_cast<std::int64_t>(std::time(nullptr)));

  const std::string slice_path = shim::SlicePath(*shm_dir, slice_id);
  ProcessWatcher watcher(slice_path);
  const ChildResult child = RunChild(o, *interposer, slice_id, *shm_dir, &watcher);
  watcher.Stop();
  const absl::StatusOr<shim::SliceSnapshot> read = shim::ReadSlice(slice_path);
  if (o.keep) {
    std::cerr << "gpuslice measure: kept the slice's accounting in " << *shm_dir << "\n";
  } else {
    std::error_code ignored;
    std::filesystem::remove_all(*shm_dir, ignored);
  }
  if (!read.ok()) {
    if (absl::IsNotFound(read.status())) {
      std::cerr << "gpuslice measure: " << o.command[0]
                << " did not use CUDA through the driver API; nothing measured\n";
      if (o.json_output) {
        PrintJson({{"command", o.command},
                   {"exit_code", child.exit_code},
                   {"wall_s", child.wall_s},
                   {"measured", false}});
      }
      return child.exit_code;
    }
    PrintError(absl::StrCat("cannot read the slice's accounting: ", read.status().message()));
    return child.exit_code != 0 ? child.exit_code : 1;
  }
  const shim::SliceSnapshot& slice = *read;
  const std::vector<shim::SliceProcess> seen = watcher.Seen(slice);
  const std::uint64_t processes_seen = std::max<std::uint64_t>(
      {1, seen.size(), slice.processes.size() + slice.reclaimed_processes, slice.processes_joined});

  // Sizing, with the planner's own rules.
  plan::SizingPolicy policy;
  if (o.headroom_pct >= 0) {
    policy.memory_headroom = o.headroom_pct / 100.0;
    policy.fine_tune_headroom = o.headroom_pct / 100.0;
  }
  const double headroom =
      *kind == plan::WorkloadKind::kFineTune ? policy.fine_tune_headroom : policy.memory_headroom;
  plan::Workload workload;
  workload.name = o.name.empty() ? NameFromCommand(o.command[0]) : o.name;
  workload.kind = *kind;
  workload.replicas = 1;
  workload.peak_memory_gib = PeakGibRoundedUp(slice.peak_bytes);
  workload.measured = true;
  const std::vector<ModelFit> fits = SizeOnCatalog(*catalog, workload, policy);
  // The cap of a software slice for it: the peak as counted (context reservations included) plus
  // the headroom, in whole MiB.
  const std::int64_t vram_cap_mib = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(
             std::ceil(static_cast<double>(slice.peak_bytes) * (1 + headroom) / kMib - 1e-9)));

  // Histogram: non-empty buckets; the one with the most allocations.
  struct Bucket {
    int index;
    std::uint64_t count;
  };
  std::vector<Bucket> buckets;
  int busiest = -1;
  std::uint64_t busiest_count = 0;
  for (size_t i = 0; i < slice.size_histogram.size(); ++i) {
    const std::uint64_t count = slice.size_histogram[i];
    if (count == 0) continue;
    buckets.push_back({static_cast<int>(i), count});
    if (count > busiest_count) {
      busiest_count = count;
      busiest = static_cast<int>(i);
    }
  }
  const double kernel_s = static_cast<double>(slice.kernel_ns) / 1e9;
  const double kernel_share = child.wall_s > 0 ? kernel_s / child.wall_s : 0;

  if (!o.workload_out.empty()) {
    if (!WriteFile(o.workload_out, WorkloadYaml(o, workload, slice, headroom))) return 1;
    std::cerr << "gpuslice measure: wrote workload '" << workload.name << "' ("
              << absl::StrFormat("%.1f", workload.peak_memory_gib) << " GiB peak, measured) to "
              << o.workload_out << " for gpuslice plan -w " << o.workload_out << "\n";
  }

  if (o.json_output) {
    json histogram = json::array();
    for (const Bucket& b : buckets) {
      histogram.push_back({{"min_bytes", std::uint64_t{1} << b.index},
                           {"max_bytes", std::uint64_t{1} << (b.index + 1)},
                           {"label", BucketText(b.index)},
                           {"count", b.count}});
    }
    json processes = json::array();
    for (const shim::SliceProcess& p : seen) {
      processes.push_back({{"pid", p.pid},
                           {"host_pid", p.host_pid},
                           {"peak_bytes", p.peak_bytes},
                           {"context_bytes", p.context_bytes},
                           {"allocations", p.allocations},
                           {"launches", p.launches},
                           {"kernel_ns", p.kernel_ns}});
    }
    json sizing = json::array();
    for (const ModelFit& fit : fits) {
      sizing.push_back({{"model", fit.model->id},
                        {"mig", fit.model->mig_capable()},
                        {"fits", !fit.instance.empty()},
                        {"instance", fit.instance.empty() ? json(nullptr) : json(fit.instance)},
                        {"explanation", fit.explanation}});
    }
    json out = {
        {"command", o.command},
        {"exit_code", child.exit_code},
        {"wall_s", child.wall_s},
        {"measured", true},
        {"slice", slice.id},
        {"gpu_uuid", slice.gpu_uuid},
        {"peak_bytes", slice.peak_bytes},
        {"peak_mib", static_cast<double>(slice.peak_bytes) / kMib},
        {"context_reserve_bytes", slice.context_reserve_bytes},
        {"allocations", slice.allocations},
        {"refused", slice.refused},
        {"size_histogram", histogram},
        {"largest_bucket", busiest < 0 ? json(nullptr)
                                       : json({{"min_bytes", std::uint64_t{1} << busiest},
                                               {"max_bytes", std::uint64_t{1} << (busiest + 1)},
                                               {"label", BucketText(busiest)},
                                               {"count", busiest_count}})},
        {"launches", slice.launches},
        {"kernel_ns", slice.kernel_ns},
        {"kernel_share_of_wall", kernel_share},
        {"processes_seen", processes_seen},  // see ProcessWatcher
        {"processes", processes},
        {"workload",
         {{"name", workload.name},
          {"kind", std::string(plan::ToString(workload.kind))},
          {"peak_memory_gib", workload.peak_memory_gib},
          {"headroom", headroom}}},
        {"sizing", sizing},
        {"software_slice_vram_mib", vram_cap_mib},
    };
    PrintJson(out);
    return child.exit_code;
  }

  std::cout << "\ngpuslice measure: " << CommandText(o.command) << "\n"
            << absl::StrFormat("  exit code %d after %.2f s\n", child.exit_code, child.wall_s);
  std::cout << absl::StrFormat(
      "  peak VRAM     %s (%.2f GiB), counting %s for the last CUDA context "
      "(measured through NVML, else GPUSLICE_CONTEXT_RESERVE_MIB)\n",
      MibText(slice.peak_bytes), static_cast<double>(slice.peak_bytes) / kGib,
      MibText(slice.context_reserve_bytes));
  std::cout << absl::StrFormat("  allocations   %d", slice.allocations);
  if (busiest >= 0) {
    std::cout << absl::StrFormat(", most in %s (%d)", BucketText(busiest), busiest_count);
  }
  std::cout << "\n";
  if (!buckets.empty()) {
    Table table({"SIZE", "COUNT"});
    table.RightAlign(1);
    for (const Bucket& b : buckets) table.Add({BucketText(b.index), absl::StrCat(b.count)});
    std::cout << table.Render("                ");
  }
  std::cout << absl::StrFormat("  launches      %d\n", slice.launches)
            << absl::StrFormat(
                   "  kernel time   %.3f s, %.1f%% of the run's wall time (GPU time of the "
                   "launches, measured with events)\n",
                   kernel_s, kernel_share * 100.0)
            << absl::StrFormat("  processes     %d\n", processes_seen);
  std::cout << absl::StrFormat(
      "\nSmallest slice for %.1f GiB (the peak rounded up to 0.1 GiB) + %s%% headroom (%s), per "
      "GPU model:\n",
      workload.peak_memory_gib, absl::StrFormat("%.0f", headroom * 100),
      o.headroom_pct >= 0
          ? "--headroom"
          : absl::StrCat("the planner's default for ", std::string(plan::ToString(*kind))));
  for (const ModelFit& fit : fits) {
    std::cout << "  " << fit.explanation << "\n";
  }
  std::cout << absl::StrFormat(
      "Or a software slice on any GPU (docs/SHIM.md): a VRAM cap of %d MiB (peak + headroom), "
      "e.g. gpuslice run --share N --vram %d\n",
      vram_cap_mib, vram_cap_mib);
  return child.exit_code;
}

}  // namespace

void AddMeasureCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto o = std::make_shared<MeasureOptions>();
  CLI::App* cmd = app.add_subcommand(
      "measure",
      "Run a command under the CUDA interposer in measuring mode (nothing refused or throttled) "
      "and report its peak VRAM, allocations, launches and kernel time, with the smallest MIG "
      "profile that holds it on each GPU model. Exits with the command's code");
  cmd->add_option("--name", o->name, "Workload name for --workload-out (default: CMD's basename)");
  cmd->add_option("--kind", o->kind, "Workload kind: inference, notebook, batch or fine-tune")
      ->capture_default_str();
  cmd->add_option("--headroom", o->headroom_pct,
                  "Memory headroom in percent (default: the planner's, 15%; 30% for fine-tune)")
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_flag("--json", o->json_output, "Print everything as one JSON object");
  cmd->add_option("--workload-out", o->workload_out,
                  "Write the measurement as a workloads file for gpuslice plan -w");
  cmd->add_flag("--keep", o->keep, "Keep the slice's accounting directory (printed on stderr)");
  cmd->add_option("command", o->command, "The command and its arguments, after --")->required();
  cmd->callback([o, &global, action] { *action = [o, &global] { return Measure(*o, global); }; });
}

}  // namespace gpuslice::cli
