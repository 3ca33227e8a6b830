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
target_include_directories(emu_ptx_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR})
# kernel_harness.cc names the fatbin and source folders of the kernel suite; these tests load none of them.
target_compile_definitions(emu_ptx_tests PRIVATE
  GPUPOOL_EMU_KERNEL_DIR="${CMAKE_CURRENT_BINARY_DIR}/kernels"
  GPUPOOL_EMU_KERNEL_SRC_DIR="${CMAKE_CURRENT_LIST_DIR}/kernels"
  GPUPOOL_EMU_NUMBA_DIR="${CMAKE_CURRENT_LIST_DIR}/numba")
# The host reference switches the FPU rounding mode: keep the compiler from folding or moving floating-point
# operations across fesetround().
target_compile_options(emu_ptx_tests PRIVATE -frounding-math -Wno-missing-field-initializers)
target_link_libraries(emu_ptx_tests PRIVATE gpupool::emu GTest::gtest_main Threads::Threads)
gtest_discover_tests(emu_ptx_tests DISCOVERY_TIMEOUT 30 PROPERTIES TIMEOUT 300)
