// Routes a request to the handler of its method and path pattern (a regular expression matched
// against the whole path; its captures land in `request.matches`). The API's routes are the rows
// of src/api/routes.h, added by ApiServer (src/api/server.cc).
//
// Route answers: the first route whose method and pattern match runs; a path that some route
// matches for another method answers 405 with `Allow`; any other path answers 404. Routes are
// added before serving and only read afterwards, so Route may run on many threads at once.
#pragma once

#include <functional>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "api/http_message.h"
#include "nlohmann/json.hpp"

namespace gpuslice::api {

class Router {
 public:
  using Handler = std::function<void(const http::Request&, http::Response&)>;

  void Add(std::string method, const std::string& pattern, Handler handler) {
    routes_.push_back({std::move(method), std::regex(pattern), std::move(handler)});
  }

  void Route(http::Request& request, http::Response& response) const {
    std::set<std::string> allowed;
    for (const Entry& route : routes_) {
      std::smatch matches;
      if (!std::regex_match(request.path, matches, route.pattern)) continue;
      if (route.method != request.method) {
        allowed.insert(route.method);
        continue;
      }
      request.matches = std::move(matches);
      route.handler(request, response);
      return;
    }
    response.status = allowed.empty() ? 404 : 405;
    if (!allowed.empty()) response.set_header("Allow", absl::StrJoin(allowed, ", "));
    response.set_content(
        nlohmann::json{{"error", allowed.empty() ? "no such endpoint" : "method not allowed"}}
            .dump(),
        "application/json");
  }

 private:
  struct Entry {
    std::string method;
    std::regex pattern;
    Handler handler;
  };
  std::vector<Entry> routes_;
};

}  // namespace gpuslice::api
