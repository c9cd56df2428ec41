#include "gpuslice/device/sim_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace gpuslice::device::sim {
namespace {

using nlohmann::json;

constexpr int kFormatVersion = 1;

std::string ModeText(MigMode mode) { return mode == MigMode::kEnabled ? "enabled" : "disabled"; }

MigMode ParseMode(const std::string& text) {
  if (text == "enabled") return MigMode::kEnabled;
  if (text == "disabled") return MigMode::kDisabled;
  throw std::runtime_error("bad MIG mode '" + text + "'");
}

// Reads `object[key]` strictly: the key must exist (unless a fallback is given) and have the type.
template <typename T>
T Get(const json& object, const char* key) {
  if (!object.contains(key)) throw std::runtime_error(std::string("missing field '") + key + "'");
  return object.at(key).get<T>();
}

void CheckKeys(const json& object, std::initializer_list<const char*> keys, const char* what) {
  if (!object.is_object()) throw std::runtime_error(std::string(what) + " must be an object");
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool known = false;
    for (const char* key : keys) known = known || it.key() == key;
    if (!known)
      throw std::runtime_error(std::string("unknown field '") + it.key() + "' in " + what);
  }
}

class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// An exclusive flock on a descriptor the caller keeps open.
class HeldLock {
 public:
  explicit HeldLock(int fd) : fd_(fd >= 0 && ::flock(fd, LOCK_EX) == 0 ? fd : -1) {}
  ~HeldLock() {
    if (fd_ >= 0) ::flock(fd_, LOCK_UN);
  }
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream file(temp, std::ios::trunc);
    if (!file)
      return absl::PermissionDeniedError("cannot write " + temp + ": " + std::strerror(errno));
    file << text;
    file.flush();
    if (!file) return absl::DataLossError("writing " + temp + " failed");
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temp.c_str());
    return absl::PermissionDeniedError("cannot replace " + path + ": " + reason);
  }
  return absl::OkStatus();
}

json TelemetryToJson(const SimTelemetry& t) {
  json out = {{"throttle_reasons", t.throttle_reasons},
              {"ecc_corrected", t.ecc_corrected},
              {"ecc_uncorrected", t.ecc_uncorrected},
              {"remapped_rows_correctable", t.remapped_rows_correctable},
              {"remapped_rows_uncorrectable", t.remapped_rows_uncorrectable},
              {"remap_pending", t.remap_pending},
              {"remap_failure", t.remap_failure},
              {"unsupported", t.unsupported}};
  if (t.temperature_c) out["temperature_c"] = *t.temperature_c;
  if (t.power_w) out["power_w"] = *t.power_w;
  if (t.utilization_pct) out["utilization_pct"] = *t.utilization_pct;
  return out;
}

SimTelemetry TelemetryFromJson(const json& in) {
  CheckKeys(in,
            {"throttle_reasons", "ecc_corrected", "ecc_uncorrected", "remapped_rows_correctable",
             "remapped_rows_uncorrectable", "remap_pending", "remap_failure", "unsupported",
             "temperature_c", "power_w", "utilization_pct"},
            "a GPU's telemetry");
  SimTelemetry t;
  if (in.contains("temperature_c")) t.temperature_c = Get<int>(in, "temperature_c");
  if (in.contains("power_w")) t.power_w = Get<double>(in, "power_w");
  if (in.contains("utilization_pct")) t.utilization_pct = Get<int>(in, "utilization_pct");
  if (in.contains("throttle_reasons"))
    t.throttle_reasons = Get<std::uint64_t>(in, "throttle_reasons");
  if (in.contains("ecc_corrected")) t.ecc_corrected = Get<std::uint64_t>(in, "ecc_corrected");
  if (in.contains("ecc_uncorrected")) t.ecc_uncorrected = Get<std::uint64_t>(in, "ecc_uncorrected");
  if (in.contains("remapped_rows_correctable")) {
    t.remapped_rows_correctable = Get<int>(in, "remapped_rows_correctable");
  }
  if (in.contains("remapped_rows_uncorrectable")) {
    t.remapped_rows_uncorrectable = Get<int>(in, "remapped_rows_uncorrectable");
  }
  if (in.contains("remap_pending")) t.remap_pending = Get<bool>(in, "remap_pending");
  if (in.contains("remap_failure")) t.remap_failure = Get<bool>(in, "remap_failure");
  if (in.contains("unsupported")) t.unsupported = Get<std::vector<std::string>>(in, "unsupported");
  return t;
}

}  // namespace

