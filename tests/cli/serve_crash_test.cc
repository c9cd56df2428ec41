// Crash test of `gpuslice serve`: nothing acknowledged is lost after kill -9 of the server, a slice
// is never held by two leases, and quotas are never exceeded.
//
// The built binary serves a simulated 2xA100-80GB fleet (14 "small" 1g.10gb slices) on a loopback
// port as a child process, on a fresh store (SQLite; or PostgreSQL: a new database on the server of
// $GPUSLICE_PG_URL, else a throwaway server, skipped without PostgreSQL). Two tenants (quotas of
// 5 and 20 small slices) with 4 users each; 16 client threads (cpp-httplib, keep-alive, each
// holding up to 1, 2, 3 leases in cycles 1, 2, 3) acquire (wait=false), renew and release in a
// loop and record exactly what the service acknowledged (201 grants with lease id, devices and
// bound uuids; 200 renewals and releases) and what was sent but never answered (in doubt). While
// they run, every acknowledged grant is checked against the leases acknowledged before it: no
// slice or uuid held twice, no tenant over quota. After 0.6-1.6 s under load the server gets
// SIGKILL; it is restarted on the same store in the same working directory, and the admin checks:
//   * every acknowledged grant exists, with its tenant, user, node and devices;
//   * every acknowledged release is released; every lease acknowledged granted and not sent for
//     release is active, with the expiry of its last acknowledged renewal;
//   * a lease nobody was told of belongs to a user with as many acquires in doubt, and is active;
//   * no two active leases share a slice (node and device line) or a bound uuid; per tenant, the
//     active small leases are within the quota;
//   * the audit has one "grant" event per lease and one "release" event per released lease;
//   * the restarted service hands out exactly the free capacity: acquiring small until refused
//     yields min(quota left, 14 - active) for the small-quota tenant, then the rest of
//     14 - active for the other, never a slice or uuid that an active lease holds.
// The load, kill, restart, check cycle runs 3 times per store, killing at a random moment (the
// seed of the random choices is printed; GPUSLICE_CRASH_SEED=N makes the same choices again).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/run_gpuslice.h"
#include "cli/serve_process.h"
#include "nlohmann/json.hpp"
#include "require.h"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif
#ifndef GPUSLICE_SOURCE_DIR
#error "GPUSLICE_SOURCE_DIR must name the source tree"
#endif

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using gpuslice::cli::testing::FirstLine;
using gpuslice::cli::testing::FreeLoopbackPort;
using gpuslice::cli::testing::GpusliceProcess;
using gpuslice::cli::testing::ReadFile;
using gpuslice::cli::testing::Shell;
using gpuslice::cli::testing::Tail;

constexpr int kSmallSlices = 14;  // 2 x A100-80GB, 7 x 1g.10gb each
constexpr int kQuotaA = 5;
constexpr int kQuotaB = 20;
constexpr int kCycles = 3;
constexpr int kUsersPerTenant = 4;
constexpr int kThreadsPerUser = 2;
constexpr int kAuditLimit = 100000;
constexpr std::int64_t kTtlS = 3600;

std::int64_t EpochNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Quoted(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A fresh directory under the system's temp dir, traversable by user postgres; removed at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("gpuslice_crash_" + name + "_" + std::to_string(getpid()))) {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
    fs::create_directories(path_);
    fs::permissions(path_,
                    fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                        fs::perms::others_read | fs::perms::others_exec,
                    ignored);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// Ignores SIGPIPE for the scope, so that a client writing on a connection of the killed server
// gets EPIPE rather than ending the test (cpp-httplib sends without MSG_NOSIGNAL).
class IgnoreSigpipe {
 public:
  IgnoreSigpipe() : old_(std::signal(SIGPIPE, SIG_IGN)) {}
  ~IgnoreSigpipe() { std::signal(SIGPIPE, old_); }
  IgnoreSigpipe(const IgnoreSigpipe&) = delete;
  IgnoreSigpipe& operator=(const IgnoreSigpipe&) = delete;

 private:
  void (*old_)(int);
};

std::unique_ptr<httplib::Client> MakeClient(int port, const std::string& token) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port);
  client->set_keep_alive(true);
  client->set_connection_timeout(5);
  client->set_read_timeout(60);
  client->set_write_timeout(60);
  if (!token.empty()) client->set_bearer_token_auth(token);
  return client;
}

// An answer of the service; `answered` false when none came (the request is in doubt).
struct Reply {
  bool answered = false;
  int status = 0;
  json body;
  std::string text;
};

Reply Call(httplib::Client& client, const std::string& method, const std::string& path,
           const json& body = nullptr) {
  httplib::Result result = method == "GET"      ? client.Get(path)
                           : method == "DELETE" ? client.Delete(path)
                           : method == "PUT"    ? client.Put(path, body.dump(), "application/json")
                                             : client.Post(path, body.dump(), "application/json");
  Reply reply;
  if (!result) {
    reply.text = "no answer: " + httplib::to_string(result.error());
    return reply;
  }
  reply.answered = true;
  reply.status = result->status;
  reply.text = result->body;
  reply.body = json::parse(result->body, nullptr, false);
  return reply;
}

