# GPUSLICE_SANITIZE=ON builds everything with ASan + UBSan; any report aborts the test.
if(GPUSLICE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
