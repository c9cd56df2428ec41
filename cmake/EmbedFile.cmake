# gpuslice_embed_file(OUTPUT_CC INPUT_FILE SYMBOL)
# Generates OUTPUT_CC defining `std::string_view SYMBOL()` in namespace gpuslice::embedded that returns
# the bytes of INPUT_FILE, so that data files travel inside the binary (no runtime file needed).
# The file is regenerated whenever INPUT_FILE changes.
function(gpuslice_embed_file output_cc input_file symbol)
  add_custom_command(
    OUTPUT ${output_cc}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${input_file} -DOUTPUT=${output_cc} -DSYMBOL=${symbol}
            -P ${PROJECT_SOURCE_DIR}/cmake/EmbedFileScript.cmake
    DEPENDS ${input_file} ${PROJECT_SOURCE_DIR}/cmake/EmbedFileScript.cmake
    COMMENT "Embedding ${input_file}"
    VERBATIM)
endfunction()
