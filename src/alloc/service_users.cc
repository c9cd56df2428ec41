// The allocation service's users and their API tokens: creation, authentication with expiry,
// listing, revocation, rotation, the audit of failed authentications, and the local recovery of
// a lost admin token (gpuslice/alloc/service.h).
#include <openssl/evp.h>

#include <algorithm>
#include <ctime>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpuslice/alloc/service.h"
#include "service_internal.h"

namespace gpuslice::alloc {
using namespace internal;  // NOLINT(google-build-using-namespace): this library's own helpers
namespace {

using store::Value;

std::string Utc(std::int64_t epoch) {
  const std::time_t t = static_cast<std::time_t>(epoch);
  std::tm parts{};
  gmtime_r(&t, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

Caller CallerOf(const UserInfo& user) {
  return Caller{user.name, user.tenant, user.role, user.machine};
}

bool Expired(const UserInfo& user, std::int64_t now) {
  return user.expires_at != 0 && user.expires_at <= now;
}

}  // namespace

std::string HashToken(const std::string& token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(token.data(), token.size(), digest, &length, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) absl::StrAppendFormat(&hex, "%02x", digest[i]);
  return hex;
}

std::string NewToken() {
  std::random_device random;
  std::string token = "gs_";
  for (int i = 0; i < 8; ++i) absl::StrAppendFormat(&token, "%08x", random());
  return token;
}

std::string RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kAgent:
      return "agent";
    case Role::kTenant:
      break;
  }
  return "tenant";
}

Role RoleFromName(const std::string& name) {
  return name == "admin" ? Role::kAdmin : name == "agent" ? Role::kAgent : Role::kTenant;
}

namespace internal {

absl::Status LoadUsers(store::Database& db, std::map<std::string, UserInfo>* users,
                       std::map<std::string, std::string>* user_by_token_hash) {
  absl::StatusOr<store::Result> rows = db.Query(
      "SELECT name, tenant, role, token_hash, machine, created_at, token_issued_at, expires_at "
      "FROM users");
  if (!rows.ok()) return rows.status();
  for (const store::Row& row : rows->rows) {
    UserInfo user;
    user.name = store::AsText(row[0]);
    user.tenant = store::AsText(row[1]);
    user.role = RoleFromName(store::AsText(row[2]));
    user.machine = store::AsText(row[4]);
    user.created_at = store::AsInt(row[5]);
    // Tokens made before rotation existed were issued when their user was made.
    user.token_issued_at = std::max(store::AsInt(row[6]), user.created_at);
    user.expires_at = store::AsInt(row[7]);
    (*user_by_token_hash)[store::AsText(row[3])] = user.name;
    (*users)[user.name] = std::move(user);
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<std::int64_t> Service::ExpiryFrom(std::int64_t expires_in_s) const {
  if (expires_in_s < 0 || expires_in_s > kMaxTokenLifetimeS) {
    return absl::InvalidArgumentError(
        "expires_in_s: a token lives 1 s to ten years (0: it never expires)");
  }
  return expires_in_s == 0 ? 0 : Now() + expires_in_s;
}

void Service::ForgetUser(const std::string& name) {
  std::erase_if(user_by_token_hash_, [&](const auto& entry) { return entry.second == name; });
  users_.erase(name);
}

absl::StatusOr<std::string> Service::CreateUser(const Caller& caller, const std::string& name,
                                                const std::string& tenant, Role role,
                                                const std::string& machine,
                                                std::int64_t expires_in_s) {
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return CreateUserLocked(caller, name, tenant, role, machine, expires_in_s);
  });
}

absl::StatusOr<std::string> Service::CreateUserLocked(const Caller& caller, const std::string& name,
                                                      const std::string& tenant, Role role,
                                                      const std::string& machine,
                                                      std::int64_t expires_in_s) {
  if (absl::Status s = NeedAdmin(caller); !s.ok()) return s;
  if (!ValidName(name)) {
    return absl::InvalidArgumentError("user name: 1-64 letters, digits, '-', '_' or '.'");
  }
  if (role == Role::kTenant && !tenants_.contains(tenant)) {
    return absl::NotFoundError(absl::StrCat("tenant '", tenant, "' does not exist"));
  }
  if (role != Role::kTenant && !tenant.empty()) {
    return absl::InvalidArgumentError("admins and agents belong to no tenant");
  }
  if (role == Role::kAgent && !ValidName(machine)) {
    return absl::InvalidArgumentError(
        "machine: an agent's token is bound to one machine, named with 1-64 letters, digits, "
        "'-', '_' or '.'");
  }
  if (role != Role::kAgent && !machine.empty()) {
    return absl::InvalidArgumentError("machine: only an agent's token is bound to a machine");
  }
  absl::StatusOr<std::int64_t> expiry = ExpiryFrom(expires_in_s);
  if (!expiry.ok()) return expiry.status();
  const std::int64_t expires_at = *expiry;
  if (users_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("user '", name, "' exists"));
  }
  const std::string token = NewToken();
  const std::string hash = HashToken(token);
  Stage(
      "INSERT INTO users (name, tenant, role, token_hash, created_at, machine, token_issued_at, "
      "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      {name, tenant.empty() ? Value{} : Value{tenant}, RoleName(role), hash, Now(), machine, Now(),
       expires_at});
  json detail = {{"role", RoleName(role)}};
  if (!machine.empty()) detail["machine"] = machine;
  if (expires_at != 0) detail["expires_at"] = expires_at;
  Audited(caller, tenant, "user.create", name, "", detail.dump());
  users_[name] = UserInfo{name, tenant, role, machine, Now(), Now(), expires_at};
  user_by_token_hash_[hash] = name;
  return token;
}

