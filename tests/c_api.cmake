# The C API driven from C: tests/c_api_test.c is compiled as C (C11, with the
# warnings of the project) and linked with the C++ library: libcgdr.a, and as
# c_api_test_shared with libcgdr.so by the C linker (everything the test calls
# is exported, and the library brings its own C++ runtime).
function(cgdr_c_api_test name library linker_language)
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/c_api_test.c)
  set_target_properties(${name} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON LINKER_LANGUAGE ${linker_language})
  target_link_libraries(${name} PRIVATE ${library} m)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 60)
endfunction()
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/c_api_test.c PROPERTIES LANGUAGE C)
cgdr_c_api_test(c_api_test cgdr CXX)
if(TARGET cgdr_shared)
  cgdr_c_api_test(c_api_test_shared cgdr_shared C)
endif()
