# The C API driven from C: tests/c_api_test.c is compiled as C (C11, with the
# warnings of the project) and linked with the C++ library.
add_executable(c_api_test ${CMAKE_CURRENT_SOURCE_DIR}/c_api_test.c)
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/c_api_test.c PROPERTIES LANGUAGE C)
set_target_properties(c_api_test PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON LINKER_LANGUAGE CXX)
target_link_libraries(c_api_test PRIVATE cgdr m)
add_test(NAME c_api_test COMMAND c_api_test)
set_tests_properties(c_api_test PROPERTIES LABELS unit TIMEOUT 60)