absl::StatusOr<std::optional<std::string>> Service::BootstrapAdmin(const std::string& name) {
  return Changing(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::StatusOr<std::optional<std::string>> {
        for (const auto& [user_name, user] : users_) {
          if (user.role == Role::kAdmin) return std::optional<std::string>();
        }
        const Caller system{"gpuslice", "", Role::kAdmin, ""};
        absl::StatusOr<std::string> token = CreateUserLocked(system, name, "", Role::kAdmin, "", 0);
        if (!token.ok()) return token.status();
        return std::optional<std::string>(*token);
      });
}

absl::StatusOr<Caller> Service::Authenticate(const std::string& token) {
  const std::string hash = HashToken(token);
  util::MutexLock lock(mutex_);
  auto it = user_by_token_hash_.find(hash);
  if (it == user_by_token_hash_.end()) return absl::UnauthenticatedError("unknown API token");
  const UserInfo& user = users_.at(it->second);
  if (Expired(user, Now())) {
    return absl::UnauthenticatedError(
        absl::StrCat("the API token of '", user.name, "' expired at ", Utc(user.expires_at),
                     "; ask an admin for a new one (gpuslice admin rotate ", user.name, ")"));
  }
  return CallerOf(user);
}

absl::StatusOr<std::vector<UserInfo>> Service::Users(const Caller& caller) {
  util::MutexLock lock(mutex_);
  std::vector<UserInfo> out;
  for (const auto& [name, user] : users_) {
    if (caller.role == Role::kAdmin || caller.user == name) out.push_back(user);
  }
  return out;
}

