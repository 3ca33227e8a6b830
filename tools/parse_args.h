// Shared by the tools' main(): parse the command line, mapping CLI11's own exit codes (105, 106...) to the
// tool's documented usage-error status, so a caller can tell a bad option from the command's own status.
#ifndef GPUPOOL_TOOLS_PARSE_ARGS_H_
#define GPUPOOL_TOOLS_PARSE_ARGS_H_

#include <CLI/CLI.hpp>

// --help and --version exit 0; any usage error prints CLI11's message and returns `usage_status` from main.
#define GP_PARSE_ARGS(app, argc, argv, usage_status)     \
  do {                                                   \
    try {                                                \
      (app).parse((argc), (argv));                       \
    } catch (const CLI::ParseError& e) {                 \
      return (app).exit(e) == 0 ? 0 : (usage_status);    \
    }                                                    \
  } while (0)

#endif  // GPUPOOL_TOOLS_PARSE_ARGS_H_
