#include "api/auth.h"

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace gpuslice::api {

std::string AuthFailureLimiter::SourceOf(const std::string& address) {
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) != 1) return address;
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char text[INET6_ADDRSTRLEN] = {};
  if (std::memcmp(v6.s6_addr, kMapped, sizeof kMapped) == 0) {
    in_addr v4{};
    std::memcpy(&v4, v6.s6_addr + 12, 4);
    return inet_ntop(AF_INET, &v4, text, sizeof text) != nullptr ? text : address;
  }
  std::memset(v6.s6_addr + 8, 0, 8);
  if (inet_ntop(AF_INET6, &v6, text, sizeof text) == nullptr) return address;
  return absl::StrCat(text, "/64");
}

AuthFailureLimiter::Entry& AuthFailureLimiter::EntryFor(const std::string& source,
                                                        std::int64_t now) {
  if (auto it = entries_.find(source); it != entries_.end()) return it->second;
  if (entries_.size() >= limits_.max_sources) {
    std::erase_if(entries_, [&](const auto& entry) {
      return entry.second.locked_until <= now &&
             now - entry.second.window_start >= limits_.window_s;
    });
  }
  if (entries_.size() >= limits_.max_sources) return entries_["(too many sources)"];
  return entries_[source];
}

std::int64_t AuthFailureLimiter::RetryAfter(const std::string& source, std::int64_t now) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(source);
  if (it == entries_.end() && entries_.size() >= limits_.max_sources) {
    it = entries_.find("(too many sources)");
  }
  if (it == entries_.end()) return 0;
  return std::max<std::int64_t>(it->second.locked_until - now, 0);
}

bool AuthFailureLimiter::Failed(const std::string& source, std::int64_t now) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = EntryFor(source, now);
  if (entry.locked_until > now) return false;  // already locked out: not counted again
  if (now - entry.window_start >= limits_.window_s) {
    entry.window_start = now;
    entry.failures = 0;
  }
  if (++entry.failures < limits_.max_failures) return false;
  entry.locked_until = now + limits_.lockout_s;
  entry.failures = 0;
  entry.window_start = entry.locked_until;
  return true;
}

std::size_t AuthFailureLimiter::tracked() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

RequestAuthenticator::RequestAuthenticator(alloc::Service& service, Options options)
    : service_(service), options_(std::move(options)), limiter_(options_.limits) {
  if (!options_.clock_s) {
    options_.clock_s = [] {
      return std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
}

absl::StatusOr<alloc::Caller> RequestAuthenticator::Identify(const http::Request& req,
                                                             std::int64_t* retry_after_s) {
  *retry_after_s = 0;
  const std::string header = req.get_header_value("Authorization");
  if (header.rfind("Bearer ", 0) != 0) {
    return absl::UnauthenticatedError("missing 'Authorization: Bearer <token>'");
  }
  const std::string source = AuthFailureLimiter::SourceOf(req.remote_ip);
  const std::int64_t now = options_.clock_s();
  if (const std::int64_t wait = limiter_.RetryAfter(source, now); wait > 0) {
    *retry_after_s = wait;
    return absl::ResourceExhaustedError(absl::StrCat("too many failed authentications from ",
                                                     source, "; try again in ", wait, " s"));
  }
  absl::StatusOr<alloc::Caller> caller = service_.Authenticate(header.substr(7));
  if (!caller.ok()) {
    const bool limited = limiter_.Failed(source, now);
    if (absl::Status audited =
            service_.AuditAuthFailure(source, std::string(caller.status().message()), limited);
        !audited.ok()) {
      std::cerr << "gpuslice: could not audit a failed authentication: " << audited << std::endl;
    }
    return caller.status();
  }
  if (options_.agents_need_client_certificates && caller->role == alloc::Role::kAgent &&
      std::find(req.client_certificate_names.begin(), req.client_certificate_names.end(),
                caller->machine) == req.client_certificate_names.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("the agent of machine '", caller->machine,
                     "' must connect with a client certificate for that machine (mutual TLS)"));
  }
  return caller;
}

}  // namespace gpuslice::api
