// Go's math/rand port: its published test vectors and the draws' contracts.
#include "gpuslice/place/go_rand.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace gpuslice::place {
namespace {

std::vector<std::int64_t> Draws(GoRand& rng, int n) {
  std::vector<std::int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(rng.Int63());
  return out;
}

// fgd-protocol.md §2.5 test vectors.
TEST(GoRand, PublishedFirstDraws) {
  GoRand one(1);
  EXPECT_EQ(one.Int63(), 5577006791947779410);
  GoRand forty_two(42);
  EXPECT_EQ(Draws(forty_two, 3), (std::vector<std::int64_t>{3440579354231278675, 608747136543856411,
                                                            5571782338101878760}));
}

// The cooked table is computed here by jumping the generator 7.8e12 steps ahead; its first
// words are those of Go's table (src/math/rand/rng.go, rngCooked[0..2]).
TEST(GoRand, CookedTableStartsAsGosDoes) {
  const auto& cooked = GoRand::Cooked();
  EXPECT_EQ(static_cast<std::int64_t>(cooked[0]), -4181792142133755926);
  EXPECT_EQ(static_cast<std::int64_t>(cooked[1]), -4576982950128230565);
  EXPECT_EQ(static_cast<std::int64_t>(cooked[2]), 1395769623340756751);
}

TEST(GoRand, SeedsAreReducedAsGoReducesThem) {
  constexpr std::int64_t kInt32Max = (std::int64_t{1} << 31) - 1;
  GoRand zero(0), replaced(89482311), modulus(kInt32Max);
  const std::vector<std::int64_t> expected = Draws(replaced, 5);
  EXPECT_EQ(Draws(zero, 5), expected);
  EXPECT_EQ(Draws(modulus, 5), expected);
  GoRand minus_one(-1), wrapped(kInt32Max - 1);
  EXPECT_EQ(Draws(minus_one, 5), Draws(wrapped, 5));
  GoRand a(42), b(43);
  EXPECT_NE(Draws(a, 5), Draws(b, 5));
}

TEST(GoRand, DerivedDrawsComeFromTheSameWord) {
  GoRand a(7), b(7), c(7);
  const std::int64_t word = a.Int63();
  EXPECT_EQ(b.Int31(), static_cast<std::int32_t>(word >> 32));
  EXPECT_EQ(c.Uint32(), static_cast<std::uint32_t>(word >> 31));
  GoRand d(7);
  const double f = d.Float64();
  EXPECT_GE(f, 0.0);
  EXPECT_LT(f, 1.0);
  EXPECT_DOUBLE_EQ(f, static_cast<double>(word) / 9223372036854775808.0);
}

TEST(GoRand, IntnStaysInRangeAndConsumesADrawEvenForOne) {
  GoRand rng(3), twin(3);
  EXPECT_EQ(rng.Intn(1), 0);
  twin.Int63();
  EXPECT_EQ(rng.Int63(), twin.Int63());  // Intn(1) took one draw
  for (std::int32_t n : {2, 3, 7, 64, 1000, 1213, 2147483647}) {
    for (int i = 0; i < 200; ++i) {
      const std::int32_t v = rng.Intn(n);
      ASSERT_GE(v, 0);
      ASSERT_LT(v, n);
    }
  }
  GoRand power(9), word(9);  // a power of two masks one Int31
  EXPECT_EQ(power.Intn(1024), word.Int31() & 1023);
}

TEST(GoRand, PermAndShuffleArePermutations) {
  GoRand rng(11);
  std::vector<int> perm = rng.Perm(1213);
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(1213);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(perm, identity);
  std::vector<int> items = identity;
  rng.Shuffle(static_cast<std::int32_t>(items.size()), [&](int i, int j) {
    std::swap(items[static_cast<size_t>(i)], items[static_cast<size_t>(j)]);
  });
  std::vector<int> again = items;
  std::sort(again.begin(), again.end());
  EXPECT_EQ(again, identity);
  EXPECT_NE(items, identity);
}

}  // namespace
}  // namespace gpuslice::place
