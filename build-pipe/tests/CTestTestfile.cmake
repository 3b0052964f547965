# CMake generated Testfile for 
# Source directory: /work/main/tests
# Build directory: /work/main/build-pipe/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[unit.test_pipeline_spec]=] "/work/main/build-pipe/tests/test_pipeline_spec")
set_tests_properties([=[unit.test_pipeline_spec]=] PROPERTIES  ENVIRONMENT "SLUICE_SOURCE_DIR=/work/main;CMOCKA_MESSAGE_OUTPUT=stdout" WORKING_DIRECTORY "/work/main/build-pipe/tests" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;9;add_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[unit.test_pipeline_template]=] "/work/main/build-pipe/tests/test_pipeline_template")
set_tests_properties([=[unit.test_pipeline_template]=] PROPERTIES  ENVIRONMENT "SLUICE_SOURCE_DIR=/work/main;CMOCKA_MESSAGE_OUTPUT=stdout" WORKING_DIRECTORY "/work/main/build-pipe/tests" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;9;add_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[unit.test_pipeline_yaml]=] "/work/main/build-pipe/tests/test_pipeline_yaml")
set_tests_properties([=[unit.test_pipeline_yaml]=] PROPERTIES  ENVIRONMENT "SLUICE_SOURCE_DIR=/work/main;CMOCKA_MESSAGE_OUTPUT=stdout" WORKING_DIRECTORY "/work/main/build-pipe/tests" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;9;add_test;/work/main/tests/CMakeLists.txt;0;")
