// A small etcd v3 client over etcd's JSON gateway (POST /v3/..., keys and values base64), on KJ's HTTP client: the
// pool's directory (ARCHITECTURE.md, section 3) needs only range reads, puts, and leases. Several endpoints (the
// members of one cluster) are tried in turn, so that a dead member costs one connection attempt, not an error.
// Authentication (etcd's users: a token from /v3/auth/authenticate, renewed when etcd says it is invalid) and TLS
// ("https://" endpoints; CA, client certificate and key as PEM files) as etcd supports them.
#ifndef GPUPOOL_CLIENT_ETCD_H_
#define GPUPOOL_CLIENT_ETCD_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <kj/async-io.h>
#include <kj/compat/http.h>

#include "core/tls.h"
#include "gpupool/status.h"

namespace gpupool::internal {

struct EtcdConfig {
  std::vector<std::string> endpoints;  // "http://host:port" or "https://host:port", members of one cluster.
  std::string prefix = "/gpupool";     // Key prefix of this pool: agents register under PREFIX/agents/.
  std::string user, password;          // etcd's authentication; empty user: none.
  TlsFiles tls;                        // For https endpoints: whom to trust (ca), and this side's cert and key.
  std::chrono::milliseconds timeout{2000};  // Per request and endpoint, connecting included.
};

// "etcd:http://a:2379,http://b:2379" -> the endpoints. kInvalidArgument with the reason when it is not that.
Status ParseDirectorySpec(std::string_view spec, EtcdConfig* config);
// "/gpupool" is the default; a prefix must start with '/' and not end with one, and hold no spaces or controls.
Status CheckDirectoryPrefix(std::string_view prefix, std::string_view source);

struct EtcdKeyValue {
  std::string key, value;
  int64_t lease = 0;
  int64_t mod_revision = 0;
};

struct EtcdRange {
  std::vector<EtcdKeyValue> kvs;
  int64_t revision = 0;  // The store's revision the read saw.
};

// Lives on one KJ event loop thread and is destroyed there.
class EtcdClient {
 public:
  // Fails only on a bad TLS setup (unreadable files): nothing is contacted before the first call.
  static Result<kj::Own<EtcdClient>> Make(kj::Network& network, kj::Timer& timer, EtcdConfig config);
  ~EtcdClient();

  // Every key starting with `prefix`.
  kj::Promise<Result<EtcdRange>> RangePrefix(std::string prefix);
  // `lease` 0: a key that lives until deleted.
  kj::Promise<Status> Put(std::string key, std::string value, int64_t lease);
  kj::Promise<Status> Delete(std::string key);
  // A new lease of `ttl_s` seconds: its id.
  kj::Promise<Result<int64_t>> Grant(int64_t ttl_s);
  // Renews `lease`: the seconds it has left now, 0 when it is gone (expired, or the cluster lost it).
  kj::Promise<Result<int64_t>> KeepAlive(int64_t lease);
  // Ends `lease` and deletes its keys at once.
  kj::Promise<Status> Revoke(int64_t lease);

  // One change a watch saw: a key put (with its value) or deleted.
  struct Change {
    std::string key, value;
    bool deleted = false;
    int64_t revision = 0;
  };
  // Watches every key starting with `prefix` from store revision `from` on, at the current endpoint: `created` once
  // etcd has set the watch up, then `changed` for each change, in order. Resolves when the stream ends (the member
  // went away, the revisions were compacted, the promise was dropped) with why; never with OK.
  kj::Promise<Status> Watch(std::string prefix, int64_t from, std::function<void()> created,
                            std::function<void(const Change&)> changed);

  const EtcdConfig& config() const { return config_; }

 private:
  EtcdClient(kj::Timer& timer, EtcdConfig config);
  struct Reply {
    unsigned status = 0;
    std::string body;
  };
  // POSTs `body` to `path` at the current endpoint, moving to the next one on a connection failure, a timeout or an
  // unavailable member; authenticates first when a user is configured, and again once if the token is refused.
  kj::Promise<Result<std::string>> Call(std::string path, std::string body);
  kj::Promise<Result<std::string>> CallFrom(std::string path, std::string body, size_t first, size_t tried,
                                            bool reauthenticated);
  // Sends `body` to `path` at `endpoint` (with the token, if asked and held): the response, its body unread.
  kj::Promise<kj::HttpClient::Response> Send(const std::string& endpoint, const std::string& path,
                                             const std::string& body, bool with_token);
  // Send() and the whole answer, within the request timeout.
  kj::Promise<Reply> Post(const std::string& endpoint, const std::string& path, const std::string& body,
                          bool with_token);
  kj::Promise<Status> Authenticate(const std::string& endpoint);
  // A token from `endpoint` unless one is held or no user is configured.
  kj::Promise<Status> EnsureToken(const std::string& endpoint);

  kj::Timer& timer_;
  EtcdConfig config_;
  kj::Own<TlsSetup> tls_;
  kj::Own<kj::Network> tls_network_;
  kj::HttpHeaderTable headers_;
  kj::Own<kj::HttpClient> http_;
  size_t current_ = 0;  // The endpoint that answered last.
  std::string token_;   // etcd's authentication token; empty: none yet.
};

}  // namespace gpupool::internal

#endif  // GPUPOOL_CLIENT_ETCD_H_
