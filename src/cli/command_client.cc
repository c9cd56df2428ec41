// Client commands of the allocation service (gpuslice serve): acquire, leases, renew, release,
// queue, cancel, audit, and the admin commands. Each is one HTTP call to the API
// (gpuslice/api/server.h). The server comes from --server or $GPUSLICE_SERVER
// (default http://127.0.0.1:8470), the token from --token, $GPUSLICE_TOKEN or the file
// ./gpuslice-admin.token that the first `serve` writes.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "admin_tables.h"
#include "client.h"
#include "common.h"
#include "gpuslice/util/clock.h"
#include "gpuslice/util/duration.h"
#include "gpuslice/util/utf8.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace

std::string ServerUrl(const ClientOptions& options) {
  std::string server = !options.server.empty() ? options.server : Env("GPUSLICE_SERVER");
  return server.empty() ? "https://127.0.0.1:8470" : server;
}

std::string CaFile(const ClientOptions& options) {
  if (!options.ca.empty()) return options.ca;
  if (std::string env = Env("GPUSLICE_CA"); !env.empty()) return env;
  std::error_code ec;
  return std::filesystem::exists("gpuslice-tls.crt", ec) ? "gpuslice-tls.crt" : "";
}

absl::StatusOr<api::ClientSettings> ClientSettings(const ClientOptions& options) {
  api::ClientSettings settings;
  settings.server = ServerUrl(options);
  settings.token = options.token;
  if (settings.token.empty()) {
    const char* from_env = std::getenv("GPUSLICE_TOKEN");
    if (from_env != nullptr && *from_env == '\0') {
      // Set but empty is a mistake (an unset variable in a script, say), never a reason to
      // fall back to the admin's token file.
      return absl::InvalidArgumentError(
          "GPUSLICE_TOKEN is set but empty; set it to a token, or unset it");
    }
    if (from_env != nullptr) settings.token = from_env;
  }
  if (settings.token.empty()) {
    std::ifstream file("gpuslice-admin.token");
    std::getline(file, settings.token);
  }
  settings.ca = CaFile(options);
  settings.client_cert = options.client_cert;
  settings.client_key = options.client_key;
  settings.timeout_s = options.timeout_s;
  return settings;
}

int Call(const ClientOptions& options, const std::string& method, const std::string& path,
         const json* body, Reply* reply, bool conflict_is_answer) {
  absl::StatusOr<api::ClientSettings> settings = ClientSettings(options);
  absl::StatusOr<api::Client> client =
      settings.ok() ? api::Client::Make(*std::move(settings)) : settings.status();
  if (!client.ok()) {
    PrintError(std::string(client.status().message()));
    return kExitBadInput;
  }
  absl::StatusOr<api::Response> answer = client->Call(method, path, body);
  if (!answer.ok()) {
    PrintError(std::string(answer.status().message()));
    return kExitBadInput;
  }
  reply->status = answer->status;
  if (answer->status >= 400 && !(conflict_is_answer && answer->status == 409)) {
    PrintError(RefusalText(answer->status, answer->Error()));
    reply->body = std::move(answer->body);
    return answer->status == 401 || answer->status == 403 ? kExitNotAllowed : kExitCheckFailed;
  }
  reply->body = std::move(answer->body);
  return kExitOk;
}

namespace {

// A field of a server's answer as text to print: a string through util::ForTerminal, a number
// as JSON, "?" when absent or of another shape.
std::string ShownField(const json& object, const char* key) {
  if (!object.is_object()) return "?";
  const auto it = object.find(key);
  if (it == object.end()) return "?";
  if (it->is_string()) return util::ForTerminal(it->get<std::string>());
  return it->is_number() ? it->dump() : "?";
}

}  // namespace

