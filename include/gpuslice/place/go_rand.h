// gpuslice/place/go_rand.h
//
// Go's math/rand generator (the global source of Go 1.20, which the FGD artefact's simulator
// seeds with its tune seed), so a trace replay draws the artefact's arrival order bit for bit and
// its results can be compared with the artefact's seed by seed. Written from the algorithm's
// description in ../shared/reference/fgd-protocol.md §2.5:
//   * an additive lagged Fibonacci generator of 607 words (tap 273), x_n = x_{n-607} + x_{n-273}
//     modulo 2^64;
//   * seeded by the Park-Miller LCG (x <- 48271 x mod 2^31-1) XOR a "cooked" table. The table is
//     the generator's state after seeding with 1 (three LCG outputs per word, shifted by 20, 10
//     and 0) and 7.8e12 steps; it is computed here, once, by jumping the recurrence ahead
//     (polynomial powers modulo its characteristic polynomial), not copied from anywhere;
//   * the derived draws Int63, Int31, Uint32, Int, Float64, Intn (modulo rejection), Shuffle
//     (Lemire's multiply with rejection) and Perm, in Go's order of consumption.
// Not thread-safe; deterministic for a given seed.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

namespace gpuslice::place {

class GoRand {
 public:
  static constexpr int kLength = 607;
  static constexpr int kTap = 273;

  // Go's Seed(seed): the seed is reduced modulo 2^31-1 (a negative one made positive, 0 replaced
  // by 89482311).
  explicit GoRand(std::int64_t seed);

  std::uint64_t Uint64();
  std::int64_t Int63() { return static_cast<std::int64_t>(Uint64() & kMask); }
  std::int32_t Int31() { return static_cast<std::int32_t>(Int63() >> 32); }
  std::uint32_t Uint32() { return static_cast<std::uint32_t>(Int63() >> 31); }
  std::int64_t Int() { return Int63(); }  // Go's int is 64 bits here
  double Float64();
  // REQUIRES: 0 < n < 2^31. One draw at least, also for n == 1.
  std::int32_t Intn(std::int32_t n);
  // Fisher-Yates from the end, Go's Shuffle (n < 2^31).
  void Shuffle(std::int32_t n, const std::function<void(int, int)>& swap);
  std::vector<int> Perm(int n);

  // The cooked table (exposed for its test).
  static const std::array<std::uint64_t, kLength>& Cooked();

 private:
  static constexpr std::uint64_t kMask = (std::uint64_t{1} << 63) - 1;
  std::int32_t Int31nLemire(std::int32_t n);  // Go's unexported int31n

  std::array<std::uint64_t, kLength> vec_{};
  int tap_ = 0;
  int feed_ = kLength - kTap;
};

}  // namespace gpuslice::place
