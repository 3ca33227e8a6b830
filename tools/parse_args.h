// Shared by the tools' main(): parse the command line, mapping CLI11's own exit codes (105, 106...) to the
// tool's documented usage-error status, so a caller can tell a bad option from the command's own status.
#ifndef GPUPOOL_TOOLS_PARSE_ARGS_H_
#define GPUPOOL_TOOLS_PARSE_ARGS_H_

#include <cctype>
#include <string>

#include <CLI/CLI.hpp>

#include "output.h"

namespace gpupool::tools {

// A usage error in a user's words, naming the tool (the base name of argv[0]) and where its options are listed:
// "gp-run: -p needs a value (gp-run --help lists the options)". CLI11's own wording ("1 required TEXT missing",
// "Run with --help for more information.") names its internals and not the tool.
inline void PrintUsageError(const CLI::ParseError& e, const char* argv0) {
  std::string tool = argv0 ? argv0 : "";
  if (auto slash = tool.rfind('/'); slash != std::string::npos) tool.erase(0, slash + 1);
  std::string what = e.what();
  const std::string name = e.get_name();
  if (auto extras = what.find(" not expected: "); extras != std::string::npos) {
    what = "unexpected argument(s): " + what.substr(extras + 15);
  } else if (name == "ArgumentMismatch" && what.find("required") != std::string::npos) {
    what = what.substr(0, what.find(':')) + " needs a value";
  } else if (!what.empty()) {
    what[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[0])));
  }
  PrintError("{}: {} ({} --help lists the options)\n", tool, what, tool);
}

}  // namespace gpupool::tools

// --help and --version exit 0 (printing what was asked); any usage error prints PrintUsageError's message and
// returns `usage_status` from main.
#define GP_PARSE_ARGS(app, argc, argv, usage_status)                             \
  do {                                                                           \
    try {                                                                        \
      (app).parse((argc), (argv));                                               \
    } catch (const CLI::ParseError& e) {                                         \
      if (e.get_exit_code() == 0) return (app).exit(e);                          \
      ::gpupool::tools::PrintUsageError(e, (argc) > 0 ? (argv)[0] : nullptr);    \
      return (usage_status);                                                     \
    }                                                                            \
  } while (0)

#endif  // GPUPOOL_TOOLS_PARSE_ARGS_H_
