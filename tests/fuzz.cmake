# The fuzz targets' logic (fuzz/*_target.cc) built with the normal toolchain
# into fuzz_replay_test, which feeds it every file of the seed corpora
# (fuzz/corpus), so `make test` and the sanitizer builds replay them without
# clang or libFuzzer.
if(TARGET fuzz_replay_test)
  target_sources(fuzz_replay_test PRIVATE ${PROJECT_SOURCE_DIR}/fuzz/safetensors_target.cc
                 ${PROJECT_SOURCE_DIR}/fuzz/api_target.cc ${PROJECT_SOURCE_DIR}/fuzz/differential_target.cc
                 ${PROJECT_SOURCE_DIR}/fuzz/decode_differential_target.cc ${PROJECT_SOURCE_DIR}/fuzz/fast_case.cc
                 ${PROJECT_SOURCE_DIR}/fuzz/tensor_files_target.cc)
  target_include_directories(fuzz_replay_test PRIVATE ${PROJECT_SOURCE_DIR}/fuzz)
  target_compile_definitions(fuzz_replay_test PRIVATE CGDR_FUZZ_CORPUS="${PROJECT_SOURCE_DIR}/fuzz/corpus")
endif()