std::string ToJson(const SimState& state) {
  json gpus = json::array();
  for (const SimGpu& gpu : state.gpus) {
    json gis = json::array();
    for (const SimGi& gi : gpu.gis) {
      json cis = json::array();
      for (const SimCi& ci : gi.cis) {
        cis.push_back({{"id", ci.id},
                       {"profile_id", ci.profile_id},
                       {"start", ci.start},
                       {"size", ci.size},
                       {"uuid", ci.uuid}});
      }
      gis.push_back({{"id", gi.id},
                     {"profile_id", gi.profile_id},
                     {"start", gi.start},
                     {"size", gi.size},
                     {"compute_instances", cis}});
    }
    json processes = json::array();
    for (const SimProcess& p : gpu.processes) {
      processes.push_back({{"pid", p.pid},
                           {"name", p.name},
                           {"used_mib", p.used_mib},
                           {"gpu_instance", p.gi},
                           {"compute_instance", p.ci},
                           {"sm_activity_pct", p.sm_activity_pct}});
    }
    gpus.push_back({{"index", gpu.index},
                    {"model", gpu.model_id},
                    {"uuid", gpu.uuid},
                    {"name", gpu.name},
                    {"pci_device_id", gpu.pci_device_id},
                    {"bus_id", gpu.bus_id},
                    {"memory_total_mib", gpu.memory_total_mib},
                    {"mig_capable", gpu.mig_capable},
                    {"mig_current", ModeText(gpu.mig_current)},
                    {"mig_pending", ModeText(gpu.mig_pending)},
                    {"reset_supported", gpu.reset_supported},
                    {"gpu_instances", gis},
                    {"processes", processes},
                    {"holders", gpu.holders},
                    {"telemetry", TelemetryToJson(gpu.telemetry)},
                    {"lost", gpu.lost}});
  }
  json xids = json::array();
  for (const SimXid& x : state.xids) {
    xids.push_back(
        {{"gpu", x.gpu}, {"xid", x.xid}, {"gpu_instance", x.gi}, {"compute_instance", x.ci}});
  }
  json faults = json::array();
  for (const FaultRule& rule : state.faults) {
    faults.push_back({{"at_call", rule.at_call},
                      {"match", rule.match},
                      {"code", rule.code},
                      {"abort", rule.abort_process},
                      {"times", rule.times}});
  }
  json root = {{"gpuslice_simulator", kFormatVersion},
               {"driver_version", state.driver_version},
               {"seed", state.seed},
               {"uuid_counter", state.uuid_counter},
               {"calls", state.calls},
               {"faults", faults},
               {"xids", xids},
               {"gpus", gpus}};
  return root.dump(1) + "\n";
}

