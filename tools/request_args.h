// Shared by gp-run and gp-lease: the flags that say what to take from the pool (-n, -p, -m, --class, --same-server,
// --spread, --wait, --servers), converted into a Request and PoolOptions as GPUPOOL_REQUEST is
// (client/request_flags.h). gp-ls, gp-top and gp-bench take their --servers (ServersArg) from here too.
#ifndef GPUPOOL_TOOLS_REQUEST_ARGS_H_
#define GPUPOOL_TOOLS_REQUEST_ARGS_H_

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "client/request_flags.h"
#include "gpupool/gpupool.h"
#include "output.h"

namespace gpupool::tools {

// --servers: the agents to use instead of $GPUPOOL_SERVERS or the pool file. gp-ls, gp-top and gp-bench declare it
// alone, gp-run and gp-lease with the request flags.
struct ServersArg {
  std::string text;
  CLI::Option* flag = nullptr;

  // Declares the flag on `app`.
  void Add(CLI::App& app) {
    flag = app.add_option("--servers", text,
                          "comma-separated agent addresses (default: $GPUPOOL_SERVERS or pool file)");
  }

  bool given() const { return flag != nullptr && flag->count() > 0; }

  // Appends the agents named to `servers`. Given but naming none is an error (kInvalidArgument, SplitServers).
  Status AppendTo(std::vector<std::string>* servers) const { return SplitServers(text, given(), servers); }

  // The pool of the agents named, else the configured one.
  Result<Pool> Connect() const {
    PoolOptions options;
    if (Status s = AppendTo(&options.servers); !s.ok()) return s;
    return Pool::Connect(std::move(options));
  }

  // Connect(), and when it fails, why on stderr as "TOOL: reason" (gp-ls and gp-top then end with status 2).
  Result<Pool> ConnectOrSay(const char* tool) const {
    Result<Pool> pool = Connect();
    if (!pool.ok()) PrintError("{}: {}\n", tool, pool.status().message());
    return pool;
  }
};

// The request flags on a command line; their meaning (and GPUPOOL_REQUEST's parser) is client/request_flags.h's.
struct RequestArgs {
  RequestFlags flags;  // All but the servers, which are `servers`'.
  ServersArg servers;

  // Declares the flags on `app`, bound to `flags` and `servers`.
  void Add(CLI::App& app) {
    app.add_option("-n,--count", flags.count, "number of slices (devices the command sees); default 1");
    auto* p = app.add_option("-p,--fraction", flags.fraction,
                             "fraction of a GPU per slice: 0.05..1, 25%, 1/4; default 1");
    app.add_option("-m,--memory", flags.memory, "memory per slice instead of a fraction, e.g. 6GiB")->excludes(p);
    app.add_option("--class", flags.device_class, "only GPUs of this class tag or model name");
    auto* same = app.add_flag_callback(
        "--same-server", [this] { flags.spread = Spread::kSameServer; }, "all slices on one server");
    app.add_flag_callback("--spread", [this] { flags.spread = Spread::kSpread; },
                          "slices on as many servers as possible")
        ->excludes(same);
    app.add_option("--wait", flags.wait, "queue up to this long when the pool is busy, e.g. 30s, 5m");
    servers.Add(app);
  }

  // Fills `request` (all but its label) and `options`; kInvalidArgument names the flag at fault.
  Status Build(Request* request, PoolOptions* options) const {
    RequestFlags given = flags;
    given.servers = servers.text;
    given.servers_given = servers.given();
    return BuildRequest(given, request, options);
  }
};

}  // namespace gpupool::tools

#endif  // GPUPOOL_TOOLS_REQUEST_ARGS_H_
