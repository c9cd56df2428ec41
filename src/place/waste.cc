#include "waste.h"

#include <algorithm>
#include <bit>

namespace gpuslice::place::internal {

int WasteModel::CpuStep(std::int64_t cpu_milli) {
  return static_cast<int>(std::clamp<std::int64_t>(cpu_milli / 1000, 0, kCpuSteps - 1));
}

void WasteModel::Build(const std::vector<TypicalRequest>& typical, double shared_kappa,
                       double mig_kappa) {
  shared_kappa_ = shared_kappa;
  mig_kappa_ = mig_kappa;
  typical_.clear();
  for (const TypicalRequest& t : typical) {
    if (t.request.cpu_only() || t.weight <= 0) continue;  // never fills a GPU
    Typical entry;
    entry.milli_steps = (t.request.milli() + 9) / 10;
    entry.cpu_steps = static_cast<int>((t.request.cpu_milli + 999) / 1000);
    entry.whole = t.request.whole();
    entry.request = t.request;
    entry.weight = t.weight;
    typical_.push_back(entry);
  }
  mig_.clear();
  mig_profiles_.clear();
  shared_.assign(static_cast<size_t>(kMilliSteps * kCpuSteps), 0.0);
  // Increasing CPU and free milli: every state refers only to smaller ones.
  for (int cpu = 0; cpu < kCpuSteps; ++cpu) {
    for (int step = 0; step < kMilliSteps; ++step) {
      double r = 0;
      double filled = 0;
      for (const Typical& t : typical_) {
        if (t.request.mig() || t.cpu_steps > cpu) continue;
        if (t.whole ? step != kMilliSteps - 1 : t.milli_steps > step) continue;
        r += t.weight;
        filled += t.weight * (t.whole ? 0.0 : SharedAt(step - t.milli_steps, cpu - t.cpu_steps));
      }
      const double f = std::min(1.0, shared_kappa_ * r);
      shared_[static_cast<size_t>(cpu * kMilliSteps + step)] =
          (1 - f) * step * 10.0 + (r > 0 ? f * filled / r : 0.0);
    }
  }
}

double WasteModel::Shared(int free_milli, std::int64_t cpu_free) const {
  return SharedAt(std::clamp(free_milli / 10, 0, kMilliSteps - 1), CpuStep(cpu_free));
}

double WasteModel::Whole(bool free, std::int64_t cpu_free) const {
  if (!free) return 0;
  return SharedAt(kMilliSteps - 1, CpuStep(cpu_free));
}

double WasteModel::Mig(const geometry::Shape& shape, const geometry::Occupancy& occupancy,
                       std::int64_t cpu_free) const {
  return MigAt(shape, occupancy, CpuStep(cpu_free));
}

double WasteModel::MigAt(const geometry::Shape& shape, const geometry::Occupancy& occupancy,
                         int cpu) const {
  const int free_compute = Cluster::MigFreeMilli(shape, occupancy);
  if (free_compute == 0) return 0;
  const MigKey key{&shape, occupancy.used, occupancy.count, cpu};
  if (auto it = mig_.find(key); it != mig_.end()) return it->second;
  std::vector<int>& profiles = mig_profiles_[&shape];
  if (profiles.empty()) {
    // Each typical request's profile on this model, resolved as the cluster resolves it.
    for (const Typical& t : typical_) profiles.push_back(Cluster::MigProfileFor(shape, t.request));
  }
  const double free_milli = free_compute;
  double r = 0;
  double filled = 0;
  for (size_t i = 0; i < typical_.size(); ++i) {
    const Typical& t = typical_[i];
    if (t.cpu_steps > cpu) continue;
    if (t.whole) {
      if (occupancy.instances != 0) continue;
      r += t.weight;  // the whole GPU is taken: nothing left
      continue;
    }
    const int profile = profiles[i];
    if (profile < 0) continue;
    const int start = Cluster::BestMigStart(shape, occupancy, profile);
    if (start < 0) continue;
    geometry::Occupancy after = occupancy;
    shape.Add(after, profile, start);
    r += t.weight;
    filled += t.weight * MigAt(shape, after, cpu - t.cpu_steps);
  }
  const double f = std::min(1.0, mig_kappa_ * r);
  const double waste = (1 - f) * free_milli + (r > 0 ? f * filled / r : 0.0);
  mig_.emplace(key, waste);
  return waste;
}

}  // namespace gpuslice::place::internal
