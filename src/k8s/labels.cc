#include "gpuslice/k8s/labels.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpuslice::k8s {
namespace {

constexpr size_t kMaxLabelValue = 63;
constexpr size_t kMaxLabelPrefix = 253;

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool IsValueChar(char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; }

// One DNS label of a prefix: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
bool IsDnsLabel(std::string_view part) {
  if (part.empty() || part.size() > 63) return false;
  for (char c : part) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return part.front() != '-' && part.back() != '-';
}

void Put(Labels& labels, std::string name, std::string_view raw_value) {
  std::string value = SanitizeLabelValue(raw_value);
  if (value.empty() || !IsValidLabelName(name)) return;
  labels[std::move(name)] = std::move(value);
}

const char* Bool(bool b) { return b ? "true" : "false"; }

bool MigCapable(const NodeGpu& gpu, const hw::Catalog& catalog) {
  if (gpu.mig_enabled) return true;
  const hw::GpuModel* model = nullptr;
  if (!gpu.model.empty()) model = catalog.Find(gpu.model);
  if (model == nullptr && !gpu.product.empty()) model = catalog.Find(gpu.product);
  return model != nullptr && model->mig_capable();
}

std::string ErrnoText(int error) { return std::strerror(error); }

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

std::string SanitizeLabelValue(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) out.push_back(IsValueChar(c) ? c : '-');
  if (out.size() > kMaxLabelValue) out.resize(kMaxLabelValue);
  size_t begin = 0;
  while (begin < out.size() && !IsAlnum(out[begin])) ++begin;
  size_t end = out.size();
  while (end > begin && !IsAlnum(out[end - 1])) --end;
  return out.substr(begin, end - begin);
}

bool IsValidLabelValue(std::string_view value) {
  if (value.empty()) return true;
  if (value.size() > kMaxLabelValue) return false;
  if (!IsAlnum(value.front()) || !IsAlnum(value.back())) return false;
  return std::all_of(value.begin(), value.end(), IsValueChar);
}

