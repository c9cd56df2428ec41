// `gpuslice run -- CMD`: acquire a slice, run CMD on it, renew the lease while CMD runs, release
// it when CMD ends (also when gpuslice run is signalled). `gpuslice lease show|env|docker-args ID`:
// what a process or a container needs to use a lease's devices.
//
// A share of a GPU is enforced by the CUDA interposer libgpuslice-cuda.so (docs/SHIM.md): for a
// lease whose environment sets limits, `run` loads it into CMD with LD_PRELOAD (put first, keeping
// what LD_PRELOAD had), and refuses to run CMD when it cannot find it (the lease is released)
// unless --no-interposer says to run it unenforced. `lease env` prints LD_PRELOAD too when the
// interposer is on the machine it runs on. `lease docker-args` adds the mounts and LD_PRELOAD that
// load it in the container, and refuses like `run` when it is not found.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client.h"
#include "common.h"
#include "gpuslice/shim/slices.h"
#include "gpuslice/util/duration.h"
#include "gpuslice/util/shell.h"
#include "gpuslice/util/subprocess.h"
#include "interposer_path.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

std::atomic<int> g_signal{0};

void OnSignal(int signal) { g_signal.store(signal); }

struct RunOptions {
  ClientOptions c;
  std::string class_name, profile, purpose;
  int share = 0;
  std::int64_t vram = 0, ttl = 0, queue_timeout = 0, setup_timeout = 60;
  bool no_wait = false;
  bool no_interposer = false;  // run a share's command even without the interposer (unenforced)
  std::vector<std::string> command;
};

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Waits for the lease granted from queue entry `queue_id`. Returns 0 and the lease, or an exit
// code (the entry was cancelled, the wait timed out, or gpuslice run was signalled: then the
// entry is withdrawn).
int WaitForGrant(const RunOptions& o, std::int64_t queue_id, json* lease) {
  const std::int64_t deadline = o.queue_timeout > 0 ? EpochNow() + o.queue_timeout : 0;
  const std::string id = std::to_string(queue_id);
  auto withdraw = [&](const std::string& why, int code) {
    Reply ignored;
    (void)Call(o.c, "DELETE", "/v1/queue/" + id, nullptr, &ignored);
    // It may have been granted meanwhile: give that lease back too.
    Reply leases;
    if (Call(o.c, "GET", "/v1/leases", nullptr, &leases) == 0) {
      for (const json& l : leases.body["leases"]) {
        if (l.value("from_queue", std::int64_t{0}) == queue_id) {
          (void)Call(o.c, "DELETE", absl::StrCat("/v1/leases/", l["id"].get<std::int64_t>()),
                     nullptr, &ignored);
        }
      }
    }
    std::cerr << "gpuslice run: " << why << "; withdrew queue entry " << id << "\n";
    return code;
  };
  for (int round = 0;; ++round) {
    for (int i = 0; i < 10; ++i) {
      if (int s = g_signal.load(); s != 0) return withdraw(strsignal(s), 128 + s);
      Sleep(100);
    }
    if (deadline > 0 && EpochNow() >= deadline) {
      return withdraw(absl::StrCat("no slice within --queue-timeout ", o.queue_timeout, " s"), 1);
    }
    Reply leases;
    if (int rc = Call(o.c, "GET", "/v1/leases", nullptr, &leases); rc != 0) return rc;
    for (const json& l : leases.body["leases"]) {
      if (l.value("from_queue", std::int64_t{0}) == queue_id) {
        *lease = l;
        return kExitOk;
      }
    }
    Reply queue;
    if (int rc = Call(o.c, "GET", "/v1/queue", nullptr, &queue); rc != 0) return rc;
    bool waiting = false;
    for (const json& q : queue.body["queue"]) {
      if (q["id"].get<std::int64_t>() == queue_id) {
        waiting = true;
        if (round % 30 == 0) {
          std::cerr << "gpuslice run: waiting, position " << q["position"] << " in class "
                    << q["class"].get<std::string>() << ": " << q["reason"].get<std::string>()
                    << "\n";
        }
      }
    }
    if (!waiting) {
      // Granted between the two reads, or cancelled.
      if (Call(o.c, "GET", "/v1/leases", nullptr, &leases) == 0) {
        for (const json& l : leases.body["leases"]) {
          if (l.value("from_queue", std::int64_t{0}) == queue_id) {
            *lease = l;
            return kExitOk;
          }
        }
      }
      std::cerr << "gpuslice run: queue entry " << id << " was cancelled\n";
      return 1;
    }
  }
}

// The lease's environment as the service gives it.
std::map<std::string, std::string> LeaseEnv(const json& lease) {
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : lease["env"].items()) env[name] = value.get<std::string>();
  return env;
}

