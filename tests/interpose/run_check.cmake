# Runs one program and checks its exit status and output streams (the environment comes from the CTest test):
#
#   cmake -DPROGRAM=path [-DARGS="a b"] [-DSTDOUT_REGEX=re] [-DSTDERR_REGEX=re] [-DSTDERR_NOT_REGEX=re]
#         [-DSTDERR_LINES=n] [-DEXIT_CODE=0] -P run_check.cmake
#
# STDERR_LINES counts the lines the program wrote to stderr: the interposer must stay silent, or say exactly one
# line, depending on the case.
cmake_minimum_required(VERSION 3.20)

if(NOT DEFINED PROGRAM)
  message(FATAL_ERROR "run_check.cmake: -DPROGRAM=... is required")
endif()
if(NOT DEFINED EXIT_CODE)
  set(EXIT_CODE 0)
endif()
separate_arguments(args UNIX_COMMAND "${ARGS}")

execute_process(
  COMMAND ${PROGRAM} ${args}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 120)
message("---- stdout ----\n${out}---- stderr ----\n${err}----------------")

set(problems)
if(NOT status STREQUAL EXIT_CODE)
  list(APPEND problems "exit status ${status}, expected ${EXIT_CODE}")
endif()
if(DEFINED STDOUT_REGEX AND NOT out MATCHES "${STDOUT_REGEX}")
  list(APPEND problems "stdout does not match: ${STDOUT_REGEX}")
endif()
if(DEFINED STDERR_REGEX AND NOT err MATCHES "${STDERR_REGEX}")
  list(APPEND problems "stderr does not match: ${STDERR_REGEX}")
endif()
if(DEFINED STDERR_NOT_REGEX AND err MATCHES "${STDERR_NOT_REGEX}")
  list(APPEND problems "stderr matches what it must not: ${STDERR_NOT_REGEX}")
endif()
if(DEFINED STDERR_LINES)
  string(REGEX MATCHALL "\n" newlines "${err}")
  list(LENGTH newlines lines)
  if(NOT lines EQUAL STDERR_LINES)
    list(APPEND problems "${lines} lines on stderr, expected ${STDERR_LINES}")
  endif()
endif()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "FAILED: ${PROGRAM} ${ARGS}\n  ${text}")
endif()
