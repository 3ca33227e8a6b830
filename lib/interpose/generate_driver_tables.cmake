# Generates the driver's symbol tables from the CUDA toolkit headers (run at build time with cmake -P):
#
#   cmake -DCUDA_INCLUDE_DIR=<dir with cuda.h> -DOUTPUT_C=<file.c> -DOUTPUT_MAP=<file.map>
#         [-DNEWER_VARIANTS=<driver_variants_newer.txt>] [-DOUTPUT_LIST=<file.txt>] -P this_file
#
# Inputs: every `PFN_<name>_v<version>[_ptds|_ptsz]` typedef of cudaTypedefs.h (and cudaProfilerTypedefs.h), the
# CUresult enum of cuda.h, and the variants of NEWER_VARIANTS that those typedefs lack (variants of CUDA releases
# newer than the headers, each taken as if its typedef were there; see that file). Outputs:
#   OUTPUT_C    C source with
#               - one weak stub per ABI variant (cuMemAlloc, cuMemAlloc_v2, cuMemcpyHtoD_v2_ptds, ...) that answers
#                 CUDA_ERROR_NOT_SUPPORTED; a hand-written definition of the same name replaces it at link time;
#               - the (name, version, per-thread?) -> variant table that cuGetProcAddress searches;
#               - the CUresult names, for cuGetErrorName;
#               - each name's API family (its doxygen group in cuda.h or cudaProfiler.h) and each variant's stub
#                 address, from which driver_coverage prints the README's coverage table: a variant whose
#                 address is not its stub's has a hand-written implementation;
#               - the variant names only NEWER_VARIANTS gave (the headers' stubs/libcuda.so cannot export them).
#   OUTPUT_MAP  the linker version script: exactly those variant names are exported, everything else is local.
#   OUTPUT_LIST (optional) one line per (name, version, variant): "cuLaunchHostFunc 13010 cuLaunchHostFunc_v2",
#               sorted, to compare the tables of two toolkits (tests/interpose).
#
# How a typedef names its variant. For one <name>, sort the versions of its legacy typedefs (no suffix): the first
# is the function <name>, the k-th (k >= 2) is <name>_v<k>. Example: PFN_cuCtxCreate_v2000 -> cuCtxCreate,
# _v3020 -> cuCtxCreate_v2, _v11040 -> cuCtxCreate_v3, _v12050 -> cuCtxCreate_v4. A per-thread typedef
# PFN_<name>_v<P>_ptds (or _ptsz) names the legacy variant in force at version P plus that suffix:
# PFN_cuMemcpyHtoD_v7000_ptds -> cuMemcpyHtoD_v2_ptds, because cuMemcpyHtoD_v3020 -> cuMemcpyHtoD_v2.
# tests/interpose checks every generated name against the toolkit's stub libcuda.so, which exports them all.

cmake_minimum_required(VERSION 3.20)

foreach(var CUDA_INCLUDE_DIR OUTPUT_C OUTPUT_MAP)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "generate_driver_tables.cmake: -D${var}=... is required")
  endif()
endforeach()

set(typedef_headers ${CUDA_INCLUDE_DIR}/cudaTypedefs.h)
if(EXISTS ${CUDA_INCLUDE_DIR}/cudaProfilerTypedefs.h)
  list(APPEND typedef_headers ${CUDA_INCLUDE_DIR}/cudaProfilerTypedefs.h)
endif()

# --- Collect (name, version, suffix) from the typedefs. ---------------------------------------------------------
set(names)
foreach(header IN LISTS typedef_headers)
  file(READ ${header} text)
  string(REGEX MATCHALL "\\*[ \t]*PFN_[A-Za-z0-9]+_v[0-9]+(_ptds|_ptsz)?[ \t]*\\)" typedefs "${text}")
  foreach(typedef IN LISTS typedefs)
    string(REGEX MATCH "PFN_([A-Za-z0-9]+)_v([0-9]+)(_ptds|_ptsz)?" unused "${typedef}")
    set(name ${CMAKE_MATCH_1})
    set(version ${CMAKE_MATCH_2})
    set(suffix "${CMAKE_MATCH_3}")
    list(APPEND names ${name})
    if(suffix STREQUAL "")
      list(APPEND legacy_${name} ${version})
    else()
      if(DEFINED suffix_${name} AND NOT suffix_${name} STREQUAL suffix)
        message(FATAL_ERROR "${name} has both _ptds and _ptsz typedefs: the table cannot express that")
      endif()
      set(suffix_${name} ${suffix})
      list(APPEND pt_${name} ${version})
    endif()
  endforeach()
endforeach()

