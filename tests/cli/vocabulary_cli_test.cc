// One CLI vocabulary (issue 25, item 6), through the built binary: a mistyped command or option
// is named with the closest ones ("did you mean"), exits 2, and prints no CLI11 boilerplate.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "run_gpuslice.h"

namespace gpuslice::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunGpuslice;

TEST(Vocabulary, AMistypedCommandSuggestsTheClosest) {
  const testing::CommandResult top = RunGpuslice("relase 3");
  EXPECT_EQ(top.exit_code, 2);
  EXPECT_THAT(top.output, HasSubstr("unknown command 'relase' for 'gpuslice'; did you mean "
                                    "'release' or 'lease'?"));
  EXPECT_THAT(top.output, HasSubstr("Run 'gpuslice --help' for its commands."));
  const testing::CommandResult nested = RunGpuslice("admin tenat ml");
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_THAT(nested.output,
              HasSubstr("unknown command 'tenat' for 'gpuslice admin'; did you mean 'tenant' or "
                        "'tenants'?"));
  const testing::CommandResult sim = RunGpuslice("sim creat m.json 1xH100-80GB");
  EXPECT_THAT(sim.output, HasSubstr("did you mean 'create'?"));
}

TEST(Vocabulary, AFarWordIsNamedWithoutAGuess) {
  const testing::CommandResult result = RunGpuslice("frobnicate");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.output, HasSubstr("unknown command 'frobnicate' for 'gpuslice'\n"));
  EXPECT_THAT(result.output, Not(HasSubstr("did you mean")));
}

TEST(Vocabulary, AMistypedOptionSuggestsTheCommandsOwn) {
  const testing::CommandResult gpus = RunGpuslice("gpus --jsn");
  EXPECT_EQ(gpus.exit_code, 2);
  EXPECT_THAT(gpus.output,
              HasSubstr("unknown option '--jsn' for 'gpuslice gpus'; did you mean '--json'?"));
  const testing::CommandResult acquire = RunGpuslice("acquire --clas=small --purpose x");
  EXPECT_EQ(acquire.exit_code, 2);
  EXPECT_THAT(acquire.output, HasSubstr("unknown option '--clas' for 'gpuslice acquire'; did you "
                                        "mean '--class'"));
}

}  // namespace
}  // namespace gpuslice::cli
