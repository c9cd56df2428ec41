// `gpuslice admin user|users|revoke|rotate|recover`: users and their API tokens. All but
// `recover` are calls to the API (gpuslice/api/server.h); `recover` opens the store itself, for
// the admin who lost the admin token (alloc::RecoverAdmin).
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client.h"
#include "common.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/store/database.h"
#include "gpuslice/util/duration.h"
#include "gpuslice/util/private_file.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

// A token's lifetime: a duration (util::ParseDuration) of at most ten years; "never" or "0": no
// end. nullopt when malformed.
std::optional<std::int64_t> ParseLifetime(const std::string& text) {
  if (text == "never" || text == "0") return 0;
  const absl::StatusOr<std::int64_t> seconds =
      util::ParseDuration(text, alloc::Service::kMaxTokenLifetimeS);
  return seconds.ok() ? std::optional<std::int64_t>(*seconds) : std::nullopt;
}

CLI::Validator Lifetime() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        return ParseLifetime(text).has_value()
                   ? ""
                   : "a lifetime such as 30d, 12h, 90m or 3600 (seconds), at most ten years, or "
                     "'never', not '" +
                         text + "'";
      },
      "LIFETIME");
}

std::string Utc(std::int64_t epoch) {
  if (epoch <= 0) return "never";
  const std::time_t t = static_cast<std::time_t>(epoch);
  std::tm parts{};
  gmtime_r(&t, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &parts);
  return text;
}

// Prints a new token, or writes it (mode 0600) to `path` and says where.
int HandOver(const std::string& token, const std::string& path, const std::string& whose) {
  if (path.empty()) {
    std::cout << token << "\n";
    return kExitOk;
  }
  if (absl::Status st = util::WritePrivateFile(path, token + "\n"); !st.ok()) {
    PrintError(absl::StrCat("--write ", path, ": ", st.message(), " (the new token of ", whose,
                            " is in force; rotate again to get one you can keep)"));
    return kExitCheckFailed;
  }
  std::cout << "wrote the new token of " << whose << " to " << path << " (mode 0600)\n";
  return kExitOk;
}

