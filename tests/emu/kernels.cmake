# Kernel tests for the emulated GPU: real CUDA kernels (tests/emu/kernels/*.cu) compiled by nvcc at build time
# into fatbins, loaded by emu_kernel_tests through gpupool::emu::Device and checked against host references.
#
# Each kernel file gives four fatbins, one per variant the test is parameterised over:
#   <name>.default.fatbin  nvcc defaults: sm_75 SASS + compute_75 PTX compressed with zstd
#   <name>.lz4.fatbin      --compress-mode=speed: PTX compressed with LZ4
#   <name>.none.fatbin     --compress-mode=none: PTX stored uncompressed
#   <name>.debug.fatbin    -G: unoptimised debug PTX (generic loads/stores, .loc/.file, debug sections)
# plus basic.sm80.fatbin, SASS-only for sm_80 with no PTX, which the device must refuse with kNoBinaryForGpu.

find_program(GPUPOOL_NVCC nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
if(NOT GPUPOOL_NVCC)
  message(STATUS "nvcc not found: emu_kernel_tests not built")
  return()
endif()

find_package(GTest REQUIRED)
include(GoogleTest)

set(GPUPOOL_EMU_KERNEL_SRC_DIR ${CMAKE_CURRENT_LIST_DIR}/kernels)
set(GPUPOOL_EMU_KERNEL_OUT_DIR ${CMAKE_CURRENT_BINARY_DIR}/kernels)
file(MAKE_DIRECTORY ${GPUPOOL_EMU_KERNEL_OUT_DIR})

set(GPUPOOL_EMU_KERNELS
  basic
  matmul
  reduce
  atomics
  warp
  params
  recursion
  printf
  math
  convert
  int64
  bits
  dot
  errors
  barrier
  half_atomics
  packed
  packed_sm90
  tensor
  tensor_fp8
  texture)

# Variant name -> extra nvcc flags. Keep in sync with kVariants in kernel_harness.h.
set(GPUPOOL_EMU_VARIANT_default "")
set(GPUPOOL_EMU_VARIANT_lz4 --compress-mode=speed)
set(GPUPOOL_EMU_VARIANT_none --compress-mode=none)
set(GPUPOOL_EMU_VARIANT_debug -G)
set(GPUPOOL_EMU_VARIANTS default lz4 none debug)

# Kernels that need a newer GPU than nvcc's default (sm_75) name their architecture here: nvcc -arch=sm_XX gives
# that SASS and compute_XX PTX, which the test device (compute capability 9.0) runs.
# Tensor cores: bf16, tf32, f64 and the m16n8 mma shapes need sm_80.
set(GPUPOOL_EMU_KERNEL_ARCH_tensor sm_80)
# fp8 mma needs sm_89 and griddepcontrol sm_90.
set(GPUPOOL_EMU_KERNEL_ARCH_tensor_fp8 sm_90)
set(GPUPOOL_EMU_KERNEL_ARCH_packed sm_80)
set(GPUPOOL_EMU_KERNEL_ARCH_packed_sm90 sm_90)

set(GPUPOOL_EMU_KERNEL_HEADERS ${GPUPOOL_EMU_KERNEL_SRC_DIR}/kernel_types.h)
# Kernels that #include another kernel file or a header of their own depend on it too.
set(GPUPOOL_EMU_KERNEL_INCLUDES_packed_sm90 ${GPUPOOL_EMU_KERNEL_SRC_DIR}/packed.cu)
set(GPUPOOL_EMU_KERNEL_INCLUDES_tensor ${GPUPOOL_EMU_KERNEL_SRC_DIR}/mma_kernel.h)
set(GPUPOOL_EMU_KERNEL_INCLUDES_tensor_fp8 ${GPUPOOL_EMU_KERNEL_SRC_DIR}/mma_kernel.h)
set(GPUPOOL_EMU_FATBINS)
foreach(kernel IN LISTS GPUPOOL_EMU_KERNELS)
  set(src ${GPUPOOL_EMU_KERNEL_SRC_DIR}/${kernel}.cu)
  foreach(variant IN LISTS GPUPOOL_EMU_VARIANTS)
    set(out ${GPUPOOL_EMU_KERNEL_OUT_DIR}/${kernel}.${variant}.fatbin)
    set(arch)
    if(GPUPOOL_EMU_KERNEL_ARCH_${kernel})
      set(arch -arch=${GPUPOOL_EMU_KERNEL_ARCH_${kernel}})
    endif()
    add_custom_command(
      OUTPUT ${out}
      COMMAND ${GPUPOOL_NVCC} -fatbin ${arch} ${GPUPOOL_EMU_VARIANT_${variant}} -o ${out} ${src}
      DEPENDS ${src} ${GPUPOOL_EMU_KERNEL_HEADERS} ${GPUPOOL_EMU_KERNEL_INCLUDES_${kernel}}
      COMMENT "nvcc -fatbin (${variant}) ${kernel}.cu"
      VERBATIM)
    list(APPEND GPUPOOL_EMU_FATBINS ${out})
  endforeach()
endforeach()

# SASS only, no PTX: nothing the emulator can run.
set(sass_only ${GPUPOOL_EMU_KERNEL_OUT_DIR}/basic.sm80.fatbin)
add_custom_command(
  OUTPUT ${sass_only}
  COMMAND ${GPUPOOL_NVCC} -fatbin -gencode arch=compute_80,code=sm_80 -o ${sass_only}
          ${GPUPOOL_EMU_KERNEL_SRC_DIR}/basic.cu
  DEPENDS ${GPUPOOL_EMU_KERNEL_SRC_DIR}/basic.cu ${GPUPOOL_EMU_KERNEL_HEADERS}
  COMMENT "nvcc -fatbin (sm_80 SASS only) basic.cu"
  VERBATIM)
list(APPEND GPUPOOL_EMU_FATBINS ${sass_only})

add_custom_target(emu_kernel_fatbins DEPENDS ${GPUPOOL_EMU_FATBINS})

add_executable(emu_kernel_tests
  kernel_test.cc
  kernel_math_test.cc
  kernel_error_test.cc
  kernel_numba_test.cc
  kernel_packed_test.cc
  kernel_tensor_test.cc
  kernel_texture_test.cc
  device_memory_test.cc
  device_queue_test.cc
  kernel_harness.cc)
add_dependencies(emu_kernel_tests emu_kernel_fatbins)
gpupool_emu_harness_test(emu_kernel_tests)
# Discovery at test time, so building never runs the binary. The interpreter is slow: a generous timeout.
gtest_discover_tests(emu_kernel_tests DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)
