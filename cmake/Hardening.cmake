# Hardening for everything gpupool builds (its libraries, tools, tests and benchmarks): a stack protector, glibc's
# checked string and memory functions, position-independent executables, and a relocation table made read-only
# after start (full RELRO, every symbol bound at load). An agent's session workers run tenants' inputs through
# this code; these turn a class of overflows into an abort. tests/hardening/hardening_test.sh checks the results
# with readelf.
option(GPUPOOL_HARDENING "Build with -fstack-protector-strong, _FORTIFY_SOURCE=3, PIE and full RELRO" ON)
if(NOT GPUPOOL_HARDENING)
  return()
endif()
include(CheckPIESupported)
check_pie_supported(LANGUAGES C CXX)  # With CMAKE_POSITION_INDEPENDENT_CODE: executables link with -pie.
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fstack-protector-strong>")
# _FORTIFY_SOURCE needs the optimiser (no Debug); the sanitizers check the same accesses their own way. -U first:
# some compilers define a level of their own.
if(NOT GPUPOOL_SANITIZE)
  add_compile_options("$<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<NOT:$<CONFIG:Debug>>>:-U_FORTIFY_SOURCE;-D_FORTIFY_SOURCE=3>")
endif()
add_link_options("LINKER:-z,relro" "LINKER:-z,now")