// LD_PRELOAD with this machine's interposer first, keeping what LD_PRELOAD has now.
std::string PreloadWith(const std::string& interposer) {
  const char* current = std::getenv("LD_PRELOAD");
  return PrependPreload(interposer, current != nullptr ? current : "");
}

// Runs the command with the lease's environment (and the interposer for a share); renews the
// lease while it runs; forwards SIGINT/SIGTERM/SIGHUP to it. Returns the command's exit code
// (128 + signal if it was killed). A share whose interposer is not found is released unrun
// (exit 1) unless --no-interposer.
int RunCommand(const RunOptions& o, const json& lease) {
  const std::int64_t id = lease["id"].get<std::int64_t>();
  const std::int64_t ttl = std::max<std::int64_t>(
      1, lease["expires_at"].get<std::int64_t>() - lease["granted_at"].get<std::int64_t>());
  std::map<std::string, std::string> env = LeaseEnv(lease);
  if (NeedsInterposer(env)) {
    absl::StatusOr<std::string> interposer = FindInterposer();
    if (interposer.ok()) {
      env["LD_PRELOAD"] = PreloadWith(*interposer);
    } else if (o.no_interposer) {
      std::cerr << "gpuslice run: warning: " << interposer.status().message() << "; lease " << id
                << "'s share is NOT enforced (--no-interposer)\n";
    } else {
      Reply ignored;
      (void)Call(o.c, "DELETE", absl::StrCat("/v1/leases/", id), nullptr, &ignored);
      PrintError(absl::StrCat("lease ", id,
                              " is a share of a GPU, which only the CUDA interposer enforces, and ",
                              interposer.status().message(),
                              "; without it the share would not be enforced, so ", o.command[0],
                              " was not run and the lease is released (--no-interposer runs it "
                              "anyway)"));
      return 1;
    }
  }
  std::vector<std::string> env_lines;
  for (const auto& [name, value] : env) env_lines.push_back(absl::StrCat(name, "=", value));
  std::cerr << "gpuslice run: lease " << id << " on " << lease["node"].get<std::string>() << " ["
            << absl::StrJoin(lease["devices"].get<std::vector<std::string>>(), "; ") << "] "
            << absl::StrJoin(env_lines, " ") << "\n";
  util::SubprocessOptions options;
  options.argv = o.command;
  options.set_env.assign(env.begin(), env.end());
  absl::StatusOr<util::Subprocess> child = util::Subprocess::Start(std::move(options));
  if (!child.ok()) {
    std::cerr << "gpuslice run: " << child.status().message() << "\n";
    Reply ignored;
    (void)Call(o.c, "DELETE", absl::StrCat("/v1/leases/", id), nullptr, &ignored);
    return 127;
  }
  std::int64_t next_renew = EpochNow() + std::max<std::int64_t>(1, ttl / 2);
  std::optional<util::ExitStatus> ended;
  while (!ended) {
    absl::StatusOr<std::optional<util::ExitStatus>> polled = child->Poll();
    if (!polled.ok()) {
      std::cerr << "gpuslice run: " << polled.status().message() << "\n";
      break;
    }
    ended = *polled;
    if (ended) break;
    if (int s = g_signal.exchange(0); s != 0) child->Signal(s);
    if (EpochNow() >= next_renew) {
      json body = {{"ttl_s", ttl}};
      Reply reply;
      if (Call(o.c, "POST", absl::StrCat("/v1/leases/", id, "/renew"), &body, &reply) != 0) {
        std::cerr << "gpuslice run: could not renew lease " << id
                  << "; the slice may be taken back when it expires\n";
      }
      next_renew = EpochNow() + std::max<std::int64_t>(1, ttl / 2);
    }
    Sleep(100);
  }
  Reply reply;
  if (Call(o.c, "DELETE", absl::StrCat("/v1/leases/", id), nullptr, &reply) == 0) {
    std::cerr << "gpuslice run: released lease " << id << "\n";
  }
  return ended ? ended->ShellCode() : 1;
}