# --- Variants of newer CUDA releases the headers lack. ------------------------------------------------------------
if(DEFINED NEWER_VARIANTS AND NOT NEWER_VARIANTS STREQUAL "")
  file(STRINGS ${NEWER_VARIANTS} newer_lines)
  set(line_number 0)
  foreach(line IN LISTS newer_lines)
    math(EXPR line_number "${line_number} + 1")
    if(line MATCHES "^[ \t]*(#|$)")
      continue()
    endif()
    if(NOT line MATCHES "^(cu[A-Za-z0-9]+)[ \t]+([0-9]+)[ \t]+(-|_ptds|_ptsz)[ \t]*(.*)$")
      message(FATAL_ERROR "${NEWER_VARIANTS}:${line_number}: expected 'name version -|_ptds|_ptsz [family]': ${line}")
    endif()
    set(name ${CMAKE_MATCH_1})
    set(version ${CMAKE_MATCH_2})
    set(suffix "${CMAKE_MATCH_3}")
    string(STRIP "${CMAKE_MATCH_4}" family_title)
    if(NOT family_title STREQUAL "")
      set(newer_family_${name} "${family_title}")
    endif()
    if(suffix STREQUAL "-")
      if(version IN_LIST legacy_${name})
        continue()  # The headers have it (a build against that release or a newer one).
      endif()
      list(APPEND legacy_${name} ${version})
      set(newer_legacy_${name}_${version} 1)
    else()
      if(DEFINED suffix_${name} AND NOT suffix_${name} STREQUAL suffix)
        message(FATAL_ERROR "${NEWER_VARIANTS}:${line_number}: ${name} has ${suffix_${name}} typedefs, not ${suffix}")
      endif()
      if(version IN_LIST pt_${name})
        continue()
      endif()
      set(suffix_${name} ${suffix})
      list(APPEND pt_${name} ${version})
      set(newer_pt_${name}_${version} 1)
    endif()
    list(APPEND names ${name})
  endforeach()
endif()

list(REMOVE_DUPLICATES names)
# Byte order, the order strcmp() sees: names are [A-Za-z0-9] only.
list(SORT names COMPARE STRING)
list(LENGTH names name_count)
if(name_count LESS 100)
  message(FATAL_ERROR "only ${name_count} PFN_ typedefs found in ${typedef_headers}: unexpected header layout")
endif()

# --- Families: the doxygen group ("\\defgroup CUDA_MEM Memory Management") each function is declared in. -----
set(family_titles)
foreach(header cuda.h cudaProfiler.h)
  if(NOT EXISTS ${CUDA_INCLUDE_DIR}/${header})
    continue()
  endif()
  file(STRINGS ${CUDA_INCLUDE_DIR}/${header} lines REGEX "\\\\defgroup|CUDAAPI[ \t]+cu[A-Za-z0-9_]+[ \t]*\\(")
  set(current -1)
  foreach(line IN LISTS lines)
    if(line MATCHES "\\\\defgroup[ \t]+[A-Z_]+[ \t]+(.*)$")
      string(STRIP "${CMAKE_MATCH_1}" title)
      list(FIND family_titles "${title}" current)
      if(current EQUAL -1)
        list(LENGTH family_titles current)
        list(APPEND family_titles "${title}")
      endif()
    elseif(line MATCHES "CUDAAPI[ \t]+(cu[A-Za-z0-9_]+)[ \t]*\\(" AND current GREATER -1)
      # Declared under its plain name, or under a variant's (cuCtxCreate_v4): both name the typedefs' name.
      set(declared ${CMAKE_MATCH_1})
      set(plain ${declared})
      if(plain MATCHES "_(ptds|ptsz)$")
        string(REGEX REPLACE "_(ptds|ptsz)$" "" plain "${plain}")
      endif()
      if(plain MATCHES "_v[0-9]+$")
        string(REGEX REPLACE "_v[0-9]+$" "" plain "${plain}")
      endif()
      foreach(fn ${declared} ${plain})
        if(NOT DEFINED family_${fn})
          set(family_${fn} ${current})
        endif()
      endforeach()
    endif()
  endforeach()
endforeach()
list(LENGTH family_titles family_count)
if(family_count LESS 20)
  message(FATAL_ERROR "only ${family_count} doxygen groups found in cuda.h: unexpected header layout")
endif()
# Names the headers do not declare take the family their NEWER_VARIANTS line gives (a new group if need be).
foreach(name IN LISTS names)
  if(NOT DEFINED family_${name} AND DEFINED newer_family_${name})
    list(FIND family_titles "${newer_family_${name}}" family_${name})
    if(family_${name} EQUAL -1)
      list(LENGTH family_titles family_${name})
      list(APPEND family_titles "${newer_family_${name}}")
    endif()
  endif()