// ---- what the clients were told

enum class ReleaseState {
  kHeld,   // not sent for release
  kSent,   // release sent, no answer (in doubt)
  kAcked,  // release acknowledged (200), or found released after a restart
};

struct LeaseRecord {
  std::int64_t id = 0;
  std::string user;
  std::string tenant;
  std::string node;
  std::vector<std::string> devices;
  std::vector<std::string> uuids;      // bound uuids as last seen (a restart binds again)
  std::vector<std::string> gpu_uuids;  // the physical GPUs (the same after a restart)
  bool acknowledged = true;            // false: found after a restart, its acquire in doubt
  int cycle = 0;
  ReleaseState release = ReleaseState::kHeld;
  std::int64_t expires_at = 0;  // as last acknowledged
  // A renewal sent and not answered: when (epoch seconds) and its ttl.
  std::optional<std::pair<std::int64_t, std::int64_t>> renew_in_doubt;
};

std::vector<std::string> Strings(const json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const json& s : j) out.push_back(s.is_string() ? s.get<std::string>() : s.dump());
  return out;
}

std::vector<std::string> BoundField(const json& lease, const char* field) {
  std::vector<std::string> out;
  const json bound = lease.value("bound", json::array());
  if (!bound.is_array()) return out;
  for (const json& d : bound) {
    out.push_back(d.is_object() && d.contains(field) && d[field].is_string()
                      ? d[field].get<std::string>()
                      : "");
  }
  return out;
}

LeaseRecord RecordOf(const json& lease) {
  LeaseRecord r;
  r.id = lease.value("id", std::int64_t{0});
  r.user = lease.value("user", "");
  r.tenant = lease.value("tenant", "");
  r.node = lease.value("node", "");
  r.devices = Strings(lease.value("devices", json::array()));
  r.uuids = BoundField(lease, "uuid");
  r.gpu_uuids = BoundField(lease, "gpu_uuid");
  r.expires_at = lease.value("expires_at", std::int64_t{0});
  return r;
}

std::string SliceKey(const std::string& node, const std::string& device) {
  return node + " | " + device;
}

struct CycleStats {
  int grants = 0;
  int releases = 0;
  int renews = 0;
  int refusals = 0;
  int in_doubt_acquires = 0;
  int in_doubt_renews = 0;
  int in_doubt_releases = 0;
  int Acknowledged() const { return grants + releases + renews + refusals; }
};

// Everything acknowledged, shared by the client threads.
struct Ledger {
  std::mutex mutex;
  std::map<std::int64_t, LeaseRecord> leases;
  std::map<std::string, int> in_doubt_acquires;  // per user, this cycle
  std::map<std::string, int> quota;              // small slices per tenant
  int cycle = 0;
  // The live view: leases acknowledged granted and not yet sent for release, by slice, by bound
  // uuid and per tenant. Each is active on the server while it is here.
  std::map<std::string, std::int64_t> held_slices;
  std::map<std::string, std::int64_t> held_uuids;
  std::map<std::string, int> held_per_tenant;
  CycleStats stats;

  void HoldLocked(const LeaseRecord& r) {
    for (const std::string& device : r.devices) {
      auto [it, fresh] = held_slices.emplace(SliceKey(r.node, device), r.id);
      if (!fresh) {
        ADD_FAILURE() << "slice " << it->first << " was acknowledged to lease " << r.id
                      << " while lease " << it->second << " holds it";
      }
    }
    for (const std::string& uuid : r.uuids) {
      auto [it, fresh] = held_uuids.emplace(uuid, r.id);
      if (!fresh) {
        ADD_FAILURE() << "device " << uuid << " was acknowledged to lease " << r.id
                      << " while lease " << it->second << " holds it";
      }
    }
    const int held = ++held_per_tenant[r.tenant];
    if (held > quota[r.tenant]) {
      ADD_FAILURE() << "tenant " << r.tenant << " holds " << held << " acknowledged small leases"
                    << " (lease " << r.id << " the last); its quota is " << quota[r.tenant];
    }
  }

  void UnholdLocked(const LeaseRecord& r) {
    for (const std::string& device : r.devices) {
      if (auto it = held_slices.find(SliceKey(r.node, device));
          it != held_slices.end() && it->second == r.id) {
        held_slices.erase(it);
      }
    }
    for (const std::string& uuid : r.uuids) {
      if (auto it = held_uuids.find(uuid); it != held_uuids.end() && it->second == r.id) {
        held_uuids.erase(it);
      }
    }
    --held_per_tenant[r.tenant];
  }
};

// One client thread: a user's token and the leases it holds.
struct Worker {
  std::string user;
  std::string tenant;
  std::string token;
  std::vector<std::int64_t> held;
  std::mt19937_64 rng;
};

