// gpuslice top: a live view of this machine's GPUs and their slices (top_view.h draws the frame).
//
// Every --interval seconds it collects the figures through the device backend (metrics::Collect),
// reads where each MIG instance sits, fetches the leases from the allocation service when one is
// configured (--server or $GPUSLICE_SERVER; a failure is a status line, never fatal), keeps the
// idle clocks, and repaints the terminal in place (top_screen.h: an overview line per GPU, the
// details scrolled, sorted, the help screen; keys repaint at once without a new collection).
// q or Ctrl-C quits and restores the terminal.
// --once prints one frame without escape codes; --json prints one frame's data as JSON.
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <deque>
#include <iostream>
#include <thread>

#include "client.h"
#include "common.h"
#include "device_options.h"
#include "gpuslice/metrics/collector.h"
#include "top_screen.h"
#include "top_view.h"

namespace gpuslice::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct TopCommandOptions {
  DeviceOptions device;
  double interval_s = 1.0;
  bool once = false;
  int iterations = 0;  // 0: until q or Ctrl-C
  bool json = false;
  bool no_color = false;
  bool processes = false;
  bool compact = false;
  TopSort sort = TopSort::kIndex;
  int width = 0;  // 0: the terminal's, else $COLUMNS, else 120
  std::string server;
  std::string token;
};

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_resized = 0;

extern "C" void OnStop(int) { g_stop = 1; }
extern "C" void OnResize(int) { g_resized = 1; }

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// The terminal in the live view: keys without Enter and without echo, the cursor hidden; all of it
// restored when this goes away (also after Ctrl-C, which only sets g_stop).
class LiveTerminal {
 public:
  LiveTerminal() {
    if (isatty(STDIN_FILENO) == 1 && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      keys_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    std::cout << "\x1b[?25l\x1b[2J\x1b[H" << std::flush;
  }
  ~LiveTerminal() {
    if (keys_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    std::cout << "\x1b[?25h\n" << std::flush;
  }
  LiveTerminal(const LiveTerminal&) = delete;
  LiveTerminal& operator=(const LiveTerminal&) = delete;

  bool keys() const { return keys_; }

 private:
  termios saved_{};
  bool keys_ = false;
};

void InstallSignals() {
  struct sigaction stop {};
  stop.sa_handler = OnStop;
  sigemptyset(&stop.sa_mask);
  stop.sa_flags = 0;  // no SA_RESTART: poll() returns at once
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGHUP, &stop, nullptr);
  struct sigaction resize {};
  resize.sa_handler = OnResize;
  sigemptyset(&resize.sa_mask);
  resize.sa_flags = 0;
  sigaction(SIGWINCH, &resize, nullptr);
}

struct TerminalSize {
  std::size_t columns = 0;
  std::size_t rows = 0;
};

TerminalSize SizeOf(int fd) {
  winsize size{};
  if (ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return {size.ws_col, size.ws_row};
  return {};
}

std::size_t Width(const TopCommandOptions& options, bool tty) {
  if (options.width > 0) return static_cast<std::size_t>(options.width);
  if (tty) {
    if (const TerminalSize size = SizeOf(STDOUT_FILENO); size.columns > 0) return size.columns;
  }
  const std::string columns = Env("COLUMNS");
  if (!columns.empty()) {
    char* end = nullptr;
    const long value = std::strtol(columns.c_str(), &end, 10);
    if (end != nullptr && *end == '\0' && value >= 20 && value <= 10000) {
      return static_cast<std::size_t>(value);
    }
  }
  return 120;
}

// The allocation service's leases, when a server is configured.
class LeaseSource {
 public:
  explicit LeaseSource(const TopCommandOptions& options) {
    client_.server = !options.server.empty() ? options.server : Env("GPUSLICE_SERVER");
    client_.token = options.token;
    client_.timeout_s = 2;
  }

  // Refreshes the leases (at most every `every`); returns them and sets `status` to a line that
  // says where they come from or why there are none.
  const std::map<std::string, std::vector<DeviceLease>>& Get(Clock::duration every,
                                                             std::string* status) {
    if (client_.server.empty()) {
      *status = "leases: no server configured (--server or GPUSLICE_SERVER)";
      return leases_;
    }
    const Clock::time_point now = Clock::now();
    if (!fetched_ || now - fetched_at_ >= every) {
      Fetch();
      fetched_ = true;
      fetched_at_ = now;
    }
    *status = status_;
    return leases_;
  }

 private:
  // One GET /v1/leases through the API client (the token as every client command finds it).
  void Fetch() {
    leases_.clear();
    absl::StatusOr<api::ClientSettings> settings = ClientSettings(client_);
    absl::StatusOr<api::Client> client =
        settings.ok() ? api::Client::Make(*std::move(settings)) : settings.status();
    absl::StatusOr<api::Response> answer =
        client.ok() ? client->Call("GET", "/v1/leases") : client.status();
    if (!answer.ok()) {
      status_ = "leases: " + std::string(answer.status().message());
      return;
    }
    if (answer->status != 200) {
      status_ = "leases: " + RefusalText(answer->status, answer->Error());
      return;
    }
    const nlohmann::json& body = answer->body;
    leases_ = LeasesByDevice(body);
    std::size_t count = body.is_object() && body.contains("leases") && body["leases"].is_array()
                            ? body["leases"].size()
                            : 0;
    status_ = "leases: " + std::to_string(count) + " active from " + client_.server +
              " (an admin token sees every tenant's)";
  }

  ClientOptions client_;
  bool fetched_ = false;
  Clock::time_point fetched_at_;
  std::string status_;
  std::map<std::string, std::vector<DeviceLease>> leases_;
};

std::string LocalTime() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[16];
  std::strftime(text, sizeof text, "%H:%M:%S", &local);
  return text;
}

// One frame's input: the figures, the placements, the leases and the idle clocks.
class Sampler {
 public:
  Sampler(device::Backend& backend, const TopCommandOptions& options)
      : backend_(backend), options_(options), leases_(options), start_(Clock::now()) {}

