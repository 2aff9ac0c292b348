# CLI tests (tools/cli): tests/cli_test.sh drives the built `cgdr` binary, one
# ctest per section so a failure names what broke. Label: cli.
foreach(section usage run_and_check layouts_and_dtypes bad_inputs hostile plan profile demo golden golden_bad_inputs
                serving serving_bad_inputs kda)
  add_test(NAME cli_${section}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli_test.sh $<TARGET_FILE:cgdr_cli> ${section})
  set_tests_properties(cli_${section} PROPERTIES LABELS cli TIMEOUT 300)
endforeach()

# The command line's conformance matrix (issue 24): every flag of run and
# plan, every case key and tensor, every dtype against the FP64 reference.
# Python (numpy, torch 1.13, pytest: Debian's, as python_tests) writes the
# cases and judges the results; it needs the Python build's interpreter.
if(CGDR_PYTHON)
  if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
  add_test(NAME cli_conformance
           COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/cli_conformance_test.py)
  set_tests_properties(cli_conformance PROPERTIES
    LABELS cli TIMEOUT 600
    ENVIRONMENT "CGDR_CLI=$<TARGET_FILE:cgdr_cli>;PYTHONPATH=${PROJECT_SOURCE_DIR}/python/tests;PYTHONDONTWRITEBYTECODE=1"
    PASS_REGULAR_EXPRESSION "[0-9]+ passed"
    FAIL_REGULAR_EXPRESSION "[0-9]+ (failed|error)|skipped")
endif()

# Every listed mutation still applies to the sources (tools/mutants): an edit
# that moves a targeted line fails here, not hours into `make mutants`.
find_program(CGDR_PYTHON3_FOR_MUTANTS python3)
if(CGDR_PYTHON3_FOR_MUTANTS)
  add_test(NAME mutants_apply COMMAND ${CGDR_PYTHON3_FOR_MUTANTS} ${PROJECT_SOURCE_DIR}/tools/mutants/run.py --check)
  set_tests_properties(mutants_apply PROPERTIES LABELS cli TIMEOUT 120
                       ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1" PASS_REGULAR_EXPRESSION "mutations apply")
endif()
