// The HTTP client side of the allocation service's commands (command_client.cc, command_run.cc):
// where the server is, the token, one call to the API, and how a lease prints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "gpuslice/api/client.h"
#include "gpuslice/util/clock.h"
#include "nlohmann/json.hpp"

namespace gpuslice::cli {

struct ClientOptions {
  std::string server;  // default $GPUSLICE_SERVER or http://127.0.0.1:8470
  std::string token;   // default $GPUSLICE_TOKEN or ./gpuslice-admin.token
  bool json_output = false;
  int timeout_s = 10;  // connecting takes at most 5 of them
  // https:// servers: the CA to trust (default $GPUSLICE_CA, else ./gpuslice-tls.crt when it
  // exists, else the system's trust store), and a client certificate for mutual TLS (agents).
  std::string ca;
  std::string client_cert;
  std::string client_key;
};

// The server URL and the CA file the options resolve to (see ClientOptions).
std::string ServerUrl(const ClientOptions& options);
std::string CaFile(const ClientOptions& options);

// The API client's settings the options resolve to: the server, the token (--token, else
// $GPUSLICE_TOKEN, else ./gpuslice-admin.token; a set but empty $GPUSLICE_TOKEN is
// InvalidArgument), the CA and the client certificate.
absl::StatusOr<api::ClientSettings> ClientSettings(const ClientOptions& options);

struct Reply {
  int status = 0;
  nlohmann::json body;
};

// Calls the API. Returns 0 with the reply for a 2xx (and for a 409 when `conflict_is_answer`: an
// acquire's refusal, which the caller explains); otherwise prints the error in words
// (RefusalText) and returns the exit code (kExitBadInput unreachable, kExitNotAllowed for 401
// and 403, kExitCheckFailed else).
int Call(const ClientOptions& options, const std::string& method, const std::string& path,
         const nlohmann::json* body, Reply* reply, bool conflict_is_answer = false);

// An error answer in words, never a bare HTTP code: "not signed in: MESSAGE (check --token or
// $GPUSLICE_TOKEN)" for 401, "not allowed: MESSAGE" for 403, "not found", "bad request", "too
// many attempts" (429), "the server failed" (5xx), "refused" for anything else. MESSAGE is shown
// through util::ForTerminal: a server's control characters come out as \xNN.
std::string RefusalText(int http_status, const std::string& message);

// --server, --token, --json and --timeout.
void AddConnection(CLI::App* cmd, ClientOptions& options);

// Checks an id argument as typed: a positive integer that fits in 64 bits (CLI11 would clamp
// 99999999999999999999 to the largest one).
CLI::Validator PositiveId();

// One line per lease: id, state, class, node, devices, GiB, tenant, end, purpose.
void PrintLease(const nlohmann::json& lease);

// The `admin` subcommands for users and tokens: user, users, revoke, rotate, recover
// (command_users.cc).
void AddUserCommands(CLI::App* admin, std::function<int()>* action);

// Seconds since the epoch, now (gpuslice/util/clock.h).
using util::EpochNow;

}  // namespace gpuslice::cli
