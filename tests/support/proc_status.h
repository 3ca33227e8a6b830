// Fields of a process's /proc/PROCESS/status, for tests that check what the kernel says of a process (its user,
// no_new_privs, seccomp mode, capabilities) rather than what the code meant to set.
#ifndef GPUPOOL_TESTS_SUPPORT_PROC_STATUS_H_
#define GPUPOOL_TESTS_SUPPORT_PROC_STATUS_H_

#include <sys/types.h>

#include <fstream>
#include <string>

namespace gpupool::testing {

// /proc/`process`/status's `field` ("Uid", "Seccomp"...), its value without the leading blanks; "" if absent.
// `process` is "self" or a pid: "self" also holds in a process whose pid /proc does not show (a new pid namespace).
inline std::string ProcStatusField(const std::string& process, const std::string& field) {
  std::ifstream in("/proc/" + process + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) {
      std::string value = line.substr(field.size() + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      return value;
    }
  }
  return "";
}

inline std::string ProcStatusField(pid_t pid, const std::string& field) {
  return ProcStatusField(std::to_string(pid), field);
}

}  // namespace gpupool::testing

#endif  // GPUPOOL_TESTS_SUPPORT_PROC_STATUS_H_