// Each returns false when the thread should stop (no answer, or a failure reported).
bool Acquire(Worker& w, httplib::Client& client, Ledger& ledger, const std::atomic<bool>& killed) {
  const json request = {
      {"class", "small"}, {"purpose", "crash test " + w.user}, {"wait", false}, {"ttl_s", kTtlS}};
  const Reply reply = Call(client, "POST", "/v1/leases", request);
  if (!reply.answered) {
    std::lock_guard<std::mutex> lock(ledger.mutex);
    ++ledger.in_doubt_acquires[w.user];
    ++ledger.stats.in_doubt_acquires;
    if (!killed) ADD_FAILURE() << w.user << ": POST /v1/leases before the kill: " << reply.text;
    return false;
  }
  if (reply.status == 409) {
    std::lock_guard<std::mutex> lock(ledger.mutex);
    ++ledger.stats.refusals;
    EXPECT_EQ(reply.body.value("outcome", ""), "refused") << reply.text;
    return true;
  }
  if (reply.status != 201 || !reply.body.is_object() || !reply.body.contains("lease") ||
      !reply.body["lease"].is_object()) {
    ADD_FAILURE() << w.user << ": POST /v1/leases: " << reply.status << " " << reply.text;
    return false;
  }
  LeaseRecord r = RecordOf(reply.body["lease"]);
  r.user = w.user;
  r.cycle = ledger.cycle;
  EXPECT_EQ(r.tenant, w.tenant) << reply.text;
  EXPECT_EQ(reply.body["lease"].value("state", ""), "active") << reply.text;
  EXPECT_EQ(r.devices.size(), 1u) << reply.text;
  EXPECT_EQ(r.uuids.size(), 1u) << reply.text;
  for (const std::string& uuid : r.uuids) EXPECT_EQ(uuid.rfind("MIG-", 0), 0u) << reply.text;
  std::lock_guard<std::mutex> lock(ledger.mutex);
  if (r.id <= 0 || ledger.leases.contains(r.id)) {
    ADD_FAILURE() << "lease id " << r.id << " acknowledged twice: " << reply.text;
    return false;
  }
  ledger.HoldLocked(r);
  ledger.leases[r.id] = r;
  ++ledger.stats.grants;
  w.held.push_back(r.id);
  return true;
}

bool Renew(Worker& w, httplib::Client& client, Ledger& ledger, const std::atomic<bool>& killed) {
  const std::int64_t id = w.held[w.rng() % w.held.size()];
  const std::int64_t ttl = kTtlS + static_cast<std::int64_t>(w.rng() % 3600);
  const std::int64_t sent_at = EpochNow();
  {
    std::lock_guard<std::mutex> lock(ledger.mutex);
    ledger.leases[id].renew_in_doubt = std::make_pair(sent_at, ttl);
  }
  const std::string path = "/v1/leases/" + std::to_string(id) + "/renew";
  const Reply reply = Call(client, "POST", path, json{{"ttl_s", ttl}});
  if (!reply.answered) {
    std::lock_guard<std::mutex> lock(ledger.mutex);
    ++ledger.stats.in_doubt_renews;
    if (!killed) ADD_FAILURE() << w.user << ": POST " << path << " before the kill: " << reply.text;
    return false;
  }
  if (reply.status != 200 || !reply.body.is_object()) {
    ADD_FAILURE() << w.user << ": POST " << path << ": " << reply.status << " " << reply.text;
    return false;
  }
  const std::int64_t expires = reply.body.value("expires_at", std::int64_t{0});
  EXPECT_GE(expires, sent_at + ttl - 1) << reply.text;
  EXPECT_LE(expires, EpochNow() + ttl + 1) << reply.text;
  std::lock_guard<std::mutex> lock(ledger.mutex);
  LeaseRecord& r = ledger.leases[id];
  r.expires_at = expires;
  r.renew_in_doubt.reset();
  ++ledger.stats.renews;
  return true;
}

bool Release(Worker& w, httplib::Client& client, Ledger& ledger, const std::atomic<bool>& killed) {
  const size_t index = w.rng() % w.held.size();
  const std::int64_t id = w.held[index];
  w.held.erase(w.held.begin() + static_cast<std::ptrdiff_t>(index));
  {
    std::lock_guard<std::mutex> lock(ledger.mutex);
    LeaseRecord& r = ledger.leases[id];
    r.release = ReleaseState::kSent;
    ledger.UnholdLocked(r);
  }
  const std::string path = "/v1/leases/" + std::to_string(id);
  const Reply reply = Call(client, "DELETE", path);
  if (!reply.answered) {
    std::lock_guard<std::mutex> lock(ledger.mutex);
    ++ledger.stats.in_doubt_releases;
    if (!killed) {
      ADD_FAILURE() << w.user << ": DELETE " << path << " before the kill: " << reply.text;
    }
    return false;
  }
  if (reply.status != 200) {
    ADD_FAILURE() << w.user << ": DELETE " << path << ": " << reply.status << " " << reply.text;
    return false;
  }
  EXPECT_EQ(reply.body.value("released", std::int64_t{0}), id) << reply.text;
  std::lock_guard<std::mutex> lock(ledger.mutex);
  ledger.leases[id].release = ReleaseState::kAcked;
  ++ledger.stats.releases;
  return true;
}

