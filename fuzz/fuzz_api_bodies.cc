// Every body and path parameter of the allocation service's HTTP/JSON API (gpuslice/api/server.h,
// docs/api/openapi.yaml) on arbitrary bytes, answered in-process by ApiServer::Handle as the
// transport hands requests over. Each input gets a fresh alloc::Service on an SQLite store (on
// tmpfs, a copy of one made at the start) over a small simulated inventory (a MIG node, a shared
// node, a whole-GPU node), with the admin root, tenant team-a and its user ann, and the agent
// agent-r1 of machine r1. The input is up to eight requests split at NUL bytes; in each, the first
// byte chooses the identity (none, ann, agent-r1 or root; a bit spoils the token) and how far the
// service's clock moves first, the second the operation, the text up to the first newline the path
// parameter (or query) and the rest the body. Beside the sanitizers: no answer is a 5xx (a
// handler's exception is answered 500); every answer but /metrics' text is JSON, a 4xx one an
// object with a non-empty "error" string; and the service still answers its health check after the
// requests. FUZZ_API_VERBOSE=1 prints each request and its answer.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/http_message.h"
#include "fuzz_util.h"
#include "gpuslice/alloc/service.h"
#include "gpuslice/api/server.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/place/cluster.h"
#include "gpuslice/store/database.h"
#include "nlohmann/json.hpp"

