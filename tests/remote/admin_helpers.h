// What the tests of administration and moving leases share: the remote test programs, finding a lease by its
// program, and gp-agent ctl run as a command.
#ifndef GPUPOOL_TESTS_REMOTE_ADMIN_HELPERS_H_
#define GPUPOOL_TESTS_REMOTE_ADMIN_HELPERS_H_

#include <chrono>
#include <string>
#include <vector>

#include "integration/helpers.h"

namespace gpupool::testing {

inline std::string Program(const std::string& name) { return std::string(GPUPOOL_REMOTE_PROGRAM_DIR) + "/" + name; }

// The first lease whose label (its program's command line) holds `label_part`, on any server of `state`.
inline const LeaseInfo* FindLease(const PoolState& state, const std::string& label_part) {
  for (const auto& s : state.servers) {
    for (const auto& l : s.leases) {
      if (l.label.find(label_part) != std::string::npos) return &l;
    }
  }
  return nullptr;
}

// `program` (moving_state.cu) ends well, printing `ok_line`: its state came through whatever was done to its lease.
inline void ExpectFinishedExact(Process& program, const std::string& ok_line) {
  const int status = program.Wait(std::chrono::seconds(120));
  const std::string out = program.ReadAll();
  EXPECT_EQ(status, 0) << out << program.Stderr();
  EXPECT_NE(out.find(ok_line), std::string::npos) << out;
}

inline RunResult Ctl(const std::string& server, std::vector<std::string> verb, const std::string& as_user = "") {
  std::vector<std::string> argv;
  if (!as_user.empty()) argv = {"/usr/sbin/runuser", "-u", as_user, "--"};
  argv.insert(argv.end(), {ToolPath("gp-agent"), "ctl", "--server", server});
  argv.insert(argv.end(), verb.begin(), verb.end());
  return RunCommand(argv, {}, std::chrono::seconds(30));
}

inline std::string LeaseIdOf(Pool& pool, const std::string& label_part) {
  PoolState state = pool.State();
  const LeaseInfo* l = FindLease(state, label_part);
  return l ? l->id : "";
}

}  // namespace gpupool::testing

#endif  // GPUPOOL_TESTS_REMOTE_ADMIN_HELPERS_H_