  // A first collection whose figures are dropped: GPM activity needs two samples, and Xid events
  // are only seen after the first call.
  void Prime() {
    metrics::MachineFigures machine = metrics::Collect(backend_, host_);
    Remember(machine.xids);
  }

  TopInput Next(bool live) {
    TopInput input;
    input.machine = metrics::Collect(backend_, host_);
    Remember(input.machine.xids);
    input.machine.xids.assign(xids_.begin(), xids_.end());
    absl::StatusOr<std::vector<device::GpuInfo>> gpus = backend_.ListGpus();
    if (gpus.ok()) {
      for (const device::GpuInfo& info : *gpus) {
        if (info.mig_current != device::MigMode::kEnabled) continue;
        absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis =
            backend_.ListGpuInstances(info.index);
        if (gis.ok()) input.placements[info.index] = {info.model, *std::move(gis)};
      }
    }
    const double now_s = std::chrono::duration<double>(Clock::now() - start_).count();
    idle_.Observe(input.machine, now_s);
    input.idle = idle_.idle();
    std::string lease_status;
    const auto every = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::max(options_.interval_s, 5.0)));
    input.leases = leases_.Get(every, &lease_status);
    input.status.push_back(lease_status);
    input.title = "gpuslice top · " + host_ + " · " + backend_.Describe() + " · " +
                  std::to_string(input.machine.gpus.size()) + " GPU(s) · " + LocalTime();
    if (live) {
      input.title += " · every " + Seconds(options_.interval_s) + " · ? help · q quits";
    }
    return input;
  }

 private:
  static std::string Seconds(double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%gs", s);
    return text;
  }

  void Remember(const std::vector<device::XidEvent>& xids) {
    constexpr std::size_t kKept = 5;
    for (const device::XidEvent& xid : xids) {
      xids_.push_back(xid);
      if (xids_.size() > kKept) xids_.pop_front();
    }
  }

  device::Backend& backend_;
  const TopCommandOptions& options_;
  LeaseSource leases_;
  Clock::time_point start_;
  std::string host_ = Hostname();
  IdleTracker idle_;
  std::deque<device::XidEvent> xids_;  // the last few, so that one stays on screen a while
};

// Waits until `deadline` for a key, a signal or a resize; the keys read are appended to `keys`.
// Returns false on a signal (Ctrl-C, SIGTERM, SIGHUP).
bool Wait(Clock::time_point deadline, bool read_keys, std::string* keys) {
  while (g_stop == 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || g_resized != 0) return true;
    pollfd fd{STDIN_FILENO, POLLIN, 0};
    const int ready =
        poll(read_keys ? &fd : nullptr, read_keys ? 1 : 0, static_cast<int>(left.count()));
    if (ready > 0 && (fd.revents & POLLIN) != 0) {
      char buffer[64];
      for (ssize_t n = 0; (n = read(STDIN_FILENO, buffer, sizeof buffer)) > 0;) {
        keys->append(buffer, static_cast<std::size_t>(n));
      }
      if (!keys->empty()) return true;
    }
  }
  return false;
}

Clock::time_point After(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void Paint(const std::vector<std::string>& lines) {
  std::string out = "\x1b[H";
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out += lines[i] + "\x1b[K";
    if (i + 1 < lines.size()) out += "\n";
  }
  out += "\x1b[J";
  std::cout << out << std::flush;
}

