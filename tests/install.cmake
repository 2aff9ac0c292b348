# The installed package from a consumer's side (issue 23): install_consumers.sh
# installs this build into a temporary prefix and builds and runs examples/
# against it alone. Label: install (not run by the sanitizer builds).
if(TARGET cgdr_shared)
  add_test(NAME install_consumers
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install_consumers.sh ${PROJECT_BINARY_DIR} ${CMAKE_C_COMPILER}
                   ${CMAKE_CXX_COMPILER})
  set_tests_properties(install_consumers PROPERTIES LABELS install TIMEOUT 300)
endif()
