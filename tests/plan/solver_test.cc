// IncrementalLp: re-solving from a saved basis (branch and price restores a queued node's parent
// basis) gives the same optimum as solving afresh, also after columns were added since.
#include "solver.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpuslice::plan::internal {
namespace {

// min x + 2y + 3z  s.t.  x + y + z >= 4,  x in row [0, x_max],  y in row [0, y_max].
LinearProgram Program(double x_max, double y_max) {
  LinearProgram program;
  for (double cost : {1.0, 2.0, 3.0}) program.AddColumn(cost, 0, 10, false);
  program.AddRow({{0, 1.0}, {1, 1.0}, {2, 1.0}}, 4, kInfinity);
  program.AddRow({{0, 1.0}}, 0, x_max);
  program.AddRow({{1, 1.0}}, 0, y_max);
  return program;
}

TEST(IncrementalLpTest, ARestoredBasisGivesTheSameOptimumAsAFreshSolve) {
  IncrementalLp lp(Program(10, 10));
  ASSERT_TRUE(lp.Solve(10).has_solution);
  const std::vector<unsigned char> wide = lp.Basis();
  ASSERT_EQ(wide.size(), 3u + 3u);

  lp.SetRowBounds(1, 0, 1);
  Solution narrowed = lp.Solve(10);
  ASSERT_TRUE(narrowed.has_solution);
  EXPECT_DOUBLE_EQ(narrowed.objective, SolveLp(Program(1, 10), 10).objective);  // 1 + 2 * 3
  const std::vector<unsigned char> x_capped = lp.Basis();

  lp.SetRowBounds(2, 0, 1);
  Solution both = lp.Solve(10);
  ASSERT_TRUE(both.has_solution);
  EXPECT_DOUBLE_EQ(both.objective, 9.0);  // 1 + 2 + 3 * 2

  // Back to the wide box, from the basis solved there.
  lp.SetRowBounds(1, 0, 10);
  lp.SetRowBounds(2, 0, 10);
  lp.RestoreBasis(wide);
  Solution again = lp.Solve(10);
  ASSERT_TRUE(again.has_solution);
  EXPECT_DOUBLE_EQ(again.objective, 4.0);

  // A column added after a basis was saved starts nonbasic; the optimum still uses it.
  const int w = lp.AddColumn(0.5, 0, 10, {{0, 1.0}});
  EXPECT_EQ(w, 3);
  ASSERT_TRUE(lp.Solve(10).has_solution);
  lp.SetRowBounds(1, 0, 1);
  lp.RestoreBasis(x_capped);  // saved with three columns
  Solution with_w = lp.Solve(10);
  ASSERT_TRUE(with_w.has_solution);
  EXPECT_DOUBLE_EQ(with_w.objective, 2.0);  // w covers all 4 at 0.5

  // A basis that fits nothing is ignored.
  lp.RestoreBasis({});
  lp.RestoreBasis(std::vector<unsigned char>(50, 1));
  lp.SetRowBounds(1, 0, 10);
  Solution ignored = lp.Solve(10);
  ASSERT_TRUE(ignored.has_solution);
  EXPECT_DOUBLE_EQ(ignored.objective, 2.0);
}

}  // namespace
}  // namespace gpuslice::plan::internal
