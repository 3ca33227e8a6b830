// Shared by gp-run and gp-lease: the flags that say what to take from the pool (-n, -p, -m, --class, --same-server,
// --spread, --wait, --servers) and their conversion into a Request and PoolOptions. gp-ls, gp-top and gp-bench read
// their --servers with ServersFlag too.
#ifndef GPUPOOL_TOOLS_REQUEST_ARGS_H_
#define GPUPOOL_TOOLS_REQUEST_ARGS_H_

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "gpupool/gpupool.h"

namespace gpupool::tools {

// The agents that `flag` (--servers) names in `text`. Given but naming none is an error (kInvalidArgument): an explicit
// empty pool is a mistake, never a reason to use the configured pool or a private agent instead.
inline Status ServersFlag(const CLI::Option* flag, const std::string& text, std::vector<std::string>* servers) {
  for (size_t pos = 0; pos <= text.size() && !text.empty();) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    if (comma > pos) servers->push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  if (flag && flag->count() > 0 && servers->empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "--servers names no servers: give agent addresses (host:port or unix:/path), or leave the flag out "
                  "to use $GPUPOOL_SERVERS or the pool file");
  }
  return Status::Ok();
}

struct RequestArgs {
  int count = 1;
  std::string fraction, memory, wait, device_class, servers;
  bool same_server = false, spread = false;

  // Declares the flags on `app`.
  void Add(CLI::App& app) {
    app.add_option("-n,--count", count, "number of slices (devices the command sees); default 1");
    auto* p = app.add_option("-p,--fraction", fraction, "fraction of a GPU per slice: 0.05..1, 25%, 1/4; default 1");
    app.add_option("-m,--memory", memory, "memory per slice instead of a fraction, e.g. 6GiB")->excludes(p);
    app.add_option("--class", device_class, "only GPUs of this class tag or model name");
    auto* same = app.add_flag("--same-server", same_server, "all slices on one server");
    app.add_flag("--spread", spread, "slices on as many servers as possible")->excludes(same);
    app.add_option("--wait", wait, "queue up to this long when the pool is busy, e.g. 30s, 5m");
    servers_flag = app.add_option("--servers", servers,
                                  "comma-separated agent addresses (default: $GPUPOOL_SERVERS or pool file)");
  }

  // Fills `request` (all but its label) and `options`; kInvalidArgument names the flag at fault.
  Status Build(Request* request, PoolOptions* options) const {
    request->count = count;
    if (!fraction.empty()) {
      auto f = ParseFraction(fraction);
      if (!f.ok()) return Status(StatusCode::kInvalidArgument, "-p: " + f.status().message());
      request->fraction = *f;
    }
    if (!memory.empty()) {
      auto m = ParseMemorySize(memory);
      if (!m.ok()) return Status(StatusCode::kInvalidArgument, "-m: " + m.status().message());
      request->memory_bytes = *m;
    }
    if (!wait.empty()) {
      auto d = ParseDuration(wait);
      if (!d.ok()) return Status(StatusCode::kInvalidArgument, "--wait: " + d.status().message());
      request->wait = *d;
    }
    request->device_class = device_class;
    request->spread = same_server ? Spread::kSameServer : spread ? Spread::kSpread : Spread::kPack;
    return ServersFlag(servers_flag, servers, &options->servers);
  }

  CLI::Option* servers_flag = nullptr;
};


}  // namespace gpupool::tools

#endif  // GPUPOOL_TOOLS_REQUEST_ARGS_H_
