# Included from tests/CMakeLists.txt: CMAKE_CURRENT_SOURCE_DIR is tests/.
# Node labels for Node Feature Discovery (pure) and the atomic feature-file write.
target_sources(k8s_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/k8s/labels_test.cc)
# The deployment manifests (deploy/kubernetes): parsed, and every gpuslice flag they pass checked
# against `gpuslice <subcommand> --help` of the built binary.
gpuslice_test(k8s_manifests_test k8s/manifests_test.cc)
target_link_libraries(k8s_manifests_test PRIVATE yaml-cpp)
target_compile_definitions(k8s_manifests_test PRIVATE GPUSLICE_BINARY="$<TARGET_FILE:gpuslice>")
add_dependencies(k8s_manifests_test gpuslice)