// Holds at most `max_held` leases (more when a restart gave back more): acquires, renews, releases.
void RunWorker(Worker& w, int port, size_t max_held, Ledger& ledger,
               const std::atomic<bool>& killed, const std::atomic<bool>& stop) {
  try {
    std::unique_ptr<httplib::Client> client = MakeClient(port, w.token);
    while (!stop) {
      const std::uint64_t roll = w.rng() % 100;
      bool go = true;
      if (w.held.empty() || (w.held.size() < max_held && roll < 40)) {
        go = Acquire(w, *client, ledger, killed);
      } else if (roll % 4 == 0) {
        go = Renew(w, *client, ledger, killed);
      } else {
        go = Release(w, *client, ledger, killed);
      }
      if (!go) break;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << w.user << ": " << e.what();
  }
}

// ---- checks after a restart

struct ActiveView {
  int active = 0;
  int unknown = 0;         // leases of acquires in doubt
  int doubt_released = 0;  // releases in doubt that were done
  int doubt_not_released = 0;
  std::map<std::string, std::int64_t> slices;  // SliceKey -> lease
  std::map<std::string, std::int64_t> uuids;
  std::map<std::string, int> per_tenant;
};

// Compares the restarted service's leases and audit with the ledger; adopts the leases of acquires
// in doubt; rebuilds the ledger's live view and the workers' held leases from what is active.
void CheckAfterRestart(httplib::Client& admin, Ledger& ledger, std::vector<Worker>& workers,
                       int cycle, ActiveView* view) {
  const Reply listed = Call(admin, "GET", "/v1/leases?all=true");
  ASSERT_TRUE(listed.answered && listed.status == 200 && listed.body.is_object())
      << listed.status << " " << listed.text;
  std::map<std::int64_t, json> stored;
  for (const json& lease : listed.body.value("leases", json::array())) {
    const std::int64_t id = lease.value("id", std::int64_t{0});
    EXPECT_FALSE(stored.contains(id)) << "lease " << id << " listed twice";
    stored[id] = lease;
  }
  const std::int64_t now = EpochNow();
  std::lock_guard<std::mutex> lock(ledger.mutex);
  *view = ActiveView{};

  // Everything acknowledged survived. (After a failure the ledger follows the store, so that
  // the next cycles report only new failures.)
  std::vector<std::int64_t> gone;
  for (auto& [id, r] : ledger.leases) {
    auto it = stored.find(id);
    if (it == stored.end()) {
      ADD_FAILURE() << "lease " << id << " (" << r.user << ", cycle " << r.cycle << ", "
                    << (r.acknowledged ? "acknowledged" : "found after a restart")
                    << ") is gone after the restart";
      gone.push_back(id);
      continue;
    }
    const json& s = it->second;
    const std::string state = s.value("state", "");
    const LeaseRecord now_stored = RecordOf(s);
    EXPECT_EQ(now_stored.tenant, r.tenant) << "lease " << id;
    EXPECT_EQ(now_stored.user, r.user) << "lease " << id;
    EXPECT_EQ(now_stored.node, r.node) << "lease " << id;
    EXPECT_EQ(now_stored.devices, r.devices) << "lease " << id;
    if (r.release == ReleaseState::kSent) {
      // A release in doubt: either outcome, from now on known.
      EXPECT_TRUE(state == "active" || state == "released") << "lease " << id << ": " << s.dump();
      r.release = state == "released" ? ReleaseState::kAcked : ReleaseState::kHeld;
      ++(state == "released" ? view->doubt_released : view->doubt_not_released);
    } else if (r.release == ReleaseState::kAcked) {
      EXPECT_EQ(state, "released") << "lease " << id << " was released (acknowledged) but is "
                                   << state << " after the restart: " << s.dump();
      if (state != "active") continue;
      r.release = ReleaseState::kHeld;
    } else {
      EXPECT_EQ(state, "active") << "lease " << id << " was granted and never released but is "
                                 << state << " after the restart: " << s.dump();
      if (state != "active") r.release = ReleaseState::kAcked;
    }
    if (state != "active") continue;
    EXPECT_EQ(now_stored.gpu_uuids, r.gpu_uuids) << "lease " << id;
    const std::int64_t expires = now_stored.expires_at;
    if (r.renew_in_doubt.has_value()) {
      const auto [sent_at, ttl] = *r.renew_in_doubt;
      EXPECT_TRUE(expires == r.expires_at ||
                  (expires >= sent_at + ttl - 1 && expires <= now + ttl + 1))
          << "lease " << id << " expires at " << expires << "; acknowledged " << r.expires_at
          << ", a renewal of " << ttl << " s in doubt since " << sent_at;
      r.renew_in_doubt.reset();
    } else {
      EXPECT_EQ(expires, r.expires_at)
          << "lease " << id << ": the expiry of its last acknowledged grant or renewal is lost";
    }
    r.expires_at = expires;
    r.uuids = now_stored.uuids;
  }
  for (std::int64_t id : gone) ledger.leases.erase(id);

  // What nobody was told of: only from acquires in doubt, and active (nobody released it).
  std::map<std::string, int> unknown_per_user;
  for (const auto& [id, s] : stored) {
    if (ledger.leases.contains(id)) continue;
    LeaseRecord r = RecordOf(s);
    EXPECT_EQ(s.value("state", ""), "active")
        << "lease " << id << " nobody was told of is " << s.value("state", "") << ": " << s.dump();
    ++unknown_per_user[r.user];
    ++view->unknown;
    r.acknowledged = false;
    r.cycle = cycle;
    r.release = s.value("state", "") == "active" ? ReleaseState::kHeld : ReleaseState::kAcked;
    ledger.leases[id] = r;
  }
  for (const auto& [user, count] : unknown_per_user) {
    EXPECT_LE(count, ledger.in_doubt_acquires[user])
        << user << " holds " << count << " leases it was never told of, with "
        << ledger.in_doubt_acquires[user] << " acquires in doubt";
  }

  // The active leases: no slice or uuid twice, within the quotas.
  for (const auto& [id, s] : stored) {
    const std::string state = s.value("state", "");
    EXPECT_TRUE(state == "active" || state == "released")
        << "lease " << id << " is " << state << " (no lease should expire, be reclaimed or lost)";
    if (state != "active") continue;
    const LeaseRecord r = RecordOf(s);
    ++view->active;
    ++view->per_tenant[r.tenant];
    EXPECT_EQ(s.value("class", ""), "small") << s.dump();
    EXPECT_EQ(r.devices.size(), 1u) << s.dump();
    EXPECT_EQ(r.uuids.size(), r.devices.size()) << s.dump();
    for (const std::string& device : r.devices) {
      auto [it, fresh] = view->slices.emplace(SliceKey(r.node, device), id);
      EXPECT_TRUE(fresh) << "slice " << it->first << " is held by active leases " << it->second
                         << " and " << id;
    }
    for (const std::string& uuid : r.uuids) {
      EXPECT_EQ(uuid.rfind("MIG-", 0), 0u) << s.dump();
      auto [it, fresh] = view->uuids.emplace(uuid, id);
      EXPECT_TRUE(fresh) << "device " << uuid << " is bound to active leases " << it->second
                         << " and " << id;
    }
  }
  EXPECT_LE(view->active, kSmallSlices);
  for (const auto& [tenant, count] : view->per_tenant) {
    EXPECT_LE(count, ledger.quota[tenant])
        << "tenant " << tenant << " holds " << count << " active small leases";
  }

  // The audit: one grant per lease, one release per released lease.
  const Reply audit = Call(admin, "GET", "/v1/audit?limit=" + std::to_string(kAuditLimit));
  ASSERT_TRUE(audit.answered && audit.status == 200 && audit.body.is_object())
      << audit.status << " " << Tail(audit.text);
  const json events = audit.body.value("events", json::array());
  ASSERT_LT(events.size(), static_cast<size_t>(kAuditLimit)) << "the audit is longer than read";
  std::map<std::string, int> grants;
  std::map<std::string, int> releases;
  for (const json& e : events) {
    const std::string action = e.value("action", "");
    if (action == "grant") ++grants[e.value("subject", "")];
    if (action == "release") ++releases[e.value("subject", "")];
  }
  for (const auto& [id, s] : stored) {
    const std::string subject = "lease " + std::to_string(id);
    EXPECT_EQ(grants[subject], 1) << "grant events for " << subject;
    EXPECT_EQ(releases[subject], s.value("state", "") == "released" ? 1 : 0)
        << "release events for " << subject << " (" << s.value("state", "") << ")";
  }
  for (const auto& [subject, count] : grants) {
    const std::int64_t id = std::stoll(subject.substr(subject.find(' ') + 1));
    EXPECT_TRUE(stored.contains(id)) << "a grant event for " << subject << ", a lease not stored";
  }

  // The live view and the workers' leases, from what is active now.
  ledger.held_slices.clear();
  ledger.held_uuids.clear();
  ledger.held_per_tenant.clear();
  for (Worker& w : workers) w.held.clear();
  std::map<std::string, size_t> next_worker;  // per user, round robin over its threads
  for (const auto& [id, r] : ledger.leases) {
    if (r.release != ReleaseState::kHeld) continue;
    ledger.HoldLocked(r);
    std::vector<Worker*> mine;
    for (Worker& w : workers) {
      if (w.user == r.user) mine.push_back(&w);
    }
    if (mine.empty()) {
      ADD_FAILURE() << "lease " << id << " of " << r.user << " active, no client thread has it";
      continue;
    }
    mine[next_worker[r.user]++ % mine.size()]->held.push_back(id);
  }
}

// Acquires small as `user` until refused; the grants (acknowledged) and the refusal's reason.
void AcquireUntilRefused(int port, const std::string& token, const std::string& user,
                         std::vector<LeaseRecord>* granted, std::string* refusal) {
  std::unique_ptr<httplib::Client> client = MakeClient(port, token);
  for (int i = 0; i <= kSmallSlices; ++i) {
    const Reply reply = Call(
        *client, "POST", "/v1/leases",
        json{{"class", "small"}, {"purpose", "capacity probe"}, {"wait", false}, {"ttl_s", kTtlS}});
    ASSERT_TRUE(reply.answered) << user << ": " << reply.text;
    if (reply.status == 409) {
      *refusal = reply.body.value("error", "");
      return;
    }
    ASSERT_EQ(reply.status, 201) << user << ": " << reply.text;
    LeaseRecord r = RecordOf(reply.body["lease"]);
    r.user = user;
    granted->push_back(r);
  }
  ADD_FAILURE() << user << " was granted more than " << kSmallSlices << " small slices";
}

// The restarted service hands out exactly the free capacity, within the quotas, never a slice or
// uuid an active lease holds; the probe's leases are released again (acknowledged, in the ledger).
void ProbeCapacity(int port, Ledger& ledger, const Worker& probe_a, const Worker& probe_b,
                   int cycle, ActiveView view, int* got_a, int* got_b) {
  const int free = kSmallSlices - view.active;
  const int quota_left_a = kQuotaA - view.per_tenant[probe_a.tenant];
  std::vector<LeaseRecord> granted_a;
  std::vector<LeaseRecord> granted_b;
  std::string refusal_a;
  std::string refusal_b;
  AcquireUntilRefused(port, probe_a.token, probe_a.user, &granted_a, &refusal_a);
  AcquireUntilRefused(port, probe_b.token, probe_b.user, &granted_b, &refusal_b);
  *got_a = static_cast<int>(granted_a.size());
  *got_b = static_cast<int>(granted_b.size());
  const int expected_a = std::min(quota_left_a, free);
  EXPECT_EQ(*got_a, expected_a) << "free " << free << ", tenant " << probe_a.tenant << " may take "
                                << quota_left_a << "; refused: " << refusal_a;
  if (quota_left_a <= free) {  // the quota is checked before the capacity
    EXPECT_NE(refusal_a.find("over quota"), std::string::npos) << refusal_a;
  } else {
    EXPECT_EQ(refusal_a.find("over quota"), std::string::npos) << refusal_a;
  }
  EXPECT_EQ(*got_b, free - *got_a) << "free " << free << "; refused: " << refusal_b;
  EXPECT_EQ(refusal_b.find("over quota"), std::string::npos) << refusal_b;

  std::lock_guard<std::mutex> lock(ledger.mutex);
  for (std::vector<LeaseRecord>* granted : {&granted_a, &granted_b}) {
    for (LeaseRecord& r : *granted) {
      for (const std::string& device : r.devices) {
        auto [it, fresh] = view.slices.emplace(SliceKey(r.node, device), r.id);
        EXPECT_TRUE(fresh) << "the probe got slice " << it->first << " (lease " << r.id
                           << ") held by lease " << it->second;
      }
      for (const std::string& uuid : r.uuids) {
        auto [it, fresh] = view.uuids.emplace(uuid, r.id);
        EXPECT_TRUE(fresh) << "the probe got device " << uuid << " (lease " << r.id
                           << ") bound to lease " << it->second;
      }
      EXPECT_FALSE(ledger.leases.contains(r.id)) << "lease id " << r.id << " handed out twice";
      r.cycle = cycle;
      ledger.leases[r.id] = r;
    }
  }
  std::unique_ptr<httplib::Client> client_a = MakeClient(port, probe_a.token);
  std::unique_ptr<httplib::Client> client_b = MakeClient(port, probe_b.token);
  for (std::vector<LeaseRecord>* granted : {&granted_a, &granted_b}) {
    for (const LeaseRecord& r : *granted) {
      httplib::Client& client = granted == &granted_a ? *client_a : *client_b;
      const Reply reply = Call(client, "DELETE", "/v1/leases/" + std::to_string(r.id));
      EXPECT_TRUE(reply.answered && reply.status == 200) << reply.status << " " << reply.text;
      if (reply.answered && reply.status == 200) {
        ledger.leases[r.id].release = ReleaseState::kAcked;
      } else {
        ledger.leases[r.id].release = ReleaseState::kSent;
      }
    }
  }
}

// Creates a tenant user; its token, or "" (a failure reported).
std::string CreateUser(httplib::Client& admin, const std::string& name, const std::string& tenant) {
  const Reply reply = Call(admin, "POST", "/v1/users",
                           json{{"name", name}, {"tenant", tenant}, {"role", "tenant"}});
  EXPECT_TRUE(reply.answered && reply.status == 201 && reply.body.is_object())
      << reply.status << " " << reply.text;
  return reply.body.is_object() ? reply.body.value("token", "") : "";
}

std::vector<std::string> ServeArgs(const std::string& db, int port) {
  return {"serve",       "--db",        db,       "--listen", "127.0.0.1:" + std::to_string(port),
          "--sim-fleet", "2xA100-80GB", "--tick", "1",        "--insecure"};
}

// The whole test on one store: `db` is the --db value (fresh), `store_kind` what /v1/health says.
void CrashCycles(const std::string& dir, const std::string& db, const std::string& store_kind) {
  IgnoreSigpipe no_sigpipe;
  std::uint64_t seed = std::random_device{}();
  if (const char* fixed = std::getenv("GPUSLICE_CRASH_SEED"); fixed != nullptr && *fixed != 0) {
    seed = std::stoull(fixed);
  }
  SCOPED_TRACE("GPUSLICE_CRASH_SEED=" + std::to_string(seed));
  std::cout << "[ crash    ] " << store_kind << ": GPUSLICE_CRASH_SEED=" << seed << std::endl;
  std::mt19937_64 rng(seed);
  const auto test_start = std::chrono::steady_clock::now();

  GpusliceProcess server;
  int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  server.Start(ServeArgs(db, port), dir + "/serve-0.log", dir);
  json health;
  ASSERT_TRUE(server.WaitHealthy(port, &health, std::chrono::seconds(60))) << Tail(server.Output());
  EXPECT_EQ(health.value("store", ""), store_kind) << health.dump();
  EXPECT_EQ(health.value("gpus", 0), 2) << health.dump();
  const std::string admin_token = FirstLine(ReadFile(dir + "/gpuslice-admin.token"));
  ASSERT_EQ(admin_token.rfind("gs_", 0), 0u) << "the first start writes ./gpuslice-admin.token";

  Ledger ledger;
  ledger.quota = {{"team-a", kQuotaA}, {"team-b", kQuotaB}};
  std::unique_ptr<httplib::Client> admin = MakeClient(port, admin_token);
  for (const auto& [tenant, quota] : ledger.quota) {
    const Reply reply =
        Call(*admin, "PUT", "/v1/tenants/" + tenant, json{{"max_slices", {{"small", quota}}}});
    ASSERT_TRUE(reply.answered && reply.status == 200) << reply.status << " " << reply.text;
  }
  std::vector<Worker> workers;
  for (const std::string tenant : {"team-a", "team-b"}) {
    for (int u = 0; u < kUsersPerTenant; ++u) {
      const std::string user = tenant.substr(tenant.size() - 1) + std::to_string(u);
      const std::string token = CreateUser(*admin, user, tenant);
      ASSERT_FALSE(token.empty());
      for (int t = 0; t < kThreadsPerUser; ++t) {
        workers.push_back(Worker{user, tenant, token, {}, std::mt19937_64(rng())});
      }
    }
  }
  Worker probe_a{"probe-a", "team-a", CreateUser(*admin, "probe-a", "team-a"), {}, {}};
  Worker probe_b{"probe-b", "team-b", CreateUser(*admin, "probe-b", "team-b"), {}, {}};
  ASSERT_FALSE(probe_a.token.empty() || probe_b.token.empty());

  for (int cycle = 1; cycle <= kCycles; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    {
      std::lock_guard<std::mutex> lock(ledger.mutex);
      ledger.stats = CycleStats{};
      ledger.in_doubt_acquires.clear();
      ledger.cycle = cycle;
    }
    // Cycle 1: at most 1 lease per thread (13 of 14 slices at most: team-a's quota of 5 and
    // team-b's 8 threads); then 2 and 3, more than the fleet holds.
    const size_t max_held = static_cast<size_t>(cycle);
    std::atomic<bool> killed{false};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (Worker& w : workers) {
      threads.emplace_back([&w, port, max_held, &ledger, &killed, &stop] {
        RunWorker(w, port, max_held, ledger, killed, stop);
      });
    }
    const auto load = std::chrono::milliseconds(600 + rng() % 1000);
    std::this_thread::sleep_for(load);
    killed = true;
    server.Kill();
    stop = true;
    for (std::thread& t : threads) t.join();
    CycleStats stats;
    {
      std::lock_guard<std::mutex> lock(ledger.mutex);
      stats = ledger.stats;
    }
    EXPECT_GT(stats.Acknowledged(), 0) << "no call was answered under load";

    const auto restart = std::chrono::steady_clock::now();
    port = FreeLoopbackPort();
    ASSERT_GT(port, 0);
    server.Start(ServeArgs(db, port), dir + "/serve-" + std::to_string(cycle) + ".log", dir);
    ASSERT_TRUE(server.WaitHealthy(port, &health, std::chrono::seconds(60)))
        << Tail(server.Output());
    const auto restart_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - restart)
                                .count();
    admin = MakeClient(port, admin_token);
    ActiveView view;
    CheckAfterRestart(*admin, ledger, workers, cycle, &view);
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "serve log:\n" << Tail(server.Output());
      return;
    }
    int probe_got_a = 0;
    int probe_got_b = 0;
    ProbeCapacity(port, ledger, probe_a, probe_b, cycle, view, &probe_got_a, &probe_got_b);
    if (::testing::Test::HasFatalFailure()) return;
    const Reply active = Call(*admin, "GET", "/v1/leases");
    ASSERT_TRUE(active.answered && active.status == 200) << active.text;
    EXPECT_EQ(active.body.value("leases", json::array()).size(), static_cast<size_t>(view.active))
        << "after the probe released its leases";

    std::cout << "[ crash    ] " << store_kind << " cycle " << cycle << ": killed after "
              << load.count() << " ms under load; acknowledged " << stats.grants << " grants, "
              << stats.releases << " releases, " << stats.renews << " renewals, " << stats.refusals
              << " refusals; in doubt " << stats.in_doubt_acquires << " acquires, "
              << stats.in_doubt_releases << " releases, " << stats.in_doubt_renews
              << " renewals; restarted in " << restart_ms << " ms with " << view.active
              << " active (" << view.per_tenant["team-a"] << " team-a, "
              << view.per_tenant["team-b"] << " team-b), " << view.unknown
              << " of acquires in doubt; releases in doubt: " << view.doubt_released << " done, "
              << view.doubt_not_released << " not; probe got " << probe_got_a << "+" << probe_got_b
              << std::endl;
  }
  EXPECT_EQ(server.Terminate(std::chrono::seconds(10)), 0) << Tail(server.Output());
  std::cout << "[ crash    ] " << store_kind << ": " << ledger.leases.size() << " leases in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - test_start)
                   .count()
            << " ms" << std::endl;
}