namespace {

using gpuslice::fuzz::Check;
using gpuslice::fuzz::Node;

using gpuslice::api::http::Request;
using gpuslice::api::http::Response;
using nlohmann::json;

struct Operation {
  const char* method;
  const char* path;  // "{}": the path parameter; without it the parameter is the query
};

// docs/api/openapi.yaml's operations, the user endpoints, and two that answer 405.
constexpr Operation kOperations[] = {
    {"GET", "/v1/health"},
    {"GET", "/v1/inventory"},
    {"GET", "/v1/classes"},
    {"PUT", "/v1/classes/{}"},
    {"DELETE", "/v1/classes/{}"},
    {"GET", "/v1/tenants"},
    {"PUT", "/v1/tenants/{}"},
    {"DELETE", "/v1/tenants/{}"},
    {"POST", "/v1/users"},
    {"GET", "/v1/users"},
    {"DELETE", "/v1/users/{}"},
    {"POST", "/v1/users/{}/rotate"},
    {"POST", "/v1/leases"},
    {"GET", "/v1/leases"},
    {"GET", "/v1/leases/{}"},
    {"DELETE", "/v1/leases/{}"},
    {"POST", "/v1/leases/{}/renew"},
    {"GET", "/v1/queue"},
    {"DELETE", "/v1/queue/{}"},
    {"GET", "/v1/audit"},
    {"GET", "/v1/nodes"},
    {"PUT", "/v1/nodes/{}"},
    {"GET", "/v1/nodes/{}/assignments"},
    {"POST", "/v1/nodes/{}/bound"},
    {"POST", "/v1/nodes/{}/usage"},
    {"GET", "/v1/usage"},
    {"GET", "/v1/nodes/{}/layout"},
    {"PUT", "/v1/nodes/{}/layout"},
    {"DELETE", "/v1/nodes/{}/layout"},
    {"POST", "/v1/nodes/{}/layout/status"},
    {"POST", "/v1/nodes/{}/alerts"},
    {"GET", "/v1/alerts"},
    {"GET", "/metrics"},
    {"POST", "/v1/health"},
    {"PUT", "/v1/leases"},
};
constexpr std::size_t kOperationCount = sizeof kOperations / sizeof kOperations[0];
constexpr std::int64_t kStart = 1'700'000'000;  // the services' clock, in epoch seconds

// A fuzzed failure: what was asked and answered, then abort.
[[noreturn]] void Fail(const char* why, const std::string& method, const std::string& target,
                       const Response& res) {
  std::fprintf(stderr, "fuzz_api_bodies: %s: %s %s -> %d %s\n", why, method.c_str(), target.c_str(),
               res.status, res.body.substr(0, 2000).c_str());
  std::abort();
}

// Bytes a request target cannot hold, percent-encoded; the rest as given.
std::string Encode(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '#') {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

// The users and their tokens, made once in a store file that each input's service starts from
// (a copy: making the schema and the users anew for every input would take most of the time).
struct Template {
  std::string dir;
  std::string tokens[4];  // none, ann, agent-r1, root
};

gpuslice::place::Cluster Inventory() {
  using gpuslice::place::GpuMode;
  absl::StatusOr<gpuslice::place::Cluster> inventory =
      gpuslice::place::Cluster::Create({Node("n1", GpuMode::kMig, 2, "A100-80GB", 24576),
                                        Node("s1", GpuMode::kShared, 2, "L40S", 24576),
                                        Node("w1", GpuMode::kWhole, 1, "A10", 24576)});
  if (!inventory.ok()) std::abort();
  return *std::move(inventory);
}

// Aborts if the fixed setup fails (not the input's doing).
const Template& MakeTemplate() {
  static const Template* made = [] {
    auto* t = new Template;
    t->dir = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    t->dir += "/gpuslice_fuzz_api_XXXXXX";
    if (mkdtemp(t->dir.data()) == nullptr) std::abort();
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(MakeTemplate().dir, ignored);
    });
    absl::StatusOr<std::unique_ptr<gpuslice::store::Database>> db =
        gpuslice::store::OpenSqlite(t->dir + "/template.db");
    if (!db.ok()) std::abort();
    gpuslice::alloc::ServiceOptions options;
    options.clock = [] { return kStart; };
    absl::StatusOr<std::unique_ptr<gpuslice::alloc::Service>> service =
        gpuslice::alloc::Service::Open(*std::move(db), Inventory(), std::move(options));
    if (!service.ok()) std::abort();
    absl::StatusOr<std::optional<std::string>> root = (*service)->BootstrapAdmin("root");
    if (!root.ok() || !root->has_value()) std::abort();
    t->tokens[3] = **root;
    absl::StatusOr<gpuslice::alloc::Caller> admin = (*service)->Authenticate(t->tokens[3]);
    if (!admin.ok()) std::abort();
    gpuslice::alloc::TenantSpec team;
    team.name = "team-a";
    if (!(*service)->PutTenant(*admin, team).ok()) std::abort();
    absl::StatusOr<std::string> ann =
        (*service)->CreateUser(*admin, "ann", "team-a", gpuslice::alloc::Role::kTenant);
    absl::StatusOr<std::string> agent =
        (*service)->CreateUser(*admin, "agent-r1", "", gpuslice::alloc::Role::kAgent, "r1");
    if (!ann.ok() || !agent.ok()) std::abort();
    t->tokens[1] = *ann;
    t->tokens[2] = *agent;
    return t;  // the service closes its store here: the file is whole, without a WAL
  }();
  return *made;
}

class World {
 public:
  World() : template_(MakeTemplate()) {
    const std::string path = template_.dir + "/input.db";
    for (const char* suffix : {"", "-wal", "-shm"}) unlink((path + suffix).c_str());
    std::filesystem::copy_file(template_.dir + "/template.db", path);
    absl::StatusOr<std::unique_ptr<gpuslice::store::Database>> db =
        gpuslice::store::OpenSqlite(path);
    if (!db.ok()) std::abort();
    gpuslice::alloc::ServiceOptions options;
    options.clock = [this] { return now_; };
    absl::StatusOr<std::unique_ptr<gpuslice::alloc::Service>> service =
        gpuslice::alloc::Service::Open(*std::move(db), Inventory(), std::move(options));
    if (!service.ok()) std::abort();
    service_ = *std::move(service);
    gpuslice::api::ServerOptions server_options;
    server_options.metrics = []() -> absl::StatusOr<std::vector<gpuslice::metrics::Family>> {
      gpuslice::metrics::Family up;
      up.name = "gpuslice_up";
      up.help = "1";
      up.samples.push_back({{{"Hostname", "r1"}}, 1});
      return std::vector<gpuslice::metrics::Family>{up};
    };
    server_ = std::make_unique<gpuslice::api::ApiServer>(*service_, server_options);
  }

