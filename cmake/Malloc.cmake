# gpuslice_malloc: links jemalloc into the programs that serve (the gpuslice binary, the load
# benchmark) when Debian's libjemalloc-dev is installed. Under 32 concurrent API clients glibc's
# malloc took about a quarter of the service's CPU, and jemalloc cut the CPU per call by about
# 20% (docs/BENCHMARKS.md, allocation service). Without the package the build links glibc's
# malloc and works the same. Never with the sanitizers, which bring their own allocator.
option(GPUSLICE_JEMALLOC "Link gpuslice and load_bench with jemalloc when it is installed" ON)
add_library(gpuslice_malloc INTERFACE)
if(GPUSLICE_JEMALLOC AND NOT GPUSLICE_SANITIZE AND NOT GPUSLICE_TSAN)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(JEMALLOC QUIET IMPORTED_TARGET jemalloc)
  if(JEMALLOC_FOUND)
    target_link_libraries(gpuslice_malloc INTERFACE PkgConfig::JEMALLOC)
    message(STATUS "malloc: jemalloc ${JEMALLOC_VERSION}")
  else()
    message(STATUS "malloc: glibc's (install libjemalloc-dev for jemalloc)")
  endif()
endif()
