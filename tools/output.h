// Shared by the tools' main(): what they write, and how they end when nobody reads it any more.
//
// A tool's reader may go away before the tool is done (`gp-ls | head`, `gp-top --json | head -c1`). A Unix tool then
// ends quietly, and so do ours: a failed write on stdout unwinds the tool (its leases and private agents are ended by
// their destructors) and then ends the process as SIGPIPE ends one, so a shell sees what it sees of `yes | head`.
// Nothing is printed about it. A failed write on stderr is ignored: there is nowhere left to say anything, and a tool
// supervising a program (gp-run) must go on doing so.
#ifndef GPUPOOL_TOOLS_OUTPUT_H_
#define GPUPOOL_TOOLS_OUTPUT_H_

#include <signal.h>

#include <cstdio>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace gpupool::tools {

// Thrown by Print and Flush when stdout is gone; RunTool ends the tool on it.
struct StdoutGone {};

// Writes to stdout; throws StdoutGone when that fails.
template <typename... Args>
void Print(fmt::format_string<Args...> format, Args&&... args) {
  std::string text = fmt::format(format, std::forward<Args>(args)...);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) throw StdoutGone{};
}

// Pushes out what stdout buffers (a live view's screen); throws StdoutGone when that fails.
inline void Flush() {
  if (std::fflush(stdout) != 0) throw StdoutGone{};
}

// Writes to stderr, never throwing: a write error there is ignored.
template <typename... Args>
void PrintError(fmt::format_string<Args...> format, Args&&... args) noexcept {
  try {
    std::string text = fmt::format(format, std::forward<Args>(args)...);
    (void)!std::fwrite(text.data(), 1, text.size(), stderr);
  } catch (...) {  // Formatting ran out of memory: nothing can be said.
  }
}

// Runs a tool's body and returns its exit status. Writes to a closed pipe fail with EPIPE instead of killing the
// tool on the spot (so its destructors run); if stdout is gone, the tool then ends by SIGPIPE, quietly.
template <typename Body>
int RunTool(Body body) {
  signal(SIGPIPE, SIG_IGN);
  try {
    int status = body();
    Flush();
    return status;
  } catch (const StdoutGone&) {
  }
  signal(SIGPIPE, SIG_DFL);
  raise(SIGPIPE);
  return 128 + SIGPIPE;  // Where SIGPIPE is blocked.
}

}  // namespace gpupool::tools

#endif  // GPUPOOL_TOOLS_OUTPUT_H_
