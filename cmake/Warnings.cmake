# Warnings are errors for every target of the project (gpuslice_warnings is linked by all of them).
add_library(gpuslice_warnings INTERFACE)
target_compile_options(gpuslice_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
  -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough -Werror)