absl::Status Service::RevokeUser(const Caller& caller, const std::string& name) {
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
    if (absl::Status s = NeedAdmin(caller); !s.ok()) return s;
    auto it = users_.find(name);
    if (it == users_.end()) return absl::NotFoundError(absl::StrCat("no user '", name, "'"));
    const UserInfo revoked = it->second;
    if (revoked.role == Role::kAdmin &&
        std::count_if(users_.begin(), users_.end(),
                      [](const auto& entry) { return entry.second.role == Role::kAdmin; }) == 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", name, "' is the last admin; make another admin first"));
    }
    Stage("DELETE FROM users WHERE name = ?", {name});
    json detail = {{"role", RoleName(revoked.role)}};
    if (!revoked.machine.empty()) detail["machine"] = revoked.machine;
    Audited(caller, revoked.tenant, "user.revoke", name, "", detail.dump());
    ForgetUser(name);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::string> Service::RotateToken(const Caller& caller, const std::string& name,
                                                 std::optional<std::int64_t> expires_in_s) {
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::StatusOr<std::string> {
    if (caller.role != Role::kAdmin && caller.user != name) {
      return absl::PermissionDeniedError(
          "only an admin rotates another user's token; rotate your own with your name");
    }
    auto it = users_.find(name);
    if (it == users_.end()) return absl::NotFoundError(absl::StrCat("no user '", name, "'"));
    UserInfo& user = it->second;
    const bool admin = caller.role == Role::kAdmin;
    std::int64_t end = user.expires_at;
    if (!expires_in_s.has_value() && admin && user.expires_at != 0) {
      end = Now() + std::max<std::int64_t>(user.expires_at - user.token_issued_at, 1);
    } else if (expires_in_s.has_value()) {
      absl::StatusOr<std::int64_t> expiry = ExpiryFrom(*expires_in_s);
      if (!expiry.ok()) return expiry.status();
      end = *expiry;
    }
    if (!admin && user.expires_at != 0 && (end == 0 || end > user.expires_at)) {
      return absl::PermissionDeniedError(absl::StrCat("your token ends at ", Utc(user.expires_at),
                                                      "; only an admin can move it later"));
    }
    const std::string token = NewToken();
    const std::string hash = HashToken(token);
    Stage("UPDATE users SET token_hash = ?, token_issued_at = ?, expires_at = ? WHERE name = ?",
          {hash, Now(), end, name});
    json detail = {{"role", RoleName(user.role)}};
    if (end != 0) detail["expires_at"] = end;
    Audited(caller, user.tenant, "user.rotate", name, "", detail.dump());
    std::erase_if(user_by_token_hash_, [&](const auto& entry) { return entry.second == name; });
    user_by_token_hash_[hash] = name;
    user.token_issued_at = Now();
    user.expires_at = end;
    return token;
  });
}

absl::Status Service::AuditAuthFailure(const std::string& source, const std::string& why,
                                       bool limited) {
  return Changing([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> absl::Status {
    const Caller nobody{"-", "", Role::kTenant, ""};
    Audited(nobody, "", limited ? "auth.limit" : "auth.fail", source, "",
            json{{"why", why}}.dump());
    return absl::OkStatus();
  });
}

absl::StatusOr<std::string> RecoverAdmin(store::Database& db, const std::string& name,
                                         const std::string& actor, std::int64_t now) {
  if (!ValidName(name)) {
    return absl::InvalidArgumentError("admin name: 1-64 letters, digits, '-', '_' or '.'");
  }
  if (absl::Status st = store::Migrate(db); !st.ok()) return st;
  store::Transaction transaction(db);
  if (!transaction.status().ok()) return transaction.status();
  absl::StatusOr<store::Result> found =
      db.Query("SELECT role FROM users WHERE name = ?", std::vector<Value>{name});
  if (!found.ok()) return found.status();
  const bool exists = !found->rows.empty();
  if (exists && store::AsText(found->rows[0][0]) != "admin") {
    return absl::FailedPreconditionError(
        absl::StrCat("'", name, "' is a user of role ", store::AsText(found->rows[0][0]),
                     ", not an admin; name an admin, or a new name to make a new admin"));
  }
  const std::string token = NewToken();
  const std::vector<Value> params = {HashToken(token), now, name};
  absl::Status written =
      exists ? db.Exec(
                   "UPDATE users SET token_hash = ?, token_issued_at = ?, expires_at = 0 "
                   "WHERE name = ?",
                   params)
             : db.Exec(
                   "INSERT INTO users (token_hash, token_issued_at, name, tenant, role, "
                   "created_at, machine, expires_at) VALUES (?, ?, ?, NULL, 'admin', ?, '', 0)",
                   std::vector<Value>{HashToken(token), now, name, now});
  if (!written.ok()) return written;
  absl::StatusOr<store::Result> last = db.Query("SELECT MAX(id) FROM audit");
  if (!last.ok()) return last.status();
  if (store::AsInt(last->rows[0][0]) >= Service::kMaxStoredId) {
    return absl::DataLossError("the audit table's ids are exhausted");
  }
  const std::vector<Value> audit = {store::AsInt(last->rows[0][0]) + 1, now, actor, name,
                                    json{{"created", !exists}}.dump()};
  if (absl::Status st = db.Exec(
          "INSERT INTO audit (id, at, actor, tenant, action, subject, purpose, detail) VALUES (?, "
          "?, ?, '', 'admin.recover', ?, '', ?)",
          audit);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = transaction.Commit(); !st.ok()) return st;
  return token;
}

}  // namespace gpuslice::alloc