absl::StatusOr<SimState> FromJson(std::string_view text, std::string_view origin) {
  SimState state;
  try {
    const json root = json::parse(text);
    CheckKeys(root,
              {"gpuslice_simulator", "driver_version", "seed", "uuid_counter", "calls", "faults",
               "xids", "gpus"},
              "the state");
    if (!root.contains("gpuslice_simulator")) {
      throw std::runtime_error(
          "not a gpuslice simulator state (create one with `gpuslice sim create`)");
    }
    if (Get<int>(root, "gpuslice_simulator") != kFormatVersion) {
      throw std::runtime_error("unsupported simulator state version");
    }
    state.driver_version = Get<std::string>(root, "driver_version");
    state.seed = Get<std::uint64_t>(root, "seed");
    state.uuid_counter = Get<std::uint64_t>(root, "uuid_counter");
    state.calls = Get<std::int64_t>(root, "calls");
    for (const json& rule_json : Get<json>(root, "faults")) {
      CheckKeys(rule_json, {"at_call", "match", "code", "abort", "times"}, "a fault rule");
      FaultRule rule;
      rule.at_call = Get<std::int64_t>(rule_json, "at_call");
      rule.match = Get<std::string>(rule_json, "match");
      rule.code = Get<int>(rule_json, "code");
      rule.abort_process = Get<bool>(rule_json, "abort");
      rule.times = Get<int>(rule_json, "times");
      state.faults.push_back(rule);
    }
    if (root.contains("xids")) {
      for (const json& x : Get<json>(root, "xids")) {
        CheckKeys(x, {"gpu", "xid", "gpu_instance", "compute_instance"}, "an Xid event");
        state.xids.push_back({Get<int>(x, "gpu"), Get<std::uint64_t>(x, "xid"),
                              Get<int>(x, "gpu_instance"), Get<int>(x, "compute_instance")});
      }
    }
    for (const json& gpu_json : Get<json>(root, "gpus")) {
      CheckKeys(gpu_json,
                {"index", "model", "uuid", "name", "pci_device_id", "bus_id", "memory_total_mib",
                 "mig_capable", "mig_current", "mig_pending", "reset_supported", "gpu_instances",
                 "processes", "holders", "telemetry", "lost"},
                "a GPU");
      SimGpu gpu;
      gpu.index = Get<int>(gpu_json, "index");
      gpu.model_id = Get<std::string>(gpu_json, "model");
      gpu.uuid = Get<std::string>(gpu_json, "uuid");
      gpu.name = Get<std::string>(gpu_json, "name");
      gpu.pci_device_id = Get<std::uint16_t>(gpu_json, "pci_device_id");
      gpu.bus_id = Get<std::string>(gpu_json, "bus_id");
      gpu.memory_total_mib = Get<std::int64_t>(gpu_json, "memory_total_mib");
      gpu.mig_capable = Get<bool>(gpu_json, "mig_capable");
      gpu.mig_current = ParseMode(Get<std::string>(gpu_json, "mig_current"));
      gpu.mig_pending = ParseMode(Get<std::string>(gpu_json, "mig_pending"));
      gpu.reset_supported = Get<bool>(gpu_json, "reset_supported");
      for (const json& gi_json : Get<json>(gpu_json, "gpu_instances")) {
        CheckKeys(gi_json, {"id", "profile_id", "start", "size", "compute_instances"},
                  "a GPU instance");
        SimGi gi;
        gi.id = Get<int>(gi_json, "id");
        gi.profile_id = Get<int>(gi_json, "profile_id");
        gi.start = Get<int>(gi_json, "start");
        gi.size = Get<int>(gi_json, "size");
        for (const json& ci_json : Get<json>(gi_json, "compute_instances")) {
          CheckKeys(ci_json, {"id", "profile_id", "start", "size", "uuid"}, "a compute instance");
          gi.cis.push_back({Get<int>(ci_json, "id"), Get<int>(ci_json, "profile_id"),
                            Get<int>(ci_json, "start"), Get<int>(ci_json, "size"),
                            Get<std::string>(ci_json, "uuid")});
        }
        gpu.gis.push_back(std::move(gi));
      }
      for (const json& p_json : Get<json>(gpu_json, "processes")) {
        CheckKeys(
            p_json,
            {"pid", "name", "used_mib", "gpu_instance", "compute_instance", "sm_activity_pct"},
            "a process");
        SimProcess process{Get<std::uint32_t>(p_json, "pid"), Get<std::string>(p_json, "name"),
                           Get<std::int64_t>(p_json, "used_mib"), Get<int>(p_json, "gpu_instance"),
                           Get<int>(p_json, "compute_instance")};
        if (p_json.contains("sm_activity_pct")) {
          process.sm_activity_pct = Get<double>(p_json, "sm_activity_pct");
        }
        gpu.processes.push_back(std::move(process));
      }
      gpu.holders = Get<std::vector<std::string>>(gpu_json, "holders");
      if (gpu_json.contains("telemetry")) {
        gpu.telemetry = TelemetryFromJson(Get<json>(gpu_json, "telemetry"));
      }
      if (gpu_json.contains("lost")) gpu.lost = Get<bool>(gpu_json, "lost");
      state.gpus.push_back(std::move(gpu));
    }
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(std::string(origin) + ": " + error.what());
  }
  return state;
}

