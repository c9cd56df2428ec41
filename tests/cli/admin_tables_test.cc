// The admin commands' default output (src/cli/admin_tables.h): tables read from the API's JSON.
#include "admin_tables.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace gpuslice::cli {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(AdminTables, TenantsOneRowEachWithQuotasAndLimits) {
  const json tenants = json::parse(R"([
    {"name": "team-a", "priority": 5, "may_take_full": true, "max_gib": 80,
     "max_slices": {"medium": 1, "small": 4}},
    {"name": "ml", "priority": 0, "may_take_full": false, "max_gib": 0, "max_slices": {}}
  ])");
  EXPECT_EQ(TenantsTable(tenants),
            "TENANT  PRIORITY  WHOLE GPU  MAX GIB  QUOTAS\n"
            "team-a         5  yes             80  medium=1 small=4\n"
            "ml             0  no               -  -\n");
}

TEST(AdminTables, ClassesSayWhatTheyHandOutAndForHowLong) {
  const json classes = json::parse(R"([
    {"name": "small", "mig": {"A100-40GB": "1g.5gb", "H100-80GB": "1g.10gb", "H200": "1g.18gb",
                              "H100-94GB": "1g.10gb"},
     "share_milli": 0, "vram_mib": 0, "full": false, "max_lease_s": 28800,
     "idle_timeout_s": 3600},
    {"name": "quarter", "mig": {}, "share_milli": 250, "vram_mib": 8192, "full": false,
     "max_lease_s": 5400, "idle_timeout_s": 0},
    {"name": "full", "mig": {}, "share_milli": 0, "vram_mib": 0, "full": true,
     "max_lease_s": 604800, "idle_timeout_s": 0}
  ])");
  EXPECT_EQ(
      ClassesTable(classes),
      "CLASS    WHAT                                                         MAX LEASE  "
      "IDLE RECLAIM\n"
      "small    MIG 1g.10gb (2 models), 1g.18gb (1 model), 1g.5gb (1 model)  8h         1h\n"
      "quarter  share 250/1000, 8192 MiB                                     1h30m      never\n"
      "full     whole GPU                                                    1w         never\n");
}

TEST(AdminTables, AClassOfManyProfilesIsSummedUpBySize) {
  const json classes = json::parse(R"([
    {"name": "small", "mig": {"A": "1g.5gb", "B": "1g.10gb", "C": "1g.12gb", "D": "1g.18gb",
                              "E": "1g.10gb"}, "max_lease_s": 3600, "idle_timeout_s": 0}
  ])");
  EXPECT_EQ(ClassesTable(classes),
            "CLASS  WHAT                      MAX LEASE  IDLE RECLAIM\n"
            "small  MIG 1g.* on 5 GPU models  1h         never\n");
}

TEST(AdminTables, EmptyListsSaySo) {
  EXPECT_EQ(TenantsTable(json::array()), "no tenants\n");
  EXPECT_EQ(ClassesTable(json::array()), "no classes\n");
  // Not what the API sends: still a line, never a crash.
  EXPECT_EQ(TenantsTable(json::object()), "no tenants\n");
  EXPECT_THAT(ClassesTable(json::array({json{{"name", 3}}})), HasSubstr("?"));
}

}  // namespace
}  // namespace gpuslice::cli
