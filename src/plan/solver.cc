#include "solver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "coin/Cbc_C_Interface.h"
#include "coin/ClpSimplex.hpp"

namespace gpuslice::plan::internal {

int LinearProgram::AddColumn(double cost, double lower, double upper, bool integer) {
  cost_.push_back(cost);
  col_lower_.push_back(lower);
  col_upper_.push_back(upper);
  integer_.push_back(integer);
  return static_cast<int>(cost_.size()) - 1;
}

void LinearProgram::AddRow(std::vector<std::pair<int, double>> terms, double lower, double upper) {
  row_terms_.push_back(std::move(terms));
  row_lower_.push_back(lower);
  row_upper_.push_back(upper);
}

// Column-major (CSC) form of the matrix, as both C interfaces take it.
struct Solver {
  struct Csc {
    std::vector<CoinBigIndex> start;
    std::vector<int> index;
    std::vector<double> value;
  };
  static Csc ToCsc(const LinearProgram& program) {
    const size_t columns = program.cost_.size();
    std::vector<std::vector<std::pair<int, double>>> by_column(columns);
    for (size_t row = 0; row < program.row_terms_.size(); ++row) {
      for (const auto& [column, coefficient] : program.row_terms_[row]) {
        if (coefficient != 0) {
          by_column[static_cast<size_t>(column)].emplace_back(static_cast<int>(row), coefficient);
        }
      }
    }
    Csc csc;
    csc.start.push_back(0);
    for (const auto& entries : by_column) {
      for (const auto& [row, coefficient] : entries) {
        csc.index.push_back(row);
        csc.value.push_back(coefficient);
      }
      csc.start.push_back(static_cast<CoinBigIndex>(csc.index.size()));
    }
    return csc;
  }
};

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

namespace {

// A CLP model holding `program`, quiet.
ClpSimplex* LoadClp(const LinearProgram& program) {
  const Solver::Csc csc = Solver::ToCsc(program);
  auto* model = new ClpSimplex();
  model->setLogLevel(0);
  model->loadProblem(program.columns(), program.rows(), csc.start.data(), csc.index.data(),
                     csc.value.data(), program.col_lower_.data(), program.col_upper_.data(),
                     program.cost_.data(), program.row_lower_.data(), program.row_upper_.data());
  return model;
}

// The outcome of CLP's last solve of `model`.
Solution ReadClp(ClpSimplex& model) {
  Solution solution;
  const int status = model.status();
  if (status == 0) {
    solution.status = Solution::Status::kOptimal;
    solution.has_solution = true;
    solution.values.assign(model.primalColumnSolution(),
                           model.primalColumnSolution() + model.numberColumns());
    solution.duals.assign(model.dualRowSolution(), model.dualRowSolution() + model.numberRows());
    solution.objective = model.objectiveValue();
    solution.bound = solution.objective;
  } else if (status == 1) {
    solution.status = Solution::Status::kInfeasible;
  } else if (status == 3) {
    solution.status = Solution::Status::kStopped;
  }
  return solution;
}

}  // namespace

Solution SolveLp(const LinearProgram& program, double time_limit_s) {
  const auto started = std::chrono::steady_clock::now();
  std::unique_ptr<ClpSimplex> model(LoadClp(program));
  model->setMaximumSeconds(time_limit_s);
  // Dual simplex: the program has many more columns than rows, and it was fastest here.
  model->initialDualSolve();
  Solution solution = ReadClp(*model);
  solution.seconds = SecondsSince(started);
  return solution;
}

IncrementalLp::IncrementalLp(const LinearProgram& program)
    : columns_(program.columns()), rows_(program.rows()) {
  ClpSimplex* model = LoadClp(program);
  // Always perturb: the master programs are highly degenerate, and perturbing cut the dual
  // simplex iterations of branch and price by more than half (measured on plan_scaling_bench).
  model->setPerturbation(50);
  model_ = model;
}

IncrementalLp::~IncrementalLp() { delete static_cast<ClpSimplex*>(model_); }

int IncrementalLp::AddColumn(double cost, double lower, double upper,
                             const std::vector<std::pair<int, double>>& terms) {
  std::vector<int> rows;
  std::vector<double> values;
  for (const auto& [row, value] : terms) {
    if (value == 0) continue;
    rows.push_back(row);
    values.push_back(value);
  }
  static_cast<ClpSimplex*>(model_)->addColumn(static_cast<int>(rows.size()), rows.data(),
                                              values.data(), lower, upper, cost);
  columns_added_ = true;
  return columns_++;
}

void IncrementalLp::FixAtZero(int column) {
  auto* model = static_cast<ClpSimplex*>(model_);
  if (model->columnUpper()[column] == 0) return;
  model->setColumnBounds(column, 0, 0);
  bounds_changed_ = true;
}

std::vector<double> IncrementalLp::ReducedCosts() const {
  auto* model = static_cast<ClpSimplex*>(model_);
  return std::vector<double>(model->dualColumnSolution(), model->dualColumnSolution() + columns_);
}

std::vector<unsigned char> IncrementalLp::Basis() const {
  auto* model = static_cast<ClpSimplex*>(model_);
  if (model->statusArray() == nullptr) return {};
  return std::vector<unsigned char>(model->statusArray(), model->statusArray() + columns_ + rows_);
}

void IncrementalLp::RestoreBasis(const std::vector<unsigned char>& basis) {
  auto* model = static_cast<ClpSimplex*>(model_);
  const size_t rows = static_cast<size_t>(rows_);
  if (basis.size() < rows || basis.size() - rows > static_cast<size_t>(columns_) ||
      model->statusArray() == nullptr) {
    return;
  }
  const size_t then = basis.size() - rows;
  std::vector<unsigned char> status(static_cast<size_t>(columns_) + rows);
  std::copy(basis.begin(), basis.begin() + static_cast<std::ptrdiff_t>(then), status.begin());
  // Columns added since: nonbasic at their lower bound (ClpSimplex::atLowerBound = 3).
  std::fill(status.begin() + static_cast<std::ptrdiff_t>(then), status.begin() + columns_,
            static_cast<unsigned char>(3));
  std::copy(basis.begin() + static_cast<std::ptrdiff_t>(then), basis.end(),
            status.begin() + columns_);
  model->copyinStatus(status.data());
  bounds_changed_ = true;
}

void IncrementalLp::SetRowBounds(int row, double lower, double upper) {
  auto* model = static_cast<ClpSimplex*>(model_);
  if (model->rowLower()[row] == lower && model->rowUpper()[row] == upper) return;
  model->setRowBounds(row, lower, upper);
  bounds_changed_ = true;
}

Solution IncrementalLp::Solve(double time_limit_s) {
  const auto started = std::chrono::steady_clock::now();
  auto* model = static_cast<ClpSimplex*>(model_);
  model->setMaximumSeconds(std::max(time_limit_s, 0.01));
  if (!solved_) {
    model->dual();
    solved_ = true;
  } else if (columns_added_) {
    model->primal(0);
  } else if (bounds_changed_) {
    model->dual(0);
  }
  columns_added_ = bounds_changed_ = false;
  Solution solution = ReadClp(*model);
  solution.seconds = SecondsSince(started);
  return solution;
}

Solution SolveMip(const LinearProgram& program, double time_limit_s, const MipOptions& options) {
  const double cutoff = options.cutoff;
  const auto started = std::chrono::steady_clock::now();
  Solution solution;
  const Solver::Csc csc = Solver::ToCsc(program);
  Cbc_Model* model = Cbc_newModel();
  Cbc_loadProblem(model, program.columns(), program.rows(), csc.start.data(), csc.index.data(),
                  csc.value.data(), program.col_lower_.data(), program.col_upper_.data(),
                  program.cost_.data(), program.row_lower_.data(), program.row_upper_.data());
  for (int column = 0; column < program.columns(); ++column) {
    if (program.integer_[static_cast<size_t>(column)]) Cbc_setInteger(model, column);
  }
  Cbc_setLogLevel(model, 0);
  Cbc_setMaximumSeconds(model, std::max(time_limit_s, 0.01));
  Cbc_setParameter(model, "threads", "0");
  if (!options.preprocess) Cbc_setParameter(model, "preprocess", "off");
  if (!options.feasibility_pump) Cbc_setParameter(model, "feas", "off");
  Cbc_setAllowableGap(model, 1e-7);
  if (options.relative_gap > 0) Cbc_setAllowableFractionGap(model, options.relative_gap);
  if (cutoff < kInfinity) Cbc_setCutoff(model, cutoff);
  Cbc_solve(model);
  const double* best = Cbc_bestSolution(model);
  if (best != nullptr) {
    solution.has_solution = true;
    solution.values.assign(best, best + program.columns());
    solution.objective = Cbc_getObjValue(model);
  }
  solution.bound = Cbc_getBestPossibleObjValue(model);
  if (Cbc_isProvenOptimal(model)) {
    solution.status = Solution::Status::kOptimal;
    solution.bound = std::max(solution.bound, solution.objective - 1e-9);
  } else if (Cbc_isProvenInfeasible(model)) {
    // Nothing below the cutoff: the cutoff itself is the bound.
    solution.status = Solution::Status::kInfeasible;
    solution.bound = cutoff;
  } else if (Cbc_isSecondsLimitReached(model) || Cbc_isNodeLimitReached(model) ||
             Cbc_isSolutionLimitReached(model)) {
    solution.status = Solution::Status::kStopped;
  }
  Cbc_deleteModel(model);
  solution.seconds = SecondsSince(started);
  return solution;
}

}  // namespace gpuslice::plan::internal
