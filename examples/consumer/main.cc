// Uses an installed libgpupool without any gp-agent: parses a fraction and connects to server lists that are
// malformed or point nowhere. Exits 0 when the library behaves as documented.
#include <chrono>
#include <cstdio>

#include "gpupool/gpupool.h"

int main() {
  int failures = 0;

  auto fraction = gpupool::ParseFraction("25%");
  if (fraction.ok()) {
    std::printf("ParseFraction(\"25%%\") = %g\n", *fraction);
  } else {
    std::printf("ParseFraction(\"25%%\") failed: %s\n", fraction.status().ToString().c_str());
  }
  if (!fraction.ok() || *fraction != 0.25) ++failures;

  // A malformed address: Connect() checks the list and refuses it.
  gpupool::PoolOptions bad;
  bad.servers = {"not-an-address"};
  auto refused = gpupool::Pool::Connect(bad);
  std::printf("Connect({\"not-an-address\"}): %s\n", refused.ok() ? "ok" : refused.status().ToString().c_str());
  if (refused.ok() || refused.status().code() != gpupool::StatusCode::kInvalidArgument) ++failures;

  // A well-formed address with no agent behind it: Connect() succeeds, State() reports the server down.
  gpupool::PoolOptions nowhere;
  nowhere.servers = {"unix:/nonexistent/gpupool-consumer.sock"};
  nowhere.connect_timeout = std::chrono::milliseconds(500);
  auto pool = gpupool::Pool::Connect(nowhere);
  std::printf("Connect({\"%s\"}): %s\n", nowhere.servers[0].c_str(),
              pool.ok() ? "ok" : pool.status().ToString().c_str());
  if (pool.ok()) {
    gpupool::PoolState state = pool->State();
    for (const gpupool::ServerInfo& s : state.servers) {
      std::printf("  %s: %s\n", s.address.c_str(), s.up ? "up" : ("down: " + s.error).c_str());
    }
    if (state.servers.size() != 1 || state.servers_up() != 0) ++failures;
  } else {
    ++failures;
  }

  std::printf("%s\n", failures == 0 ? "consumer: OK" : "consumer: FAILED");
  return failures == 0 ? 0 : 1;
}
