# GPUSLICE_SANITIZE=ON builds everything with ASan + UBSan; any report aborts the test.
if(GPUSLICE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

# GPUSLICE_TSAN=ON builds everything with ThreadSanitizer; scripts/test.sh --tsan builds and runs
# the concurrency-heavy tests with it (any report fails the test: TSAN_OPTIONS there).
if(GPUSLICE_TSAN)
  if(GPUSLICE_SANITIZE)
    message(FATAL_ERROR "GPUSLICE_TSAN and GPUSLICE_SANITIZE cannot be combined")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
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