// A PostgreSQL database for one test: a fresh database on the server of GPUSLICE_PG_URL when set,
// else a throwaway server on loopback (scripts/pg_test_server.sh). url() is empty when neither
// works (why() says why).
class PostgresForTest {
 public:
  explicit PostgresForTest(const std::string& dir) {
    if (const char* given = std::getenv("GPUSLICE_PG_URL"); given != nullptr && *given != '\0') {
      admin_url_ = given;
      database_ = "gpuslice_crash_" + std::to_string(getpid());
      const gpuslice::cli::testing::CommandResult created =
          Shell("psql " + Quoted(admin_url_) + " -v ON_ERROR_STOP=1 -qAtc " +
                Quoted("CREATE DATABASE " + database_) + " 2>&1");
      if (created.exit_code != 0) {
        why_ = "cannot create a database on GPUSLICE_PG_URL: " + created.output;
        database_.clear();
        return;
      }
      // The same URL naming the new database.
      const size_t scheme = admin_url_.find("://");
      const size_t slash = admin_url_.find('/', scheme == std::string::npos ? 0 : scheme + 3);
      const size_t query = admin_url_.find('?');
      url_ = (slash == std::string::npos ? admin_url_.substr(0, query) + "/"
                                         : admin_url_.substr(0, slash + 1)) +
             database_ + (query == std::string::npos ? "" : admin_url_.substr(query));
      return;
    }
    server_dir_ = dir + "/pg";
    const int port = FreeLoopbackPort();
    const gpuslice::cli::testing::CommandResult started =
        Shell(std::string(GPUSLICE_SOURCE_DIR) + "/scripts/pg_test_server.sh start " +
              Quoted(server_dir_) + " " + std::to_string(port) + " 2>&1");
    if (started.exit_code != 0) {
      why_ = "no PostgreSQL server could be started: " + started.output;
      return;
    }
    started_ = true;
    std::string out = started.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    url_ = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  }
  ~PostgresForTest() {
    if (!database_.empty()) {
      Shell("psql " + Quoted(admin_url_) + " -qAtc " +
            Quoted("DROP DATABASE IF EXISTS " + database_ + " WITH (FORCE)") + " >/dev/null 2>&1");
    }
    if (started_) {
      Shell(std::string(GPUSLICE_SOURCE_DIR) + "/scripts/pg_test_server.sh stop " +
            Quoted(server_dir_) + " >/dev/null 2>&1");
    }
  }
  PostgresForTest(const PostgresForTest&) = delete;
  PostgresForTest& operator=(const PostgresForTest&) = delete;
  const std::string& url() const { return url_; }
  const std::string& why() const { return why_; }

 private:
  std::string admin_url_;
  std::string database_;
  std::string server_dir_;
  bool started_ = false;
  std::string url_;
  std::string why_;
};

TEST(ServeCrashTest, SqliteKeepsEverythingAcknowledgedAcrossKillNine) {
  const TempDir dir("sqlite");
  CrashCycles(dir.path(), dir.path() + "/g.db", "sqlite");
}

TEST(ServeCrashTest, PostgresKeepsEverythingAcknowledgedAcrossKillNine) {
  const TempDir dir("postgres");
  const PostgresForTest postgres(dir.path());
  if (postgres.url().empty()) GPUSLICE_SKIP_OR_FAIL_IN_CI(postgres.why());
  CrashCycles(dir.path(), postgres.url(), "postgres");
}

}  // namespace
