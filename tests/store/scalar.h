// The single value of a one-row, one-column query, for the store's tests; a failed query or any
// other shape of result fails the test and reads as NULL.
#pragma once

#include <string>
#include <vector>

#include "gpuslice/store/database.h"
#include "gtest/gtest.h"

namespace gpuslice::store {

inline Value Scalar(Database& db, const std::string& sql, std::vector<Value> params = {}) {
  absl::StatusOr<Result> result = db.Query(sql, params);
  EXPECT_TRUE(result.ok()) << sql << ": " << result.status();
  if (!result.ok() || result->rows.size() != 1 || result->rows[0].size() != 1) {
    ADD_FAILURE() << sql << ": not one row of one column";
    return Value{};
  }
  return result->rows[0][0];
}

}  // namespace gpuslice::store
