// Who sends an API request, and how often a source may get it wrong.
//
// AuthFailureLimiter (pure, virtual time): counts failed authentications per source. A source is
// an IPv4 address, or an IPv6 address's /64 (one host usually owns a whole /64). Once a source
// has failed `max_failures` times within `window_s`, it is locked out for `lockout_s`: its
// requests are answered 429 with Retry-After and their tokens are not looked at, so guessing
// costs the guesser, and the audit gets one `auth.limit` line instead of a flood. At most
// `max_sources` sources are tracked; past that, sources whose window has ended are dropped, and
// if none has, the new ones share one entry (a flood from many addresses is limited together).
//
// RequestAuthenticator: the bearer token's caller (alloc::Service::Authenticate), with each
// failure counted and audited (`auth.fail`, durably, with the source and the reason, never the
// token) and, for agents under mutual TLS, the client certificate checked against the agent's
// machine. A request without an Authorization header is refused but not counted.
//
// Thread-safety: both classes may be used from many threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "api/http_message.h"
#include "gpuslice/alloc/service.h"

namespace gpuslice::api {

struct AuthLimits {
  int max_failures = 10;
  std::int64_t window_s = 60;
  std::int64_t lockout_s = 60;
  std::size_t max_sources = 65536;
};

class AuthFailureLimiter {
 public:
  explicit AuthFailureLimiter(AuthLimits limits = {}) : limits_(limits) {}

  // The source a peer address counts as: the address, an IPv6 one's /64 ("2001:db8:1:2::/64"),
  // an IPv4-mapped IPv6 one's IPv4 address.
  static std::string SourceOf(const std::string& address);
  // Seconds `source` must still wait at `now` (0: it may try).
  std::int64_t RetryAfter(const std::string& source, std::int64_t now);
  // Counts one failure of `source` at `now`; true when it puts the source under lockout.
  bool Failed(const std::string& source, std::int64_t now);
  std::size_t tracked() const;

 private:
  struct Entry {
    std::int64_t window_start = 0;
    int failures = 0;
    std::int64_t locked_until = 0;
  };
  // The entry for `source` (mutex_ held), making room as the contract says.
  Entry& EntryFor(const std::string& source, std::int64_t now);

  const AuthLimits limits_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
};

class RequestAuthenticator {
 public:
  struct Options {
    bool agents_need_client_certificates = false;
    AuthLimits limits;
    std::function<std::int64_t()> clock_s;  // monotonic seconds; default: steady_clock
  };
  RequestAuthenticator(alloc::Service& service, Options options);

  // The caller; or the refusal: Unauthenticated (no or bad token), ResourceExhausted with
  // `*retry_after_s` > 0 (the source is locked out), PermissionDenied (an agent without its
  // client certificate).
  absl::StatusOr<alloc::Caller> Identify(const http::Request& request, std::int64_t* retry_after_s);

 private:
  alloc::Service& service_;
  Options options_;
  AuthFailureLimiter limiter_;
};

}  // namespace gpuslice::api