int Run(const GlobalOptions& global, const TopCommandOptions& options) {
  const hw::Catalog* catalog = LoadCatalog(global);
  if (catalog == nullptr) return kExitBadInput;
  std::unique_ptr<device::Backend> backend = OpenBackend(options.device, *catalog);
  if (backend == nullptr) return kExitBadInput;
  Sampler sampler(*backend, options);
  sampler.Prime();
  const bool tty = isatty(STDOUT_FILENO) == 1;
  const bool live = tty && !options.once && !options.json;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(options.interval_s, 0.25)));

  if (options.json) {
    TopInput input = sampler.Next(false);
    SortGpus(options.sort, input);
    PrintJson(TopJson(input));
    return kExitOk;
  }
  TopOptions view;
  view.processes = options.processes;
  view.drawing = !options.compact;
  if (options.once || !live) {
    // Plain frames: one for --once, else --iterations of them (or until a signal), no escapes.
    InstallSignals();
    const int frames = options.once ? 1 : options.iterations;
    for (int frame = 0; (frames == 0 || frame < frames) && g_stop == 0; ++frame) {
      if (frame > 0) {
        std::string ignored;
        if (!Wait(After(options.interval_s), false, &ignored)) break;
        std::cout << "\n";
      }
      view.width = Width(options, tty);
      TopInput input = sampler.Next(false);
      SortGpus(options.sort, input);
      for (const std::string& line : RenderTop(input, view)) {
        std::cout << line << "\n";
      }
      std::cout << std::flush;
    }
    return kExitOk;
  }

  view.color = !options.no_color && Env("NO_COLOR").empty() && Env("TERM") != "dumb";
  InstallSignals();
  LiveTerminal terminal;
  TopScreen screen;
  screen.sort = options.sort;
  screen.drawing = view.drawing;
  screen.processes = view.processes;
  TopInput input;
  Clock::time_point next_sample = Clock::now();
  for (int frame = 0; g_stop == 0;) {
    if (Clock::now() >= next_sample) {
      input = sampler.Next(true);
      ++frame;
      next_sample = After(options.interval_s);
    }
    g_resized = 0;
    const TerminalSize size = SizeOf(STDOUT_FILENO);
    view.width = Width(options, true);
    Paint(ComposeScreen(input, view, screen, size.rows > 0 ? size.rows : 24));
    if (options.iterations != 0 && frame >= options.iterations) break;
    std::string keys;
    if (!Wait(next_sample, terminal.keys(), &keys)) break;
    bool quit = false;
    for (TopKey key : ParseTopKeys(keys)) quit = quit || !ApplyTopKey(key, screen);
    if (quit) break;
  }
  return kExitOk;
}

}  // namespace

void AddTopCommand(CLI::App& app, const GlobalOptions& global, Action* action) {
  auto options = std::make_shared<TopCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "top",
      "Watch the GPUs and their slices live: a drawing of the MIG instances, memory bars, SM "
      "activity, processes, idle time and the lease (tenant) holding each. Keys: arrows/j/k and "
      "PgUp/PgDn scroll, s sorts (index, memory, sm, idle), d drawings, p processes, ? help, q "
      "or Ctrl-C quits");
  AddDeviceOptions(*command, options->device);
  command->add_option("--interval", options->interval_s, "Seconds between refreshes (default 1)")
      ->check(CLI::Range(0.1, 3600.0));
  CLI::Option* once =
      command->add_flag("--once", options->once, "Print one frame without escape codes and exit");
  CLI::Option* iterations =
      command
          ->add_option("--iterations", options->iterations,
                       "Stop after this many frames (default: until q or Ctrl-C)")
          ->check(CLI::Range(1, 1000000));
  once->excludes(iterations);
  CLI::Option* json = command->add_flag("--json", options->json, "Print one frame's data as JSON");
  json->excludes(iterations);
  command->add_flag("--no-color", options->no_color, "No colours (also: NO_COLOR set)");
  command->add_flag("--processes", options->processes, "A line per process under its device");
  command->add_flag("--compact", options->compact, "Leave out the drawing of each MIG GPU");
  std::map<std::string, TopSort> sorts;
  for (int i = 0; i < kTopSorts; ++i)
    sorts[TopSortName(static_cast<TopSort>(i))] = static_cast<TopSort>(i);
  command
      ->add_option("--sort", options->sort,
                   "GPU order: index (default), memory (most used first), sm (most active first) "
                   "or idle (longest idle first); s changes it live")
      ->transform(CLI::CheckedTransformer(sorts));
  command
      ->add_option("--width", options->width,
                   "Columns per line (default: the terminal's, else $COLUMNS, else 120)")
      ->check(CLI::Range(20, 10000));
  command->add_option("--server", options->server,
                      "Allocation service to show leases from (default $GPUSLICE_SERVER; none: no "
                      "leases)");
  command->add_option("--token", options->token,
                      "API token (default $GPUSLICE_TOKEN or ./gpuslice-admin.token); an admin "
                      "token sees every tenant's leases");
  command->callback([&global, options, action] {
    *action = [&global, options] { return Run(global, *options); };
  });
}

}  // namespace gpuslice::cli