endforeach()
list(LENGTH family_titles family_count)
set(other_family ${family_count})  # Names declared in no group (none in CUDA 13.0).
set(family_rows)
foreach(title IN LISTS family_titles)
  string(APPEND family_rows "  \"${title}\",\n")
endforeach()
string(APPEND family_rows "  \"Other\",\n")
math(EXPR family_count "${family_count} + 1")

# --- Name every variant. ----------------------------------------------------------------------------------------
# One variant of `name`: its symbol (numbered on first sight), its row in the variant array and in OUTPUT_LIST
# (`label`: the version as listed), and whether the headers or a NEWER_VARIANTS line (`newer`: the variable it
# defined) give it. A macro: it appends to the caller's lists.
macro(add_variant _symbol _version _label _newer)
  list(FIND symbols ${_symbol} symbol_index)
  if(symbol_index EQUAL -1)
    list(LENGTH symbols symbol_index)
    list(APPEND symbols ${_symbol})
  endif()
  string(APPEND variant_rows "  {${_version}, ${symbol_index}},  /* ${_symbol} */\n")
  list(APPEND list_rows "${name} ${_label} ${_symbol}")
  if(DEFINED ${_newer})
    list(APPEND newer_symbols ${_symbol})
  else()
    list(APPEND header_symbols ${_symbol})
  endif()
  math(EXPR variant_index "${variant_index} + 1")
endmacro()
set(symbols)          # every variant name, in first-seen order; index = position
set(variant_rows)     # C initialisers of the variant array, in name order
set(name_rows)        # C initialisers of the name array
set(list_rows)        # OUTPUT_LIST lines
set(header_symbols)   # variant names some typedef of the headers gives
set(newer_symbols)    # variant names some NEWER_VARIANTS line gives
set(variant_index 0)
foreach(name IN LISTS names)
  set(legacy_begin ${variant_index})
  set(legacy_count 0)
  set(legacy_symbols)
  if(DEFINED legacy_${name})
    list(REMOVE_DUPLICATES legacy_${name})
    list(SORT legacy_${name} COMPARE NATURAL)
    set(ordinal 1)
    foreach(version IN LISTS legacy_${name})
      if(ordinal EQUAL 1)
        set(symbol ${name})
      else()
        set(symbol ${name}_v${ordinal})
      endif()
      list(APPEND legacy_symbols ${symbol})
      add_variant(${symbol} ${version} "${version}" newer_legacy_${name}_${version})
      math(EXPR legacy_count "${legacy_count} + 1")
      math(EXPR ordinal "${ordinal} + 1")
    endforeach()
  endif()

  set(pt_begin ${variant_index})
  set(pt_count 0)
  if(DEFINED pt_${name})
    list(REMOVE_DUPLICATES pt_${name})
    list(SORT pt_${name} COMPARE NATURAL)
    foreach(version IN LISTS pt_${name})
      # The legacy variant in force at this version, plus the suffix.
      set(base ${name})
      set(i 0)
      foreach(legacy_version IN LISTS legacy_${name})
        if(legacy_version LESS_EQUAL version)
          list(GET legacy_symbols ${i} base)
        endif()
        math(EXPR i "${i} + 1")
      endforeach()
      set(symbol ${base}${suffix_${name}})
      add_variant(${symbol} ${version} "${version}${suffix_${name}}" newer_pt_${name}_${version})
      math(EXPR pt_count "${pt_count} + 1")
    endforeach()
  endif()
  if(DEFINED family_${name})
    set(family ${family_${name}})
  else()
    set(family ${other_family})
  endif()
  string(APPEND name_rows "  {\"${name}\", ${legacy_begin}, ${legacy_count}, ${pt_begin}, ${pt_count}, ${family}},\n")
endforeach()
list(LENGTH symbols symbol_count)
if(newer_symbols)
  list(REMOVE_DUPLICATES newer_symbols)
  list(REMOVE_ITEM newer_symbols ${header_symbols})
endif()
list(LENGTH newer_symbols newer_symbol_count)
set(newer_symbol_rows)
foreach(symbol IN LISTS newer_symbols)
  string(APPEND newer_symbol_rows "  \"${symbol}\",\n")
endforeach()
if(newer_symbol_count EQUAL 0)
  set(newer_symbol_rows "  0,  /* none: C has no empty arrays */\n")
endif()

# --- CUresult names from cuda.h. ----------------------------------------------------------------------------------
file(READ ${CUDA_INCLUDE_DIR}/cuda.h cuda_h)
string(REGEX MATCH "typedef enum cudaError_enum[^}]*}" result_enum "${cuda_h}")
string(REGEX MATCHALL "CUDA_(SUCCESS|ERROR_[A-Z0-9_]+)[ \t]*=[ \t]*[0-9]+" results "${result_enum}")
list(LENGTH results result_count)
if(result_count LESS 50)
  message(FATAL_ERROR "only ${result_count} CUresult values found in cuda.h: unexpected header layout")
