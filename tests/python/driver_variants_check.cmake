# Checks lib/interpose/driver_variants_newer.txt against NVIDIA's own typedefs: the driver tables generated from the
# build's headers plus that list must be exactly those generated from the headers of the CUDA toolkit wheel the
# Python frameworks load (cuda-toolkit, pinned in requirements.txt), and the driver version libcuda.so.1 reports
# must be that toolkit's. Otherwise a cudart of the wheel would ask for an entry point the tables lack, or be given
# an older ABI for it.
#
#   cmake -DGENERATOR=<generate_driver_tables.cmake> -DBUILD_INCLUDE=<dir with cuda.h> -DNEWER_VARIANTS=<list>
#         -DREPORTED=<the driver version libcuda.so.1 reports> -DVENV=<python-venv> -DWORK_DIR=<dir> -P this_file

foreach(var GENERATOR BUILD_INCLUDE NEWER_VARIANTS REPORTED VENV WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "driver_variants_check.cmake: -D${var}=... is required")
  endif()
endforeach()

file(GLOB wheel_typedefs ${VENV}/lib/python*/site-packages/nvidia/cu*/include/cudaTypedefs.h)
list(LENGTH wheel_typedefs found)
if(NOT found EQUAL 1)
  message(FATAL_ERROR "expected one cudaTypedefs.h of the cuda-toolkit wheel under ${VENV}, found ${found}: "
                      "${wheel_typedefs}")
endif()
get_filename_component(wheel_include ${wheel_typedefs} DIRECTORY)

function(cuda_version include out)
  file(STRINGS ${include}/cuda.h line REGEX "^#define CUDA_VERSION [0-9]+")
  string(REGEX MATCH "[0-9]+" version "${line}")
  set(${out} ${version} PARENT_SCOPE)
endfunction()
cuda_version(${BUILD_INCLUDE} build_version)
cuda_version(${wheel_include} wheel_version)
message(STATUS "build headers: CUDA_VERSION ${build_version}; wheel (${wheel_include}): ${wheel_version}")
if(build_version GREATER wheel_version)
  message(STATUS "the build's headers are newer than the wheel's: they, not the list, give the tables; nothing to "
                 "compare")
  return()
endif()

file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(
  COMMAND ${CMAKE_COMMAND} -DCUDA_INCLUDE_DIR=${BUILD_INCLUDE} -DOUTPUT_C=${WORK_DIR}/listed.c
          -DOUTPUT_MAP=${WORK_DIR}/listed.map -DNEWER_VARIANTS=${NEWER_VARIANTS}
          -DOUTPUT_LIST=${WORK_DIR}/listed.txt -P ${GENERATOR}
  RESULT_VARIABLE listed_result)
execute_process(
  COMMAND ${CMAKE_COMMAND} -DCUDA_INCLUDE_DIR=${wheel_include} -DOUTPUT_C=${WORK_DIR}/wheel.c
          -DOUTPUT_MAP=${WORK_DIR}/wheel.map -DOUTPUT_LIST=${WORK_DIR}/wheel.txt -P ${GENERATOR}
  RESULT_VARIABLE wheel_result)
if(NOT listed_result EQUAL 0 OR NOT wheel_result EQUAL 0)
  message(FATAL_ERROR "generate_driver_tables.cmake failed (build headers + list: ${listed_result}; wheel headers: "
                      "${wheel_result})")
endif()

file(STRINGS ${WORK_DIR}/listed.txt listed)
file(STRINGS ${WORK_DIR}/wheel.txt wheel)
set(missing ${wheel})
list(REMOVE_ITEM missing ${listed})
set(extra ${listed})
list(REMOVE_ITEM extra ${wheel})
set(failed 0)
if(missing)
  list(JOIN missing "\n  " text)
  message(SEND_ERROR "variants of CUDA ${wheel_version} that driver_variants_newer.txt lacks "
                     "(name, version, variant):\n  ${text}")
  set(failed 1)
endif()
if(extra)
  list(JOIN extra "\n  " text)
  message(SEND_ERROR "variants of driver_variants_newer.txt that CUDA ${wheel_version} does not have:\n  ${text}")
  set(failed 1)
endif()

if(NOT REPORTED EQUAL wheel_version)
  message(SEND_ERROR "libcuda.so.1 reports driver version ${REPORTED}, the wheel's toolkit is ${wheel_version}: "
                     "add its variants to driver_variants_newer.txt")
  set(failed 1)
endif()
if(failed)
  message(FATAL_ERROR "driver_variants_check: FAILED")
endif()
list(LENGTH wheel count)
message("driver_variants_check: PASSED (${count} variants; driver version ${REPORTED})")
