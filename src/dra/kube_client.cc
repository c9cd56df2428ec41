#include "gpuslice/dra/kube_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpuslice::dra {

using nlohmann::json;

namespace {

// A string field at `pointer` of `object`, or Internal naming what is missing.
absl::StatusOr<std::string> StringAt(const json& object, const char* pointer,
                                     const std::string& what) {
  const json::json_pointer at(pointer);
  if (!object.contains(at) || !object[at].is_string() || object[at].get<std::string>().empty()) {
    return absl::InternalError(absl::StrCat(what, ": the reply has no ", pointer));
  }
  return object[at].get<std::string>();
}

}  // namespace

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') ||
                       c == '-' || c == '_' || c == '.' || c == '~';
    if (plain) {
      out.push_back(c);
    } else {
      out += absl::StrFormat("%%%02X", u);
    }
  }
  return out;
}

absl::Status StatusOfReply(const std::string& what, const k8s::HttpReply& reply) {
  const std::string text = absl::StrCat(what, ": HTTP ", reply.status, ": ", reply.Message());
  if (reply.status == 401 || reply.status == 403) return absl::PermissionDeniedError(text);
  if (reply.status == 404) return absl::NotFoundError(text);
  if (reply.status == 409) return absl::AbortedError(text);
  if (reply.status == 400 || reply.status == 422) return absl::InvalidArgumentError(text);
  if (reply.status >= 500 || reply.status == 429) return absl::UnavailableError(text);
  return absl::InternalError(text);
}

absl::StatusOr<json> DraApi::Request(std::string_view method, const std::string& path,
                                     const json* body) const {
  absl::StatusOr<k8s::HttpReply> reply = client_.Call(method, path, body);
  if (!reply.ok()) return reply.status();
  const std::string what = absl::StrCat(std::string(method), " ", path);
  if (reply->status < 200 || reply->status > 299) return StatusOfReply(what, *reply);
  if (!reply->body.is_object()) {
    return absl::InternalError(
        absl::StrCat(what, ": HTTP ", reply->status,
                     ": the reply is not a JSON object: ", reply->text.substr(0, 200)));
  }
  return std::move(reply->body);
}

absl::StatusOr<std::string> DraApi::GitVersion() const {
  absl::StatusOr<json> version = Request("GET", "/version", nullptr);
  if (!version.ok()) return version.status();
  return StringAt(*version, "/gitVersion", "GET /version");
}

absl::StatusOr<std::string> DraApi::NodeUid(const std::string& node) const {
  const std::string path = absl::StrCat("/api/v1/nodes/", UrlEncode(node));
  absl::StatusOr<json> object = Request("GET", path, nullptr);
  if (!object.ok()) return object.status();
  return StringAt(*object, "/metadata/uid", "GET " + path);
}

absl::StatusOr<std::vector<json>> DraApi::ListSlices(const std::string& node,
                                                     const std::string& driver) const {
  const std::string path = absl::StrCat(
      kResourceSlicesPath,
      "?fieldSelector=", UrlEncode(absl::StrCat("spec.nodeName=", node, ",spec.driver=", driver)));
  absl::StatusOr<json> list = Request("GET", path, nullptr);
  if (!list.ok()) return list.status();
  const json items = list->value("items", json());
  if (items.is_null()) return std::vector<json>();
  if (!items.is_array()) {
    return absl::InternalError(absl::StrCat("GET ", path, ": the reply's items are not a list"));
  }
  std::vector<json> out;
  for (const json& item : items) {
    if (!item.is_object() || !item.contains("metadata") || !item.contains("spec")) {
      return absl::InternalError(
          absl::StrCat("GET ", path, ": an item is not a ResourceSlice: ", item.dump()));
    }
    out.push_back(item);
  }
  return out;
}

absl::StatusOr<json> DraApi::CreateSlice(const json& slice) const {
  return Request("POST", kResourceSlicesPath, &slice);
}

absl::StatusOr<json> DraApi::UpdateSlice(const json& slice) const {
  const json::json_pointer at("/metadata/name");
  if (!slice.contains(at) || !slice[at].is_string() || slice[at].get<std::string>().empty()) {
    return absl::InvalidArgumentError("UpdateSlice: the slice has no metadata.name");
  }
  const std::string path =
      absl::StrCat(kResourceSlicesPath, "/", UrlEncode(slice[at].get<std::string>()));
  return Request("PUT", path, &slice);
}

absl::Status DraApi::DeleteSlice(const std::string& name, const std::string& uid,
                                 const std::string& resource_version) const {
  json preconditions = json::object();
  if (!uid.empty()) preconditions["uid"] = uid;
  if (!resource_version.empty()) preconditions["resourceVersion"] = resource_version;
  const json body = {
      {"apiVersion", "v1"}, {"kind", "DeleteOptions"}, {"preconditions", std::move(preconditions)}};
  absl::StatusOr<json> deleted =
      Request("DELETE", absl::StrCat(kResourceSlicesPath, "/", UrlEncode(name)), &body);
  if (!deleted.ok() && !absl::IsNotFound(deleted.status())) return deleted.status();
  return absl::OkStatus();
}

absl::StatusOr<json> DraApi::GetClaim(const std::string& name_space,
                                      const std::string& name) const {
  return Request("GET",
                 absl::StrCat("/apis/resource.k8s.io/v1/namespaces/", UrlEncode(name_space),
                              "/resourceclaims/", UrlEncode(name)),
                 nullptr);
}

}  // namespace gpuslice::dra
