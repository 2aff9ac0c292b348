# CLI tests (tools/cli): tests/cli_test.sh drives the built `cgdr` binary, one
# ctest per section so a failure names what broke. Label: cli.
foreach(section usage run_and_check layouts_and_dtypes bad_inputs hostile plan profile demo golden golden_bad_inputs)
  add_test(NAME cli_${section}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli_test.sh $<TARGET_FILE:cgdr_cli> ${section})
  set_tests_properties(cli_${section} PROPERTIES LABELS cli TIMEOUT 300)
endforeach()
