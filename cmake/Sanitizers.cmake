# GPUSLICE_SANITIZE=ON builds everything with ASan + UBSan; any report aborts the test.
if(GPUSLICE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

# GPUSLICE_FUZZ=ON (clang only) instruments everything for libFuzzer with ASan + UBSan and builds
# the harnesses in fuzz/ (target `fuzzers`); scripts/fuzz.sh configures and runs it.
if(GPUSLICE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "GPUSLICE_FUZZ needs clang (CXX=clang++)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
