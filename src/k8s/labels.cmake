target_sources(gpuslice_k8s PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/labels.cc)
