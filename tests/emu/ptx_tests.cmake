# Tests of the emulator's instruction semantics on hand-written and generated PTX (no nvcc needed): loads and
# conversions into wider registers, and the conformance suite (tests/emu/conformance), which runs every
# instruction x type x modifier the emulator accepts on edge values against a host reference written from the
# PTX ISA.
find_package(GTest REQUIRED)
include(GoogleTest)

add_executable(emu_ptx_tests
  ${CMAKE_CURRENT_LIST_DIR}/load_extension_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/conformance/conformance_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/kernel_harness.cc)
# kernel_harness.cc names the kernel suite's folders; these tests load none of them.
gpupool_emu_harness_test(emu_ptx_tests)
gtest_discover_tests(emu_ptx_tests DISCOVERY_TIMEOUT 30 PROPERTIES TIMEOUT 300)