absl::StatusOr<std::unique_ptr<SimStore>> SimStore::Open(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return absl::NotFoundError("simulated machine '" + path +
                               "' does not exist; create it with `gpuslice sim create " + path +
                               " 2xH100-80GB`");
  }
  std::unique_ptr<SimStore> store(new SimStore(path));
  FileLock lock(path + ".lock");
  if (!lock.ok()) return absl::PermissionDeniedError("cannot lock " + path + ".lock");
  if (absl::Status status = store->LoadIfChanged(); !status.ok()) return status;
  return store;
}

absl::Status SimStore::Create(const std::string& path, const SimState& state, bool overwrite) {
  FileLock lock(path + ".lock");
  if (!lock.ok()) return absl::PermissionDeniedError("cannot create " + path + ".lock");
  struct stat info {};
  if (!overwrite && ::stat(path.c_str(), &info) == 0) {
    return absl::AlreadyExistsError(path + " exists (use --force to replace it)");
  }
  return WriteAtomically(path, ToJson(state));
}

SimStore::~SimStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

int SimStore::LockFd() {
  if (lock_fd_ < 0) {
    lock_fd_ = ::open((path_ + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  }
  return lock_fd_;
}

absl::Status SimStore::LoadIfChanged() {
  struct stat info {};
  if (::stat(path_.c_str(), &info) != 0) {
    return absl::NotFoundError("simulated machine '" + path_ + "' disappeared");
  }
  if (loaded_ && info.st_mtim.tv_sec == mtime_.tv_sec && info.st_mtim.tv_nsec == mtime_.tv_nsec &&
      info.st_size == size_ && info.st_ino == inode_) {
    return absl::OkStatus();
  }
  std::ifstream file(path_);
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<SimState> state = FromJson(text.str(), path_);
  if (!state.ok()) return state.status();
  state_ = *std::move(state);
  loaded_ = true;
  mtime_ = info.st_mtim;
  size_ = info.st_size;
  inode_ = info.st_ino;
  return absl::OkStatus();
}

absl::Status SimStore::Save() {
  if (absl::Status status = WriteAtomically(path_, ToJson(state_)); !status.ok()) return status;
  struct stat info {};
  if (::stat(path_.c_str(), &info) == 0) {
    mtime_ = info.st_mtim;
    size_ = info.st_size;
    inode_ = info.st_ino;
  }
  return absl::OkStatus();
}

absl::Status SimStore::Update(
    const std::function<bool(SimState& state, const std::function<void()>& save)>& fn) {
  HeldLock lock(LockFd());
  if (!lock.ok()) return absl::PermissionDeniedError("cannot lock " + path_ + ".lock");
  if (absl::Status status = LoadIfChanged(); !status.ok()) return status;
  const std::function<void()> save = [this] { (void)Save(); };
  if (fn(state_, save)) return Save();
  return absl::OkStatus();
}

absl::StatusOr<SimState> SimStore::Read() {
  HeldLock lock(LockFd());
  if (!lock.ok()) return absl::PermissionDeniedError("cannot lock " + path_ + ".lock");
  if (absl::Status status = LoadIfChanged(); !status.ok()) return status;
  return state_;
}

}  // namespace gpuslice::device::sim
