// Internal to the planner: a linear program built column by column and solved with COIN-OR's
// CLP (LP relaxation) or CBC (integer program). Single-threaded and deterministic.
#pragma once

#include <utility>
#include <vector>

namespace gpuslice::plan::internal {

inline constexpr double kInfinity = 1e30;

class LinearProgram {
 public:
  // A column with objective coefficient `cost` and bounds; returns its index.
  int AddColumn(double cost, double lower, double upper, bool integer);
  // lower <= sum coefficient * column <= upper.
  void AddRow(std::vector<std::pair<int, double>> terms, double lower, double upper);

  int columns() const { return static_cast<int>(cost_.size()); }
  int rows() const { return static_cast<int>(row_lower_.size()); }

  // The program's data, read by the solvers.
  std::vector<double> cost_, col_lower_, col_upper_;
  std::vector<bool> integer_;
  std::vector<std::vector<std::pair<int, double>>> row_terms_;
  std::vector<double> row_lower_, row_upper_;
};

struct Solution {
  enum class Status { kOptimal, kStopped, kInfeasible, kFailed };
  Status status = Status::kFailed;
  bool has_solution = false;
  std::vector<double> values;
  std::vector<double> duals;  // LP only: one per row (the objective's change per unit of bound)
  double objective = 0;
  double bound = 0;  // proven lower bound on the objective (minimisation)
  double seconds = 0;
};

// An LP kept loaded in CLP so that columns can be added and the program re-solved from the last
// basis (column generation). Rows are fixed at construction.
class IncrementalLp {
 public:
  explicit IncrementalLp(const LinearProgram& program);
  ~IncrementalLp();
  IncrementalLp(const IncrementalLp&) = delete;
  IncrementalLp& operator=(const IncrementalLp&) = delete;

  // Adds a column (continuous); returns its index.
  int AddColumn(double cost, double lower, double upper,
                const std::vector<std::pair<int, double>>& terms);
  // Changes a row's bounds (for branching); the next Solve starts from the current basis.
  void SetRowBounds(int row, double lower, double upper);
  // Fixes a column at zero (reduced-cost fixing); the next Solve starts from the current basis.
  void FixAtZero(int column);
  // The reduced costs of the last solve, one per column.
  std::vector<double> ReducedCosts() const;
  // The basis of the last solve (a status per column, then per row).
  std::vector<unsigned char> Basis() const;
  // Starts the next Solve from `basis` (from Basis(), perhaps before columns were added: those
  // start nonbasic at their lower bound). Ignored when its size does not fit.
  void RestoreBasis(const std::vector<unsigned char>& basis);
  // Re-solves from the current basis (dual simplex after bound changes, primal after new
  // columns; the first call solves from scratch).
  Solution Solve(double time_limit_s);
  int columns() const { return columns_; }

 private:
  void* model_ = nullptr;  // ClpSimplex
  int columns_ = 0;
  int rows_ = 0;
  bool solved_ = false;
  bool bounds_changed_ = false;
  bool columns_added_ = false;
};

// The LP relaxation (integrality ignored).
Solution SolveLp(const LinearProgram& program, double time_limit_s);
struct MipOptions {
  // Only solutions with a smaller objective are sought: kInfeasible then proves that none exists
  // (bound = cutoff), so a known solution of value `cutoff` is optimal.
  double cutoff = kInfinity;
  // > 0: stop as soon as the best solution is within that fraction of CBC's bound.
  double relative_gap = 0;
  // false skips CBC's preprocessing (faster on small feasibility problems).
  bool preprocess = true;
  // false skips the feasibility pump heuristic (measured: slower than it helps on the restricted
  // masters of branch-and-price leaves, whose relaxations are nearly integral).
  bool feasibility_pump = true;
};

// The integer program, with CBC.
Solution SolveMip(const LinearProgram& program, double time_limit_s,
                  const MipOptions& options = {});

}  // namespace gpuslice::plan::internal
