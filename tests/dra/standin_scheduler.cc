#include "dra/standin_scheduler.h"

#include <cctype>
#include <cmath>

namespace gpuslice::dra::testing_standin {

std::int64_t ParseQuantity(const std::string& text) {
  size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) != 0 || text[end] == '.')) {
    ++end;
  }
  const double number = std::stod(text.substr(0, end));
  const std::string suffix = text.substr(end);
  static const std::map<std::string, double> factor = {
      {"", 1},           {"m", 1e-3},          {"k", 1e3},
      {"M", 1e6},        {"G", 1e9},           {"Ki", 1024.0},
      {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
  return static_cast<std::int64_t>(std::ceil(number * factor.at(suffix)));
}

absl::Status StandinScheduler::Load(const std::vector<nlohmann::json>& slices) {
  std::int64_t generation = -1;
  for (const nlohmann::json& slice : slices) {
    generation = std::max<std::int64_t>(generation, slice["spec"]["pool"]["generation"]);
  }
  for (const nlohmann::json& slice : slices) {
    const nlohmann::json& spec = slice["spec"];
    if (spec["pool"]["generation"] != generation) continue;
    for (const nlohmann::json& set : spec.value("sharedCounters", nlohmann::json::array())) {
      for (const auto& [counter, value] : set["counters"].items()) {
        const Key key{set["name"], counter};
        if (capacity_.contains(key)) return absl::InvalidArgumentError("repeated counter");
        capacity_[key] = ParseQuantity(value["value"]);
      }
    }
  }
  for (const nlohmann::json& slice : slices) {
    const nlohmann::json& spec = slice["spec"];
    if (spec["pool"]["generation"] != generation) continue;
    for (const nlohmann::json& device : spec.value("devices", nlohmann::json::array())) {
      const std::string name = device["name"];
      if (devices_.contains(name)) return absl::InvalidArgumentError("repeated device " + name);
      devices_[name] = device;
      order_.push_back(name);
      for (const nlohmann::json& c : device.value("consumesCounters", nlohmann::json::array())) {
        for (const auto& [counter, value] : c["counters"].items()) {
          const Key key{c["counterSet"], counter};
          if (!capacity_.contains(key)) {
            return absl::InvalidArgumentError(name + " consumes an unknown counter " + counter);
          }
          consumes_[name][key] += ParseQuantity(value["value"]);
        }
      }
    }
  }
  return absl::OkStatus();
}

bool StandinScheduler::CanAllocate(const std::string& name) const {
  if (allocated_.contains(name) || !devices_.contains(name)) return false;
  auto it = consumes_.find(name);
  if (it == consumes_.end()) return true;
  for (const auto& [key, amount] : it->second) {
    auto used = used_.find(key);
    if ((used == used_.end() ? 0 : used->second) + amount > capacity_.at(key)) return false;
  }
  return true;
}

void StandinScheduler::Allocate(const std::string& name) {
  allocated_.insert(name);
  if (auto it = consumes_.find(name); it != consumes_.end()) {
    for (const auto& [key, amount] : it->second) used_[key] += amount;
  }
}

void StandinScheduler::Release(const std::string& name) {
  if (allocated_.erase(name) == 0) return;
  if (auto it = consumes_.find(name); it != consumes_.end()) {
    for (const auto& [key, amount] : it->second) used_[key] -= amount;
  }
}

namespace {

// What one request consumes of one capacity under its policy, or -1 when it cannot be met.
std::int64_t Consumption(const nlohmann::json& policy, std::int64_t asked) {
  if (policy.contains("validValues")) {
    for (const nlohmann::json& v : policy["validValues"]) {
      const std::int64_t value = ParseQuantity(v);
      if (value >= asked) return value;
    }
    return -1;
  }
  const nlohmann::json& range = policy["validRange"];
  const std::int64_t min = ParseQuantity(range["min"]);
  std::int64_t want = std::max(asked, min);
  if (range.contains("step")) {
    const std::int64_t step = ParseQuantity(range["step"]);
    want = min + (want - min + step - 1) / step * step;
  }
  if (range.contains("max") && want > ParseQuantity(range["max"])) return -1;
  return want;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::int64_t>> StandinScheduler::Share(
    const std::string& name, const std::map<std::string, std::string>& requests) const {
  auto it = devices_.find(name);
  if (it == devices_.end()) return absl::NotFoundError(name);
  const nlohmann::json& device = it->second;
  if (!device.value("allowMultipleAllocations", false)) {
    return absl::FailedPreconditionError(name + " does not allow several allocations");
  }
  std::map<std::string, std::int64_t> consumed;
  const nlohmann::json& capacity = device["capacity"];
  for (const auto& [key, entry] : capacity.items()) {
    const std::int64_t value = ParseQuantity(entry["value"]);
    std::int64_t want = 0;
    auto asked = requests.find(key);
    if (entry.contains("requestPolicy")) {
      const nlohmann::json& policy = entry["requestPolicy"];
      want = Consumption(policy, asked != requests.end() ? ParseQuantity(asked->second)
                                                         : ParseQuantity(policy["default"]));
      if (want < 0) return absl::OutOfRangeError(key + " request outside the policy");
    } else {
      want = asked != requests.end() ? ParseQuantity(asked->second) : value;
    }
    std::int64_t used = 0;
    if (auto u = shared_use_.find(name); u != shared_use_.end() && u->second.contains(key)) {
      used = u->second.at(key);
    }
    if (used + want > value) return absl::ResourceExhaustedError(key + " exhausted on " + name);
    consumed[key] = want;
  }
  for (const auto& [key, text] : requests) {
    if (!capacity.contains(key))
      return absl::InvalidArgumentError(name + " has no capacity " + key);
  }
  return consumed;
}

void StandinScheduler::AllocateShare(const std::string& name,
                                     const std::map<std::string, std::int64_t>& consumed) {
  for (const auto& [key, amount] : consumed) shared_use_[name][key] += amount;
}

void StandinScheduler::ReleaseShare(const std::string& name,
                                    const std::map<std::string, std::int64_t>& consumed) {
  for (const auto& [key, amount] : consumed) shared_use_[name][key] -= amount;
}

}  // namespace gpuslice::dra::testing_standin
