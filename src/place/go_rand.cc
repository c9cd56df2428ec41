#include "gpuslice/place/go_rand.h"

#include <cstddef>

namespace gpuslice::place {
namespace {

constexpr int kLen = GoRand::kLength;
constexpr int kFeedStart = GoRand::kLength - GoRand::kTap;  // 334
constexpr std::int64_t kInt32Max = (std::int64_t{1} << 31) - 1;

// Park-Miller: x <- 48271 x mod (2^31 - 1), for 0 < x < 2^31 - 1.
std::int64_t SeedRand(std::int64_t x) { return x * 48271 % kInt32Max; }

// Polynomials modulo P(x) = x^607 - x^334 - 1 with coefficients modulo 2^64: the characteristic
// polynomial of u_m = u_{m-607} + u_{m-273}.
using Poly = std::vector<std::uint64_t>;

void Reduce(Poly& p) {
  for (std::size_t d = p.size(); d-- > kLen;) {
    const std::uint64_t c = p[d];
    if (c == 0) continue;
    p[d] = 0;
    p[d - kLen + kFeedStart] += c;  // x^d = x^(d-607) (x^334 + 1)
    p[d - kLen] += c;
  }
  p.resize(kLen);
}

Poly MulMod(const Poly& a, const Poly& b) {
  Poly product(2 * kLen - 1, 0);
  for (int i = 0; i < kLen; ++i) {
    if (a[static_cast<std::size_t>(i)] == 0) continue;
    for (int j = 0; j < kLen; ++j) {
      product[static_cast<std::size_t>(i + j)] +=
          a[static_cast<std::size_t>(i)] * b[static_cast<std::size_t>(j)];
    }
  }
  Reduce(product);
  return product;
}

Poly TimesX(const Poly& a) {
  Poly shifted(kLen + 1, 0);
  for (int i = 0; i < kLen; ++i)
    shifted[static_cast<std::size_t>(i + 1)] = a[static_cast<std::size_t>(i)];
  Reduce(shifted);
  return shifted;
}

Poly XPower(std::uint64_t n) {
  Poly result(kLen, 0);
  result[0] = 1;
  Poly base(kLen, 0);
  base[1] = 1;
  for (; n > 0; n >>= 1) {
    if (n & 1) result = MulMod(result, base);
    base = MulMod(base, base);
  }
  return result;
}

// The generator's state after `steps` draws from `start` (tap 0, feed 334), in O(607^2 log steps).
// Draw k (k >= 1) writes w_k at position (334 - k) mod 607, and w_k = w_{k-607} + w_{k-273}, where
// w_j for -606 <= j <= 0 is the starting word at (334 - j) mod 607. With u_i = w_{i-606}, u_m is
// the linear form x^i -> u_i applied to x^m mod P.
std::array<std::uint64_t, kLen> JumpAhead(const std::array<std::uint64_t, kLen>& start,
                                          std::uint64_t steps) {
  std::array<std::uint64_t, kLen> initial{};  // u_0 .. u_606
  for (int i = 0; i < kLen; ++i) {
    initial[static_cast<std::size_t>(i)] =
        start[static_cast<std::size_t>(((333 - i) % kLen + kLen) % kLen)];
  }
  std::array<std::uint64_t, kLen> state = start;
  const std::uint64_t first = steps >= kLen - 1 ? steps - (kLen - 1) : 1;
  Poly power = XPower(first + kLen - 1);  // u index of draw k is k + 606
  for (std::uint64_t k = first; k <= steps; ++k) {
    std::uint64_t value = 0;
    for (int i = 0; i < kLen; ++i) {
      value += power[static_cast<std::size_t>(i)] * initial[static_cast<std::size_t>(i)];
    }
    const auto position = static_cast<std::size_t>(
        ((kFeedStart - static_cast<std::int64_t>(k % kLen)) % kLen + kLen) % kLen);
    state[position] = value;
    power = TimesX(power);
  }
  return state;
}

// 607 words from the LCG started at `x` after 20 warm-up steps, each three outputs XORed with
// the first two shifted left by `high` and `middle` bits.
std::array<std::uint64_t, kLen> LcgWords(std::int64_t x, int high, int middle) {
  std::array<std::uint64_t, kLen> words{};
  for (int i = -20; i < kLen; ++i) {
    x = SeedRand(x);
    if (i < 0) continue;
    std::uint64_t u = static_cast<std::uint64_t>(x) << high;
    x = SeedRand(x);
    u ^= static_cast<std::uint64_t>(x) << middle;
    x = SeedRand(x);
    u ^= static_cast<std::uint64_t>(x);
    words[static_cast<std::size_t>(i)] = u;
  }
  return words;
}

// Seeded with 1 (outputs shifted by 20, 10 and 0), then 7.8e12 draws.
std::array<std::uint64_t, kLen> ComputeCooked() {
  return JumpAhead(LcgWords(1, 20, 10), 7'800'000'000'000ULL);
}

}  // namespace

const std::array<std::uint64_t, GoRand::kLength>& GoRand::Cooked() {
  static const std::array<std::uint64_t, kLen> cooked = ComputeCooked();
  return cooked;
}

GoRand::GoRand(std::int64_t seed) {
  const std::array<std::uint64_t, kLen>& cooked = Cooked();
  seed %= kInt32Max;
  if (seed < 0) seed += kInt32Max;
  if (seed == 0) seed = 89482311;
  const std::array<std::uint64_t, kLen> words = LcgWords(seed, 40, 20);
  for (int i = 0; i < kLen; ++i) {
    vec_[static_cast<std::size_t>(i)] =
        words[static_cast<std::size_t>(i)] ^ cooked[static_cast<std::size_t>(i)];
  }
}

std::uint64_t GoRand::Uint64() {
  if (--tap_ < 0) tap_ += kLength;
  if (--feed_ < 0) feed_ += kLength;
  std::uint64_t& word = vec_[static_cast<std::size_t>(feed_)];
  word += vec_[static_cast<std::size_t>(tap_)];
  return word;
}

double GoRand::Float64() {
  for (;;) {
    const double f = static_cast<double>(Int63()) / 9223372036854775808.0;  // 2^63
    if (f != 1.0) return f;
  }
}

std::int32_t GoRand::Intn(std::int32_t n) {
  if ((n & (n - 1)) == 0) return Int31() & (n - 1);
  const auto un = static_cast<std::uint32_t>(n);
  const auto max =
      static_cast<std::int32_t>((std::uint32_t{1} << 31) - 1 - (std::uint32_t{1} << 31) % un);
  std::int32_t v = Int31();
  while (v > max) v = Int31();
  return v % n;
}

std::int32_t GoRand::Int31nLemire(std::int32_t n) {
  const auto un = static_cast<std::uint32_t>(n);
  std::uint64_t product = std::uint64_t{Uint32()} * un;
  auto low = static_cast<std::uint32_t>(product);
  if (low < un) {
    const std::uint32_t threshold = (0u - un) % un;
    while (low < threshold) {
      product = std::uint64_t{Uint32()} * un;
      low = static_cast<std::uint32_t>(product);
    }
  }
  return static_cast<std::int32_t>(product >> 32);
}

void GoRand::Shuffle(std::int32_t n, const std::function<void(int, int)>& swap) {
  for (std::int32_t i = n - 1; i > 0; --i) swap(i, Int31nLemire(i + 1));
}

std::vector<int> GoRand::Perm(int n) {
  std::vector<int> m(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const int j = Intn(i + 1);
    m[static_cast<std::size_t>(i)] = m[static_cast<std::size_t>(j)];
    m[static_cast<std::size_t>(j)] = i;
  }
  return m;
}

}  // namespace gpuslice::place
