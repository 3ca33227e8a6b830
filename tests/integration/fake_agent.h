// Peers that are not a proper gp-agent of our version, run on a thread of the test process.
#ifndef GPUPOOL_TESTS_INTEGRATION_FAKE_AGENT_H_
#define GPUPOOL_TESTS_INTEGRATION_FAKE_AGENT_H_

#include <atomic>
#include <memory>
#include <string>

namespace gpupool::testing {

class FakeServer {
 public:
  virtual ~FakeServer() noexcept(false) = default;
  virtual const std::string& address() const = 0;
};

// Serves the pool schema but answers hello() with `version`.
std::unique_ptr<FakeServer> StartAgentOfVersion(uint32_t version);
// Serves the pool schema, grants every lease on one emulated GPU of 1 GiB, and refuses every session (openSession's
// outcome busy, with `message` and `window_taken`), counting the openSession calls in `*asked`.
std::unique_ptr<FakeServer> StartSessionRefusingAgent(bool window_taken, const std::string& message,
                                                      std::atomic<int>* asked);
// Accepts TCP connections, writes an HTTP error and closes: not Cap'n Proto at all.
std::unique_ptr<FakeServer> StartHttpServer();

// A TCP socket listening on 127.0.0.1 at a port the kernel picks, for a fake peer to accept on; sets `*address` to
// its "127.0.0.1:PORT". Throws std::runtime_error, with errno's words, when it cannot.
int ListenOnLoopback(std::string* address);

}  // namespace gpupool::testing

#endif  // GPUPOOL_TESTS_INTEGRATION_FAKE_AGENT_H_