int Run(const RunOptions& o) {
  const int kinds = (o.class_name.empty() ? 0 : 1) + (o.profile.empty() ? 0 : 1) +
                    (o.share > 0 || o.vram > 0 ? 1 : 0);
  if (kinds != 1) {
    PrintError("give exactly one of --class, --profile or --share/--vram");
    return kExitBadInput;
  }
  for (int s : {SIGINT, SIGTERM, SIGHUP}) std::signal(s, OnSignal);
  json body = {{"purpose", o.purpose}, {"wait", !o.no_wait}};
  if (!o.class_name.empty()) body["class"] = o.class_name;
  if (!o.profile.empty()) body["profile"] = o.profile;
  if (o.share > 0) body["share_milli"] = o.share;
  if (o.vram > 0) body["vram_mib"] = o.vram;
  if (o.ttl > 0) body["ttl_s"] = o.ttl;
  Reply reply;
  if (int rc = Call(o.c, "POST", "/v1/leases", &body, &reply, true); rc != 0) return rc;
  json lease;
  if (reply.status == 409) {
    std::cerr << "gpuslice run: refused: " << reply.body.value("error", std::string("?")) << "\n";
    return 1;
  }
  if (reply.status == 202) {
    const std::int64_t queue_id = reply.body["queued"]["id"].get<std::int64_t>();
    std::cerr << "gpuslice run: queued as " << queue_id << ", position "
              << reply.body["queued"]["position"] << ": " << reply.body["reason"].get<std::string>()
              << " (Ctrl-C withdraws)\n";
    if (int rc = WaitForGrant(o, queue_id, &lease); rc != 0) return rc;
  } else {
    lease = reply.body["lease"];
  }
  // A slice on another machine is set up by that machine's agent: wait for its devices.
  const std::int64_t id = lease["id"].get<std::int64_t>();
  const std::int64_t setup_deadline = EpochNow() + o.setup_timeout;
  while (!lease.contains("env") || lease["env"].empty()) {
    if (int s = g_signal.load(); s != 0 || EpochNow() >= setup_deadline) {
      Reply ignored;
      (void)Call(o.c, "DELETE", absl::StrCat("/v1/leases/", id), nullptr, &ignored);
      if (s != 0) return 128 + s;
      PrintError(absl::StrCat("lease ", id, " on ", lease.value("node", std::string("?")),
                              ": its devices were not set up within ", o.setup_timeout,
                              " s; is `gpuslice agent` running on that machine? (released)"));
      return 1;
    }
    Sleep(500);
    Reply again;
    if (int rc = Call(o.c, "GET", absl::StrCat("/v1/leases/", id), nullptr, &again); rc != 0) {
      return rc;
    }
    lease = again.body;
  }
  return RunCommand(o, lease);
}

// Reads lease `id`; prints the error and returns the exit code on failure.
int GetLease(const ClientOptions& c, std::int64_t id, json* lease) {
  Reply reply;
  if (int rc = Call(c, "GET", absl::StrCat("/v1/leases/", id), nullptr, &reply); rc != 0) {
    return rc;
  }
  *lease = reply.body;
  if (lease->value("state", std::string()) != "active") {
    PrintError(absl::StrCat("lease ", id, " is ", lease->value("state", std::string("?")),
                            ", not active"));
    return 1;
  }
  if (!lease->contains("env") || (*lease)["env"].empty()) {
    PrintError(
        absl::StrCat("lease ", id, " has no devices yet: its machine's agent has not set it up"));
    return 1;
  }
  return kExitOk;
}

}  // namespace