std::string RefusalText(int http_status, const std::string& raw_message) {
  // The server's words, shown: a hostile or broken server cannot drive the terminal.
  const std::string message = util::ForTerminal(raw_message);
  const char* what = "refused";
  switch (http_status) {
    case 400:
    case 411:
    case 413:
    case 415:
      what = "bad request";
      break;
    case 401:
      return absl::StrCat("not signed in: ", message, " (check --token or $GPUSLICE_TOKEN)");
    case 403:
      what = "not allowed";
      break;
    case 404:
      what = "not found";
      break;
    case 429:
      what = "too many attempts";
      break;
    default:
      if (http_status >= 500) what = "the server failed";
  }
  return absl::StrCat(what, ": ", message);
}

namespace {

std::string When(std::int64_t epoch) {
  if (epoch <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(epoch);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", std::gmtime(&t));
  return text;
}

}  // namespace

void PrintLease(const json& lease) {
  std::string devices;
  for (const json& d : lease["devices"])
    devices += (devices.empty() ? "" : "; ") + d.get<std::string>();
  std::cout << "lease " << lease["id"] << " (" << lease["state"].get<std::string>()
            << "): " << lease["class"].get<std::string>() << " on "
            << lease["node"].get<std::string>() << " [" << devices << "], "
            << absl::StrFormat("%.1f", lease["memory_gib"].get<double>()) << " GiB, tenant "
            << lease["tenant"].get<std::string>() << ", until "
            << When(lease["expires_at"].get<std::int64_t>())
            << " UTC; purpose: " << lease["purpose"].get<std::string>() << "\n";
}

void AddConnection(CLI::App* cmd, ClientOptions& options) {
  cmd->add_option("--server", options.server,
                  "API URL (default $GPUSLICE_SERVER or https://127.0.0.1:8470)");
  cmd->add_option("--ca", options.ca,
                  "CA certificate (PEM) to trust for an https:// server (default $GPUSLICE_CA, "
                  "else ./gpuslice-tls.crt when present, else the system's trust store)");
  cmd->add_option("--token", options.token,
                  "API token (default $GPUSLICE_TOKEN or ./gpuslice-admin.token)");
  cmd->add_flag("--json", options.json_output, "Print the API's JSON");
  cmd->add_option("--timeout", options.timeout_s, "Seconds to wait for the server's answer")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
}

CLI::Validator PositiveId() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        std::int64_t value = 0;
        if (!absl::SimpleAtoi(text, &value) || value <= 0) {
          return "must be a positive integer below 2^63, not '" + text + "'";
        }
        return "";
      },
      "ID");
}