void AddCreate(CLI::App* admin, Action* action) {
  struct Options {
    ClientOptions c;
    std::string name, tenant, machine, expires = "never", write;
    bool is_admin = false, is_agent = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd =
      admin->add_subcommand("user", "Create a user and print its API token (shown once)");
  AddConnection(cmd, o->c);
  cmd->add_option("name", o->name, "User name")->required();
  cmd->add_option("--tenant", o->tenant, "The user's tenant");
  cmd->add_flag("--admin", o->is_admin, "An administrator (no tenant)");
  cmd->add_flag("--agent", o->is_agent,
                "A machine's agent (gpuslice agent): reports GPUs, sets up slices");
  cmd->add_option("--machine", o->machine,
                  "With --agent: the one machine (the agent's --host) the token may report and "
                  "serve (default: the user name)");
  cmd->add_option("--expires", o->expires,
                  "The token's lifetime: 30d, 12h, 90m, seconds, or 'never'")
      ->check(Lifetime())
      ->capture_default_str();
  cmd->add_option("--write", o->write, "Write the token to this file (mode 0600) instead");
  cmd->callback([o, action] {
    *action = [o] {
      if (!o->is_agent && !o->machine.empty()) {
        PrintError("--machine goes with --agent: only an agent's token is bound to a machine");
        return kExitBadInput;
      }
      json body = {{"name", o->name},
                   {"tenant", o->tenant},
                   {"role", o->is_admin   ? "admin"
                            : o->is_agent ? "agent"
                                          : "tenant"},
                   {"expires_in_s", *ParseLifetime(o->expires)}};
      if (o->is_agent) body["machine"] = o->machine.empty() ? o->name : o->machine;
      Reply reply;
      if (int rc = Call(o->c, "POST", "/v1/users", &body, &reply); rc != 0) return rc;
      if (o->c.json_output) {
        PrintJson(reply.body);
        return kExitOk;
      }
      return HandOver(reply.body["token"].get<std::string>(), o->write, o->name);
    };
  });
}

void AddList(CLI::App* admin, Action* action) {
  auto o = std::make_shared<ClientOptions>();
  CLI::App* cmd = admin->add_subcommand(
      "users", "List users and their tokens' lifetimes (admins: everyone; others: themselves)");
  AddConnection(cmd, *o);
  cmd->callback([o, action] {
    *action = [o] {
      Reply reply;
      if (int rc = Call(*o, "GET", "/v1/users", nullptr, &reply); rc != 0) return rc;
      if (o->json_output) {
        PrintJson(reply.body);
        return kExitOk;
      }
      std::cout << absl::StrFormat("%-24s %-7s %-16s %-16s %-24s %s\n", "NAME", "ROLE", "TENANT",
                                   "MACHINE", "TOKEN ISSUED", "EXPIRES");
      for (const json& u : reply.body["users"]) {
        std::cout << absl::StrFormat(
            "%-24s %-7s %-16s %-16s %-24s %s%s\n", u["name"].get<std::string>(),
            u["role"].get<std::string>(), u.value("tenant", "-"), u.value("machine", "-"),
            Utc(u["token_issued_at"].get<std::int64_t>()), Utc(u["expires_at"].get<std::int64_t>()),
            u["expired"].get<bool>() ? " (expired)" : "");
      }
      return kExitOk;
    };
  });
}

void AddRevoke(CLI::App* admin, Action* action) {
  struct Options {
    ClientOptions c;
    std::string name;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = admin->add_subcommand(
      "revoke", "Delete a user; its token stops working at once (its leases stay)");
  AddConnection(cmd, o->c);
  cmd->add_option("name", o->name, "User name")->required();
  cmd->callback([o, action] {
    *action = [o] {
      Reply reply;
      if (int rc = Call(o->c, "DELETE", "/v1/users/" + o->name, nullptr, &reply); rc != 0) {
        return rc;
      }
      if (o->c.json_output) {
        PrintJson(reply.body);
      } else {
        std::cout << "revoked " << o->name << "\n";
      }
      return kExitOk;
    };
  });
}

void AddRotate(CLI::App* admin, Action* action) {
  struct Options {
    ClientOptions c;
    std::string name, expires, write;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = admin->add_subcommand(
      "rotate",
      "Give a user a new token; the old one stops working at once. Admins rotate anyone's, "
      "others their own");
  AddConnection(cmd, o->c);
  cmd->add_option("name", o->name, "User name")->required();
  cmd->add_option("--expires", o->expires,
                  "The new token's lifetime: 30d, 12h, 90m, seconds, or 'never' (default: as "
                  "long as the old one's; only admins may extend)")
      ->check(Lifetime());
  cmd->add_option("--write", o->write,
                  "Write the new token to this file (mode 0600), e.g. gpuslice-admin.token");
  cmd->callback([o, action] {
    *action = [o] {
      json body = json::object();
      if (!o->expires.empty()) body["expires_in_s"] = *ParseLifetime(o->expires);
      Reply reply;
      if (int rc = Call(o->c, "POST", "/v1/users/" + o->name + "/rotate", &body, &reply); rc != 0) {
        return rc;
      }
      if (o->c.json_output) {
        PrintJson(reply.body);
        return kExitOk;
      }
      return HandOver(reply.body["token"].get<std::string>(), o->write, o->name);
    };
  });
}

void AddRecover(CLI::App* admin, Action* action) {
  struct Options {
    std::string db = "gpuslice.db", name = "admin", write;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = admin->add_subcommand(
      "recover",
      "Lost the admin token? Give an admin a new one by opening the store directly (no server, "
      "no token: whoever can open the store may). Restart `gpuslice serve` afterwards");
  cmd->add_option("--db", o->db, "The store serve uses: an SQLite file, or postgres://...")
      ->capture_default_str();
  cmd->add_option("--name", o->name,
                  "The admin to give a new token (made when no user has this name)")
      ->capture_default_str();
  cmd->add_option("--write", o->write,
                  "Write the token to this file (mode 0600), e.g. gpuslice-admin.token");
  cmd->callback([o, action] {
    *action = [o] {
      if (o->db.rfind("postgres", 0) != 0 && !std::filesystem::exists(o->db)) {
        PrintError(
            absl::StrCat("--db ", o->db, ": no such store (run this beside it, or name it)"));
        return kExitBadInput;
      }
      absl::StatusOr<std::unique_ptr<store::Database>> db = store::OpenDatabase(o->db);
      if (!db.ok()) {
        PrintError(absl::StrCat("--db ", o->db, ": ", db.status().message()));
        return kExitBadInput;
      }
      const char* login = std::getenv("USER");
      absl::StatusOr<std::string> token = alloc::RecoverAdmin(
          **db, o->name, absl::StrCat("local:", login != nullptr ? login : "?"), EpochNow());
      if (!token.ok()) {
        PrintError(std::string(token.status().message()));
        return kExitCheckFailed;
      }
      std::cerr << "gpuslice: admin '" << o->name << "' has a new token (audited as "
                << "admin.recover); restart `gpuslice serve` for it to take effect\n";
      return HandOver(*token, o->write, o->name);
    };
  });
}

}  // namespace

void AddUserCommands(CLI::App* admin, Action* action) {
  AddCreate(admin, action);
  AddList(admin, action);
  AddRevoke(admin, action);
  AddRotate(admin, action);
  AddRecover(admin, action);
}

}  // namespace gpuslice::cli