void AddRunCommands(CLI::App& app, const GlobalOptions& global, Action* action) {
  (void)global;
  {
    auto o = std::make_shared<RunOptions>();
    CLI::App* cmd = app.add_subcommand(
        "run",
        "Acquire a slice, run a command on it (CUDA_VISIBLE_DEVICES set to the slice; for a share, "
        "LD_PRELOAD set to the CUDA interposer that enforces it), renew the lease while it runs "
        "and release it when it ends. Exits with the command's code");
    AddConnection(cmd, o->c);
    cmd->add_option("--class", o->class_name, "A class: small, medium, large, full, ...");
    cmd->add_option("--profile", o->profile, "A MIG profile, e.g. 3g.40gb");
    cmd->add_option("--share", o->share, "A fraction of a shared GPU in milli (1-1000)");
    cmd->add_option("--vram", o->vram, "VRAM of the share, MiB");
    cmd->add_option("--purpose", o->purpose, "What it is for (required; recorded in the audit)")
        ->required();
    cmd->add_option("--ttl", o->ttl,
                    "How long the lease lasts (90m, 8h, 3600 seconds), renewed at half-time while "
                    "the command runs")
        ->transform(Duration(util::kMaxDurationS));
    cmd->add_flag("--no-wait", o->no_wait, "Fail instead of queueing when there is no room now");
    cmd->add_option("--queue-timeout", o->queue_timeout,
                    "Give up after waiting this many seconds in the queue (0: wait on)");
    cmd->add_option("--setup-timeout", o->setup_timeout,
                    "Seconds to wait for another machine's agent to set the slice up")
        ->capture_default_str();
    cmd->add_flag("--no-interposer", o->no_interposer,
                  "Run a share's command even when the CUDA interposer libgpuslice-cuda.so, which "
                  "enforces the share, is not found (the share is then not enforced)");
    cmd->add_option("command", o->command, "The command and its arguments, after --")->required();
    cmd->callback([o, action] { *action = [o] { return Run(*o); }; });
  }
  {
    CLI::App* lease_cmd =
        app.add_subcommand("lease", "One lease: show it, or what a process needs");
    lease_cmd->require_subcommand(1);
    for (const char* what : {"show", "env", "docker-args"}) {
      struct Options {
        ClientOptions c;
        std::int64_t id = 0;
        bool no_interposer = false;
      };
      auto o = std::make_shared<Options>();
      const std::string verb = what;
      CLI::App* cmd = lease_cmd->add_subcommand(
          verb, verb == "show"  ? "The lease, with its devices"
                : verb == "env" ? "export lines for a shell: CUDA_VISIBLE_DEVICES, ..."
                                : "docker run arguments: docker run $(gpuslice lease "
                                  "docker-args ID) IMAGE");
      AddConnection(cmd, o->c);
      cmd->add_option("id", o->id, "Lease id")->required()->check(PositiveId());
      if (verb == "docker-args") {
        cmd->add_flag("--no-interposer", o->no_interposer,
                      "Print a share's arguments even when this machine's CUDA interposer is not "
                      "found (the share is then not enforced in the container)");
      }
      cmd->callback([o, action, verb] {
        *action = [o, verb] {
          json lease;
          if (verb == "show") {
            Reply reply;
            if (int rc = Call(o->c, "GET", absl::StrCat("/v1/leases/", o->id), nullptr, &reply);
                rc != 0) {
              return rc;
            }
            if (o->c.json_output) {
              PrintJson(reply.body);
            } else {
              PrintLease(reply.body);
            }
            return kExitOk;
          }
          if (int rc = GetLease(o->c, o->id, &lease); rc != 0) return rc;
          if (verb == "env") {
            if (o->c.json_output) {
              PrintJson(lease["env"]);
              return kExitOk;
            }
            const std::map<std::string, std::string> env = LeaseEnv(lease);
            for (const auto& [name, value] : env) {
              if (!util::IsEnvName(name)) {
                PrintError(absl::StrCat("lease ", o->id,
                                        ": the server sent a variable name that "
                                        "is not one (refused, nothing printed): ",
                                        util::ShellQuote(name)));
                return 1;
              }
            }
            for (const auto& [name, value] : env) {
              std::cout << "export " << name << "=" << util::ShellQuote(value) << "\n";
            }
            if (NeedsInterposer(env)) {
              if (absl::StatusOr<std::string> interposer = FindInterposer(); interposer.ok()) {
                std::cout << "# the CUDA interposer that enforces the share, as installed on this "
                             "machine (where `gpuslice lease env` ran)\n"
                          << "export LD_PRELOAD=" << util::ShellQuote(PreloadWith(*interposer))
                          << "\n";
              } else {
                std::cerr << "gpuslice: warning: " << interposer.status().message()
                          << "; load it with LD_PRELOAD where the lease's processes run, or its "
                             "share is not enforced\n";
              }
            }
            return kExitOk;
          }
          std::vector<std::string> args = lease["docker_args"].get<std::vector<std::string>>();
          if (NeedsInterposer(LeaseEnv(lease))) {
            // The service names the devices and limits; only this machine knows where its
            // interposer and its slices' directory are.
            if (absl::StatusOr<std::string> interposer = FindInterposer(); interposer.ok()) {
              for (std::string& arg : DockerInterposerArgs(*interposer, shim::SliceDirectory())) {
                args.push_back(std::move(arg));
              }
            } else if (o->no_interposer) {
              std::cerr << "gpuslice: warning: " << interposer.status().message() << "; lease "
                        << o->id << "'s share is NOT enforced in the container (--no-interposer)\n";
            } else {
              PrintError(absl::StrCat(
                  "lease ", o->id,
                  " is a share of a GPU, which only the CUDA interposer enforces, and ",
                  interposer.status().message(),
                  "; without it the share would not be enforced in the container "
                  "(--no-interposer prints the arguments anyway)"));
              return 1;
            }
          }
          if (o->c.json_output) {
            PrintJson(json(args));
            return kExitOk;
          }
          // `docker run $(...)` splits the output on white space and expands globs, and no
          // quoting survives it: a word that would not come through unchanged is refused.
          for (const std::string& arg : args) {
            if (!util::IsSplitSafeWord(arg)) {
              PrintError(absl::StrCat(
                  "lease ", o->id, ": the docker argument ", util::ShellQuote(arg),
                  " would not survive `docker run $(...)` unchanged (white space, quotes or glob "
                  "characters); nothing printed. --json prints the arguments as a JSON array"));
              return 1;
            }
          }
          std::cout << absl::StrJoin(args, " ") << "\n";
          return kExitOk;
        };
      });
    }
  }
}

}  // namespace gpuslice::cli