void AddClientCommands(CLI::App& app, const GlobalOptions& global, Action* action) {
  (void)global;
  // acquire
  {
    struct Options {
      ClientOptions c;
      std::string class_name, profile, purpose;
      int share = 0;
      std::int64_t vram = 0, ttl = 0;
      bool no_wait = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand(
        "acquire",
        "Ask the service for a slice (a class, a MIG profile or a share). Exits 0 when granted, "
        "1 when refused, 4 when queued (the slice is not yours yet: see `gpuslice queue`)");
    AddConnection(cmd, o->c);
    cmd->add_option("--class", o->class_name,
                    "A class: small, medium, large, full or one the admin defined");
    cmd->add_option("--profile", o->profile, "A MIG profile, e.g. 3g.40gb or 3g");
    cmd->add_option("--share", o->share, "A fraction of a shared GPU in milli (1-1000)");
    cmd->add_option("--vram", o->vram, "VRAM of the share, MiB");
    cmd->add_option("--purpose", o->purpose, "What it is for (required; recorded in the audit)")
        ->required();
    cmd->add_option(
           "--ttl", o->ttl,
           "How long the lease lasts: 90m, 8h, 3600 (seconds); default: the class's maximum")
        ->transform(Duration(util::kMaxDurationS));
    cmd->add_flag("--no-wait", o->no_wait, "Refuse instead of queueing when there is no room now");
    cmd->callback([o, action] {
      *action = [o] {
        json body = {{"purpose", o->purpose}, {"wait", !o->no_wait}};
        if (!o->class_name.empty()) body["class"] = o->class_name;
        if (!o->profile.empty()) body["profile"] = o->profile;
        if (o->share > 0) body["share_milli"] = o->share;
        if (o->vram > 0) body["vram_mib"] = o->vram;
        if (o->ttl > 0) body["ttl_s"] = o->ttl;
        Reply reply;
        if (int rc = Call(o->c, "POST", "/v1/leases", &body, &reply, true); rc != 0) return rc;
        if (o->c.json_output) {
          PrintJson(reply.body);
        } else if (reply.status == 201) {
          PrintLease(reply.body["lease"]);
        } else if (reply.status == 202) {
          const json queued = reply.body.value("queued", json::object());
          std::cout << "queued as " << ShownField(queued, "id") << ", position "
                    << ShownField(queued, "position") << " in class " << ShownField(queued, "class")
                    << ": " << ShownField(reply.body, "reason") << "\n";
        } else {
          std::cout << "refused: " << ShownField(reply.body, "error") << "\n";
        }
        // A script tells the three apart: granted 0, refused 1, queued (no slice yet) 4.
        return reply.status == 409 ? 1 : reply.status == 202 ? kExitQueued : kExitOk;
      };
    });
  }
  // leases
  {
    struct Options {
      ClientOptions c;
      bool all = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("leases", "List leases (active ones; --all for history)");
    AddConnection(cmd, o->c);
    cmd->add_flag("--all", o->all, "Include released, expired and reclaimed leases");
    cmd->callback([o, action] {
      *action = [o] {
        Reply reply;
        if (int rc =
                Call(o->c, "GET", o->all ? "/v1/leases?all=true" : "/v1/leases", nullptr, &reply);
            rc != 0)
          return rc;
        if (o->c.json_output) {
          PrintJson(reply.body);
          return kExitOk;
        }
        if (reply.body["leases"].empty()) std::cout << "no leases\n";
        for (const json& lease : reply.body["leases"]) PrintLease(lease);
        return kExitOk;
      };
    });
  }
  // renew, release, cancel
  for (const char* name : {"renew", "release", "cancel"}) {
    struct Options {
      ClientOptions c;
      std::int64_t id = 0, ttl = 0;
    };
    auto o = std::make_shared<Options>();
    const std::string verb = name;
    CLI::App* cmd = app.add_subcommand(verb, verb == "renew"     ? "Extend a lease"
                                             : verb == "release" ? "Give a lease back"
                                                                 : "Withdraw a queued request");
    AddConnection(cmd, o->c);
    cmd->add_option("id", o->id, verb == "cancel" ? "Queue entry id" : "Lease id")
        ->required()
        ->check(PositiveId());
    if (verb == "renew")
      cmd->add_option("--ttl", o->ttl,
                      "How long from now: 90m, 8h, 3600 (seconds); default: the class's maximum")
          ->transform(Duration(util::kMaxDurationS));
    cmd->callback([o, action, verb] {
      *action = [o, verb] {
        Reply reply;
        json body = {{"ttl_s", o->ttl}};
        const std::string id = std::to_string(o->id);
        const int rc =
            verb == "renew"     ? Call(o->c, "POST", "/v1/leases/" + id + "/renew", &body, &reply)
            : verb == "release" ? Call(o->c, "DELETE", "/v1/leases/" + id, nullptr, &reply)
                                : Call(o->c, "DELETE", "/v1/queue/" + id, nullptr, &reply);
        if (rc != 0) return rc;
        if (o->c.json_output) {
          PrintJson(reply.body);
        } else if (verb == "renew") {
          PrintLease(reply.body);
        } else {
          std::cout << (verb == "release" ? "released lease " : "cancelled queue entry ") << id
                    << "\n";
        }
        return kExitOk;
      };
    });
  }
  // queue
  {
    auto o = std::make_shared<ClientOptions>();
    CLI::App* cmd =
        app.add_subcommand("queue", "Requests waiting for capacity, with their positions");
    AddConnection(cmd, *o);
    cmd->callback([o, action] {
      *action = [o] {
        Reply reply;
        if (int rc = Call(*o, "GET", "/v1/queue", nullptr, &reply); rc != 0) return rc;
        if (o->json_output) {
          PrintJson(reply.body);
          return kExitOk;
        }
        if (reply.body["queue"].empty()) std::cout << "nothing queued\n";
        for (const json& q : reply.body["queue"]) {
          std::cout << "queue " << q["id"] << ": " << q["class"].get<std::string>() << " #"
                    << q["position"] << " for " << q["tenant"].get<std::string>() << " since "
                    << When(q["enqueued_at"].get<std::int64_t>())
                    << " UTC; purpose: " << q["purpose"].get<std::string>() << "\n";
        }
        return kExitOk;
      };
    });
  }
  // audit
  {
    struct Options {
      ClientOptions c;
      std::string tenant, since;
      int limit = 1000;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("audit", "Who took which slice, when and why");
    AddConnection(cmd, o->c);
    cmd->add_option("--tenant", o->tenant, "Only this tenant (admins)");
    cmd->add_option("--since", o->since,
                    "From when: a duration ago (7d, 12h, 30m, 90 seconds), an RFC 3339 date or "
                    "time (2026-12-01, 2026-12-01T08:30:00Z) or @EPOCH");
    cmd->add_option("--limit", o->limit, "At most this many events")->check(CLI::Range(1, 100000));
    cmd->callback([o, action] {
      *action = [o] {
        absl::StatusOr<std::int64_t> since =
            o->since.empty() ? std::int64_t{0} : util::ParseSince(o->since, util::EpochNow());
        if (!since.ok()) {
          PrintError(absl::StrCat("--since: ", since.status().message()));
          return kExitBadInput;
        }
        Reply reply;
        const std::string path = absl::StrCat("/v1/audit?since=", *since, "&limit=", o->limit,
                                              o->tenant.empty() ? "" : "&tenant=" + o->tenant);
        if (int rc = Call(o->c, "GET", path, nullptr, &reply); rc != 0) return rc;
        if (o->c.json_output) {
          PrintJson(reply.body);
          return kExitOk;
        }
        for (const json& e : reply.body["events"]) {
          std::cout << When(e["at"].get<std::int64_t>()) << "  " << e["action"].get<std::string>()
                    << "  " << e["subject"].get<std::string>()
                    << "  tenant=" << e["tenant"].get<std::string>()
                    << " by=" << e["actor"].get<std::string>()
                    << (e["purpose"].get<std::string>().empty()
                            ? ""
                            : "  purpose: " + e["purpose"].get<std::string>())
                    << "  " << e["detail"].dump() << "\n";
        }
        return kExitOk;
      };
    });
  }
  // admin
  {
    CLI::App* admin =
        app.add_subcommand("admin", "Administer the service: tenants, users and tokens, classes");
    admin->require_subcommand(1);
    struct TenantOptions {
      ClientOptions c;
      std::string name;
      bool full = false, remove = false;
      int priority = 0;
      double max_gib = 0;
      std::vector<std::string> quotas;
    };
    auto t = std::make_shared<TenantOptions>();
    CLI::App* tenant =
        admin->add_subcommand("tenant", "Create or update a tenant (or --delete it)");
    AddConnection(tenant, t->c);
    tenant->add_option("name", t->name, "Tenant name")->required();
    tenant->add_flag("--full", t->full, "May take full GPUs");
    tenant->add_option("--priority", t->priority, "Queue priority (higher first)");
    tenant->add_option("--max-gib", t->max_gib, "GPU memory held at once, GiB (0: no limit)");
    tenant->add_option("--quota", t->quotas, "CLASS=N slices at once, repeatable");
    tenant->add_flag("--delete", t->remove, "Delete the tenant");
    tenant->callback([t, action] {
      *action = [t] {
        Reply reply;
        if (t->remove) {
          if (int rc = Call(t->c, "DELETE", "/v1/tenants/" + t->name, nullptr, &reply); rc != 0)
            return rc;
          std::cout << "deleted tenant " << t->name << "\n";
          return kExitOk;
        }
        json quotas = json::object();
        for (const std::string& q : t->quotas) {
          std::vector<std::string> parts = absl::StrSplit(q, '=');
          int n = 0;
          if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &n)) {
            PrintError("--quota: CLASS=N, e.g. small=4");
            return kExitBadInput;
          }
          quotas[parts[0]] = n;
        }
        json body = {{"may_take_full", t->full},
                     {"priority", t->priority},
                     {"max_gib", t->max_gib},
                     {"max_slices", quotas}};
        if (int rc = Call(t->c, "PUT", "/v1/tenants/" + t->name, &body, &reply); rc != 0) return rc;
        if (t->c.json_output) {
          PrintJson(reply.body);
        } else {
          std::cout << TenantsTable(json::array({reply.body}));
        }
        return kExitOk;
      };
    });
    AddUserCommands(admin, action);
    struct ClassOptions {
      ClientOptions c;
      std::string name;
      std::vector<std::string> mig;
      int share = 0;
      std::int64_t vram = 0, max_lease = 8 * 3600, idle = 0;
      bool full = false, remove = false;
    };
    auto k = std::make_shared<ClassOptions>();
    CLI::App* klass = admin->add_subcommand("class", "Define or change a class (or --delete it)");
    AddConnection(klass, k->c);
    klass->add_option("name", k->name, "Class name")->required();
    klass->add_option("--mig", k->mig, "MODEL=PROFILE, repeatable (e.g. H100-80GB=1g.10gb)");
    klass->add_option("--share", k->share, "A share of a shared GPU, milli");
    klass->add_option("--vram", k->vram, "VRAM of the share, MiB");
    klass->add_flag("--full", k->full, "A whole GPU");
    klass->add_option("--max-lease", k->max_lease, "Longest lease: 8h, 7d, 3600 (seconds)")
        ->transform(Duration(util::kMaxDurationS));
    klass
        ->add_option("--idle-timeout", k->idle,
                     "Reclaim after this long idle: 1h, 30m; 0 or never: no reclaim")
        ->transform(Duration(util::kMaxDurationS, /*zero_means_none=*/true));
    klass->add_flag("--delete", k->remove, "Delete the class");
    klass->callback([k, action] {
      *action = [k] {
        Reply reply;
        if (k->remove) {
          if (int rc = Call(k->c, "DELETE", "/v1/classes/" + k->name, nullptr, &reply); rc != 0)
            return rc;
          std::cout << "deleted class " << k->name << "\n";
          return kExitOk;
        }
        json mig = json::object();
        for (const std::string& m : k->mig) {
          std::vector<std::string> parts = absl::StrSplit(m, '=');
          if (parts.size() != 2) {
            PrintError("--mig: MODEL=PROFILE, e.g. H100-80GB=1g.10gb");
            return kExitBadInput;
          }
          mig[parts[0]] = parts[1];
        }
        json body = {{"mig", mig},      {"share_milli", k->share},     {"vram_mib", k->vram},
                     {"full", k->full}, {"max_lease_s", k->max_lease}, {"idle_timeout_s", k->idle}};
        if (int rc = Call(k->c, "PUT", "/v1/classes/" + k->name, &body, &reply); rc != 0) return rc;
        if (k->c.json_output) {
          PrintJson(reply.body);
        } else {
          std::cout << ClassesTable(json::array({reply.body}));
        }
        return kExitOk;
      };
    });
    for (const char* what : {"tenants", "classes"}) {
      auto o = std::make_shared<ClientOptions>();
      const std::string list = what;
      CLI::App* cmd = admin->add_subcommand(list, "List " + list);
      AddConnection(cmd, *o);
      cmd->callback([o, action, list] {
        *action = [o, list] {
          Reply reply;
          if (int rc = Call(*o, "GET", "/v1/" + list, nullptr, &reply); rc != 0) return rc;
          if (o->json_output) {
            PrintJson(reply.body);
            return kExitOk;
          }
          const json& items = reply.body.is_object() && reply.body.contains(list) ? reply.body[list]
                                                                                  : json::array();
          std::cout << (list == "tenants" ? TenantsTable(items) : ClassesTable(items));
          return kExitOk;
        };
      });
    }
  }
}

}  // namespace gpuslice::cli