bool IsValidLabelName(std::string_view name) {
  std::string_view part = name;
  if (const size_t slash = name.find('/'); slash != std::string_view::npos) {
    const std::string_view prefix = name.substr(0, slash);
    part = name.substr(slash + 1);
    if (prefix.empty() || prefix.size() > kMaxLabelPrefix) return false;
    size_t start = 0;
    while (true) {
      const size_t dot = prefix.find('.', start);
      const std::string_view label = prefix.substr(
          start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
      if (!IsDnsLabel(label)) return false;
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
  }
  return !part.empty() && IsValidLabelValue(part);
}

Labels NodeLabels(const NodeSnapshot& node, const SharingConfig& sharing) {
  return NodeLabels(node, sharing, hw::Catalog::Builtin());
}

Labels NodeLabels(const NodeSnapshot& node, const SharingConfig& sharing,
                  const hw::Catalog& catalog) {
  Labels labels;
  if (node.gpus.empty()) return labels;
  std::vector<const NodeGpu*> gpus;
  for (const NodeGpu& gpu : node.gpus) gpus.push_back(&gpu);
  std::stable_sort(gpus.begin(), gpus.end(),
                   [](const NodeGpu* a, const NodeGpu* b) { return a->index < b->index; });

  // Whole-GPU labels: the first GPU's product (GFD replaces ' ' by '-').
  const NodeGpu& first = *gpus.front();
  const int same_product = static_cast<int>(std::count_if(
      gpus.begin(), gpus.end(), [&](const NodeGpu* g) { return g->product == first.product; }));
  Put(labels, "nvidia.com/gpu.product", first.product);
  Put(labels, "nvidia.com/gpu.count", absl::StrCat(same_product));
  if (first.memory_mib > 0) Put(labels, "nvidia.com/gpu.memory", absl::StrCat(first.memory_mib));

  bool mig_capable = false;
  int shared = 0;
  for (const NodeGpu* gpu : gpus) {
    mig_capable = mig_capable || MigCapable(*gpu, catalog);
    if (sharing.Shares(*gpu)) ++shared;
  }
  Put(labels, "nvidia.com/mig.capable", Bool(mig_capable));
  Put(labels, "nvidia.com/mig.strategy", "mixed");

  // MIG profiles: offered devices only (CI spanning its GI), first device's attributes.
  struct Profile {
    int count = 0;
    const NodeGpu* gpu = nullptr;
    const MigDevice* first = nullptr;
  };
  std::map<std::string, Profile> profiles;  // by resource name
  for (const NodeGpu* gpu : gpus) {
    if (!gpu->mig_enabled) continue;
    std::vector<const MigDevice*> migs;
    for (const MigDevice& mig : gpu->mig_devices) migs.push_back(&mig);
    std::sort(migs.begin(), migs.end(), [](const MigDevice* a, const MigDevice* b) {
      return std::tie(a->start, a->gi, a->ci) < std::tie(b->start, b->gi, b->ci);
    });
    for (const MigDevice* mig : migs) {
      if (mig->ci_slices != mig->gi_slices) continue;
      Profile& profile = profiles[MigResourceName(mig->profile)];
      if (profile.count++ == 0) {
        profile.gpu = gpu;
        profile.first = mig;
      }
    }
  }
  for (const auto& [resource, profile] : profiles) {
    const std::string profile_name = resource.substr(kMigResourcePrefix.size());
    Put(labels, resource + ".count", absl::StrCat(profile.count));
    if (profile.first->memory_mib > 0) {
      Put(labels, resource + ".memory", absl::StrCat(profile.first->memory_mib));
    }
    Put(labels, resource + ".slices.gi", absl::StrCat(profile.first->gi_slices));
    Put(labels, resource + ".slices.ci", absl::StrCat(profile.first->ci_slices));
    if (!profile.gpu->product.empty()) {
      Put(labels, resource + ".product", absl::StrCat(profile.gpu->product, "-MIG-", profile_name));
    }
  }

  Put(labels, std::string(kSharingStrategyLabel), shared > 0 ? "gpuslice" : "none");
  if (shared > 0) {
    Put(labels, std::string(kShareUnitsLabel), absl::StrCat(sharing.units));
    Put(labels, std::string(kShareGpusLabel), absl::StrCat(shared));
  }
  return labels;
}

std::string NfdFeatureFile(const Labels& labels,
                           std::optional<std::chrono::system_clock::time_point> expires) {
  std::string out =
      "# Node labels of gpuslice's device plugin for Node Feature Discovery's local source.\n"
      "# Written by gpuslice; rewritten every round, do not edit.\n";
  if (expires.has_value()) {
    const std::time_t seconds = std::chrono::system_clock::to_time_t(*expires);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char text[32];
    std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
    absl::StrAppend(&out, "# +expiry-time=", text, "\n");
  }
  for (const auto& [name, value] : labels) {
    if (!IsValidLabelName(name) || !IsValidLabelValue(value)) continue;
    absl::StrAppend(&out, name, "=", value, "\n");
  }
  return out;
}

absl::Status WriteFeatureFile(const std::string& path, const std::string& text) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("feature file '", path, "': not a file name"));
  }
  const std::string directory = DirectoryOf(path);
  const std::string base =
      path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  struct stat info {};
  if (stat(directory.c_str(), &info) != 0) {
    const int error = errno;
    const std::string message =
        absl::StrCat("feature file ", path, ": directory ", directory, ": ", ErrnoText(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::FailedPreconditionError(message);
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("feature file ", path, ": ", directory, " is not a directory"));
  }
  if (stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("feature file ", path, ": is a directory"));
  }
  std::string temp = absl::StrCat(directory, "/.", base, ".tmp-XXXXXX");
  const int fd = mkstemp(temp.data());
  if (fd < 0) {
    const int error = errno;
    const std::string message =
        absl::StrCat("feature file ", path, ": cannot create a temporary file in ", directory, ": ",
                     ErrnoText(error));
    return error == EACCES || error == EPERM || error == EROFS
               ? absl::PermissionDeniedError(message)
               : absl::InternalError(message);
  }
  auto fail = [&](std::string_view what, int error) {
    close(fd);
    unlink(temp.c_str());
    return absl::InternalError(
        absl::StrCat("feature file ", path, ": ", std::string(what), ": ", ErrnoText(error)));
  };
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(absl::StrCat("writing ", temp), errno);
    }
    written += static_cast<size_t>(n);
  }
  if (fchmod(fd, 0644) != 0) return fail(absl::StrCat("chmod ", temp), errno);
  if (fsync(fd) != 0) return fail(absl::StrCat("fsync ", temp), errno);
  if (close(fd) != 0) {
    const int error = errno;
    unlink(temp.c_str());
    return absl::InternalError(
        absl::StrCat("feature file ", path, ": closing ", temp, ": ", ErrnoText(error)));
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    unlink(temp.c_str());
    return absl::InternalError(
        absl::StrCat("feature file ", path, ": rename from ", temp, ": ", ErrnoText(error)));
  }
  // The rename is durable once the directory is on disk.
  if (const int dir = open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    (void)fsync(dir);
    close(dir);
  }
  return absl::OkStatus();
}

}  // namespace gpuslice::k8s
