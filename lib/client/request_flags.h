// gp-run's request options (-n, -p, -m, --class, --same-server, --spread, --wait, --servers), read in one place:
// gp-run and gp-lease take them from their command line (tools/request_args.h binds the flags to RequestFlags), the
// interposer from GPUPOOL_REQUEST (ParseRequestFlags); both turn them into a request with BuildRequest.
#ifndef GPUPOOL_CLIENT_REQUEST_FLAGS_H_
#define GPUPOOL_CLIENT_REQUEST_FLAGS_H_

#include <string>
#include <string_view>
#include <vector>

#include "gpupool/pool.h"
#include "gpupool/request.h"
#include "gpupool/status.h"

namespace gpupool {

// The options as given, before conversion. Defaults: what gp-run does without the option.
struct RequestFlags {
  int count = 1;             // -n, --count.
  std::string fraction;      // -p, --fraction (ParseFraction); empty: whole GPUs.
  std::string memory;        // -m, --memory (ParseMemorySize); empty: from the fraction.
  std::string wait;          // --wait (ParseDuration); empty: do not wait.
  std::string device_class;  // --class; empty: any device.
  Spread spread = Spread::kPack;  // --same-server, --spread.
  std::string servers;       // --servers: comma-separated agent addresses.
  bool servers_given = false;  // Whether --servers was given at all (an empty list then is an error).
};

// Fills `flags` from `text`, gp-run's options separated by white space ("-n 2 -p 0.5 --servers a,b"; "--opt=value"
// too). A later option overrides an earlier one. kInvalidArgument for an unknown option, a missing value or a
// count that is not a number, naming the option; the other values are checked by BuildRequest.
Status ParseRequestFlags(std::string_view text, RequestFlags* flags);

// Fills `request` (all but its label) and `options->servers` from `flags`. kInvalidArgument names the option at
// fault ("-p: ...").
Status BuildRequest(const RequestFlags& flags, Request* request, PoolOptions* options);

// Appends the agents of `text`, a comma-separated list, to `servers` (empty entries skipped). kInvalidArgument when
// the list was `given` but names none: an explicit empty pool is a mistake, never a reason to use the configured
// pool or a private agent instead.
Status SplitServers(std::string_view text, bool given, std::vector<std::string>* servers);

}  // namespace gpupool

#endif  // GPUPOOL_CLIENT_REQUEST_FLAGS_H_
