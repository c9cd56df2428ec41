# Sourced by bench/shim_overhead.sh and bench/shim_shares.sh, from the repository's root.
# build_shim_tools BUILD_DIR: builds the interposer, the probe and the test CUDA library in the
# CMake build tree BUILD_DIR (configured first when it is not one yet); on failure prints the end
# of the build's output and returns 1.
build_shim_tools() {
  local build_dir=$1 built
  if [[ ! -f "$build_dir/build.ninja" && ! -f "$build_dir/Makefile" ]]; then
    scripts/build.sh "$build_dir" >/dev/null
  fi
  built=$(cmake --build "$build_dir" --target gpuslice_cuda cuda_probe gpuslice_fake_cuda 2>&1) ||
    { tail -20 <<<"$built" >&2; return 1; }
}
