// Groups of the API's routes, each in its own source file, added by ApiServer::Routes
// (src/api/server.cc). Internal to the API library.
#pragma once

#include <functional>

#include "api/http_message.h"
#include "api/router.h"
#include "gpuslice/alloc/service.h"

namespace gpuslice::api {

// A handler that runs once the request's caller is known.
using CallerHandler =
    std::function<void(const alloc::Caller&, const http::Request&, http::Response&)>;
// Wraps a CallerHandler into a route handler that authenticates first (src/api/auth.h) and
// answers the refusal itself.
using Authed = std::function<Router::Handler(CallerHandler)>;

// POST/GET /v1/users, DELETE /v1/users/{name}, POST /v1/users/{name}/rotate
// (src/api/routes_users.cc).
void AddUserRoutes(Router& router, alloc::Service& service, const Authed& authed);

}  // namespace gpuslice::api
