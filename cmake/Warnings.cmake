# Warnings are errors for every target of the project (gpuslice_warnings is linked by all of them).
add_library(gpuslice_warnings INTERFACE)
target_compile_options(gpuslice_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
  -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough)
# Errors for the compiler the project builds with (GCC); the clang builds (fuzzing) warn only.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(gpuslice_warnings INTERFACE -Werror)
endif()
# GCC 12 reports false -Wrestrict errors inside std::string at -O3 (GCC bug 105329).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(gpuslice_warnings INTERFACE -Wno-restrict)
endif()
