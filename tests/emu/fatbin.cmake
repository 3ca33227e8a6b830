# Fatbin reader tests (lib/emu/fatbin.cc, lib/emu/lz4.cc). Inputs are compiled by the installed nvcc at build
# time, so the tests always check what that nvcc really emits; nothing generated goes into git.
find_program(GPUPOOL_NVCC nvcc HINTS /usr/local/cuda/bin $ENV{CUDA_HOME}/bin)
set(GPUPOOL_FATBIN_DATA_DIR ${CMAKE_CURRENT_BINARY_DIR}/fatbin_data)
set(GPUPOOL_FATBIN_KERNELS ${CMAKE_CURRENT_SOURCE_DIR}/data/kernels.cu)
set(GPUPOOL_FATBIN_INPUTS)

# gpupool_fatbin_input(<file name> <nvcc arguments>...): one nvcc run over data/kernels.cu.
function(gpupool_fatbin_input name)
  set(out ${GPUPOOL_FATBIN_DATA_DIR}/${name})
  list(JOIN ARGN " " flags)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${GPUPOOL_FATBIN_DATA_DIR}
    COMMAND ${GPUPOOL_NVCC} ${ARGN} ${GPUPOOL_FATBIN_KERNELS} -o ${out}
    DEPENDS ${GPUPOOL_FATBIN_KERNELS}
    COMMENT "nvcc ${flags} -> ${name}"
    VERBATIM)
  set(GPUPOOL_FATBIN_INPUTS ${GPUPOOL_FATBIN_INPUTS} ${out} PARENT_SCOPE)
endfunction()

if(GPUPOOL_NVCC)
  gpupool_fatbin_input(default.fatbin -fatbin)                           # sm_75 SASS + zstd compute_75 PTX.
  gpupool_fatbin_input(speed.fatbin -fatbin --compress-mode=speed)       # LZ4 PTX.
  gpupool_fatbin_input(balance.fatbin -fatbin --compress-mode=balance)
  gpupool_fatbin_input(size.fatbin -fatbin --compress-mode=size)         # zstd PTX and SASS.
  gpupool_fatbin_input(none.fatbin -fatbin --compress-mode=none)         # Uncompressed PTX.
  gpupool_fatbin_input(debug.fatbin -fatbin -G)                          # Debug flag, named entries, options.
  gpupool_fatbin_input(lineinfo.fatbin -fatbin -lineinfo)
  gpupool_fatbin_input(rdc.fatbin -fatbin -rdc=true)
  gpupool_fatbin_input(sass_only.fatbin -fatbin -gencode arch=compute_80,code=sm_80)
  gpupool_fatbin_input(multi_ptx.fatbin -fatbin -gencode arch=compute_75,code=compute_75
                       -gencode arch=compute_86,code=compute_86)
  gpupool_fatbin_input(arch_specific.fatbin -fatbin -gencode arch=compute_90a,code=compute_90a
                       -gencode arch=compute_80,code=compute_80)
  gpupool_fatbin_input(family.fatbin -fatbin -gencode arch=compute_100f,code=compute_100f
                       -gencode arch=compute_100a,code=compute_100a -gencode arch=compute_86,code=compute_86)
  gpupool_fatbin_input(kernels.ptx -ptx)
  gpupool_fatbin_input(kernels.cubin -cubin -arch=sm_75)
  add_custom_target(emu_fatbin_inputs DEPENDS ${GPUPOOL_FATBIN_INPUTS})
else()
  message(STATUS "nvcc not found: fatbin tests that read real nvcc output will be skipped")
endif()

add_executable(emu_fatbin_tests fatbin_test.cc)
target_link_libraries(emu_fatbin_tests PRIVATE gpupool::emu GTest::gtest_main)
target_compile_definitions(emu_fatbin_tests PRIVATE GPUPOOL_FATBIN_DATA_DIR="${GPUPOOL_FATBIN_DATA_DIR}"
  GPUPOOL_HAVE_NVCC=$<BOOL:${GPUPOOL_NVCC}>)
if(GPUPOOL_NVCC)
  add_dependencies(emu_fatbin_tests emu_fatbin_inputs)
endif()
gtest_discover_tests(emu_fatbin_tests DISCOVERY_TIMEOUT 30)

# Fuzzing (tests/fuzz/run.sh): registered only when clang++ can build a libFuzzer target here.
find_program(GPUPOOL_CLANGXX clang++)
set(GPUPOOL_FUZZ_USABLE OFF)
if(GPUPOOL_CLANGXX)
  set(probe_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe)
  file(WRITE ${probe_dir}/probe.cc
    "#include <cstddef>\n#include <cstdint>\n"
    "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(
    COMMAND ${GPUPOOL_CLANGXX} -fsanitize=fuzzer,address,undefined ${probe_dir}/probe.cc -o ${probe_dir}/probe
    RESULT_VARIABLE probe_result OUTPUT_QUIET ERROR_QUIET)
  if(probe_result EQUAL 0)
    set(GPUPOOL_FUZZ_USABLE ON)
  endif()
endif()
if(GPUPOOL_FUZZ_USABLE)
  add_test(NAME fuzz_fatbin_and_ptx
    COMMAND ${CMAKE_SOURCE_DIR}/tests/fuzz/run.sh ${CMAKE_CURRENT_BINARY_DIR}/fuzz ${GPUPOOL_FATBIN_DATA_DIR})
  set_tests_properties(fuzz_fatbin_and_ptx PROPERTIES TIMEOUT 900 LABELS fuzz
    ENVIRONMENT "CXX_FUZZ=${GPUPOOL_CLANGXX}")
  # Texture and surface objects on the emulated device (tests/fuzz/texture_fuzz.cc): the whole emulator built with
  # the sanitizers (minutes on two cores), then 30 s of random descriptions and handles.
  add_test(NAME fuzz_texture_objects COMMAND ${CMAKE_SOURCE_DIR}/tests/fuzz/run.sh ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
  set_tests_properties(fuzz_texture_objects PROPERTIES TIMEOUT 1500 LABELS fuzz
    ENVIRONMENT "CXX_FUZZ=${GPUPOOL_CLANGXX};FUZZ_TARGETS=texture;FUZZ_SECONDS=30")
  # Both wire services of a live gp-agent (tests/fuzz/wire_fuzz.cc): the seeds and regressions of tests/fuzz (batches,
  # texture objects, typed frames at a worker's door among them) replayed, 30 s of fuzzing, then no lease, memory or
  # worker left.
  add_test(NAME fuzz_wire_services COMMAND ${CMAKE_SOURCE_DIR}/tests/fuzz/run.sh ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
  set_tests_properties(fuzz_wire_services PROPERTIES TIMEOUT 600 LABELS fuzz RUN_SERIAL TRUE
    ENVIRONMENT "CXX_FUZZ=${GPUPOOL_CLANGXX};FUZZ_TARGETS=wire;FUZZ_SECONDS=30;GPUPOOL_FUZZ_AGENT=$<TARGET_FILE:gp_agent>;GPUPOOL_SCHEMA_DIR=${CMAKE_BINARY_DIR}/lib/schema")
else()
  message(STATUS "clang++ with -fsanitize=fuzzer not available (install clang and libclang-rt-14-dev): "
                 "fuzz_fatbin_and_ptx not registered")
endif()