endif()
set(result_rows)
foreach(result IN LISTS results)
  string(REGEX REPLACE "^([A-Z0-9_]+)[ \t]*=[ \t]*([0-9]+)$" "\\2, \"\\1\"" row "${result}")
  string(APPEND result_rows "  {${row}},\n")
endforeach()

# --- Write the C source. --------------------------------------------------------------------------------------
set(stub_rows)
set(symbol_name_rows)
set(symbol_address_rows)
set(stub_address_rows)
set(map_rows)
set(index 0)
foreach(symbol IN LISTS symbols)
  string(APPEND stub_rows "GPUPOOL_STUB(${index}, ${symbol})\n")
  string(APPEND symbol_name_rows "  \"${symbol}\",\n")
  string(APPEND symbol_address_rows "  (void*)&${symbol},\n")
  string(APPEND stub_address_rows "  (void*)&gpupool_stub_${index},\n")
  string(APPEND map_rows "    ${symbol};\n")
  math(EXPR index "${index} + 1")
endforeach()

set(sources ${typedef_headers})
if(DEFINED NEWER_VARIANTS AND NOT NEWER_VARIANTS STREQUAL "")
  list(APPEND sources ${NEWER_VARIANTS})
endif()
string(REPLACE ";" " " header_list "${sources}")
file(WRITE ${OUTPUT_C}.tmp
"/* Generated by lib/interpose/generate_driver_tables.cmake from ${header_list} and cuda.h. Do not edit. */
#include \"driver_tables.h\"

/* One stub per ABI variant, which the variant's name is a weak alias of. Hand-written definitions (strong symbols)
 * replace the alias at link time; the stub itself keeps its own name, so its address tells which variants nothing
 * replaced. The stubs take no arguments: the SysV calling convention lets a caller pass any, and a stub never
 * reads them. */
#define GPUPOOL_STUB(index, symbol) \\
  static int gpupool_stub_##index(void) { return gpupool_interpose_unimplemented(index); } \\
  extern int symbol(void) __attribute__((weak, alias(\"gpupool_stub_\" #index)));
${stub_rows}#undef GPUPOOL_STUB

const int gpupool_interpose_symbol_count = ${symbol_count};

const char* const gpupool_interpose_symbol_names[${symbol_count}] = {
${symbol_name_rows}};

void* const gpupool_interpose_symbol_addresses[${symbol_count}] = {
${symbol_address_rows}};

void* const gpupool_interpose_stub_addresses[${symbol_count}] = {
${stub_address_rows}};

const int gpupool_interpose_family_count = ${family_count};

const char* const gpupool_interpose_family_names[${family_count}] = {
${family_rows}};

const GpupoolProcVariant gpupool_interpose_variants[${variant_index}] = {
${variant_rows}};

const int gpupool_interpose_name_count = ${name_count};

/* Sorted by name (strcmp order). */
const GpupoolProcName gpupool_interpose_names[${name_count}] = {
${name_rows}};

/* The variants only the list of newer ABI variants (NEWER_VARIANTS) gave: the headers' toolkit lacks them. */
const int gpupool_interpose_newer_symbol_count = ${newer_symbol_count};

const char* const gpupool_interpose_newer_symbol_names[] = {
${newer_symbol_rows}};

const int gpupool_interpose_result_name_count = ${result_count};

const GpupoolResultName gpupool_interpose_result_names[${result_count}] = {
${result_rows}};
")
file(WRITE ${OUTPUT_MAP}.tmp
"/* Generated by lib/interpose/generate_driver_tables.cmake. Exports the driver's ABI variants, and gpupool's own
   cuGpupoolSliceUtilization (for its libnvidia-ml.so.1) and cuGpupoolInitError (for the gpupool Python package). */
{
  global:
${map_rows}    cuGpupoolSliceUtilization;
    cuGpupoolInitError;
  local: *;
};
")
if(DEFINED OUTPUT_LIST AND NOT OUTPUT_LIST STREQUAL "")
  list(SORT list_rows)
  list(JOIN list_rows "\n" list_text)
  file(WRITE ${OUTPUT_LIST} "${list_text}\n")
endif()
# Rewrite only on change, so that a rerun does not relink for nothing.
file(COPY_FILE ${OUTPUT_C}.tmp ${OUTPUT_C} ONLY_IF_DIFFERENT)
file(COPY_FILE ${OUTPUT_MAP}.tmp ${OUTPUT_MAP} ONLY_IF_DIFFERENT)
file(REMOVE ${OUTPUT_C}.tmp ${OUTPUT_MAP}.tmp)
