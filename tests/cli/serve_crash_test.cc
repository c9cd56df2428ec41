// The crash test of gpuslice serve (kill -9 under load) is being written.
#include <gtest/gtest.h>