  // Answers one request; checks the answer.
  void Ask(std::string_view record) {
    if (record.size() < 2) return;
    const auto who = static_cast<std::uint8_t>(record[0]);
    now_ += (who >> 3) * 37;
    const Operation& op = kOperations[static_cast<std::uint8_t>(record[1]) % kOperationCount];
    record.remove_prefix(2);
    const std::size_t newline = record.find('\n');
    const std::string_view parameter = record.substr(0, newline);
    const std::string_view body =
        newline == std::string_view::npos ? std::string_view() : record.substr(newline + 1);
    std::string target = op.path;
    if (const std::size_t at = target.find("{}"); at != std::string::npos) {
      target.replace(at, 2, Encode(parameter));
    } else if (!parameter.empty()) {
      target += "?" + Encode(parameter);
    }
    std::string head = std::string(op.method) + " " + target + " HTTP/1.1\r\nHost: fuzz\r\n";
    if ((who & 3) != 0) {
      head += "Authorization: Bearer " + template_.tokens[who & 3] + ((who & 4) != 0 ? "x" : "") +
              "\r\n";
    }
    head += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    gpuslice::api::http::HeadParse parsed = gpuslice::api::http::ParseRequestHead(head);
    if (parsed.state != gpuslice::api::http::HeadParse::State::kComplete)
      return;  // the transport's 400
    Request request = std::move(parsed.head.request);
    request.body = std::string(body);
    request.remote_ip = "127.0.0.1";
    Response response;
    server_->Handle(request, response);
    if (std::getenv("FUZZ_API_VERBOSE") != nullptr) {  // to follow an input by hand
      std::fprintf(stderr, "%s %s (as %d) -> %d %s\n", op.method, target.c_str(), who & 7,
                   response.status, response.body.substr(0, 300).c_str());
    }
    Check(op.method, target, response);
  }

  // GET /v1/health still answers.
  void Healthy() {
    Request request;
    request.method = "GET";
    request.target = request.path = "/v1/health";
    request.remote_ip = "127.0.0.1";
    Response response;
    server_->Handle(request, response);
    if (response.status != 200) Fail("no health", "GET", "/v1/health", response);
    Check("GET", "/v1/health", response);
  }

 private:
  static void Check(const std::string& method, const std::string& target, const Response& res) {
    if (res.status < 200 || res.status >= 500) Fail("status", method, target, res);
    if (target.rfind("/metrics", 0) == 0 && res.status == 200) {
      if (res.content_type.rfind("text/plain", 0) != 0) Fail("metrics type", method, target, res);
      return;
    }
    if (res.status == 204) {
      if (!res.body.empty()) Fail("a 204 with a body", method, target, res);
      return;
    }
    if (res.content_type != "application/json") Fail("content type", method, target, res);
    const json body = json::parse(res.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) Fail("not JSON", method, target, res);
    if (res.status >= 400) {
      if (!body.is_object() || !body.contains("error") || !body["error"].is_string() ||
          body["error"].get<std::string>().empty()) {
        Fail("a 4xx without an error", method, target, res);
      }
    }
  }

  const Template& template_;
  std::int64_t now_ = kStart;
  std::unique_ptr<gpuslice::alloc::Service> service_;
  std::unique_ptr<gpuslice::api::ApiServer> server_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  World world;
  int asked = 0;
  for (std::size_t at = 0; at <= input.size() && asked < 8; ++asked) {
    std::size_t end = input.find('\0', at);
    if (end == std::string_view::npos) end = input.size();
    world.Ask(input.substr(at, end - at));
    at = end + 1;
  }
  world.Healthy();
  return 0;
}
