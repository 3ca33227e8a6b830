// Who is on the other end of a connection to the agent. On a Unix socket the kernel says (SO_PEERCRED: the
// connecting process's uid, which no client can forge); over TCP a client proves who it is with a per-user token
// that the agent's token file maps to a user name. An agent with `[auth] require = true` refuses clients it cannot
// authenticate; without it, a client it cannot authenticate is served as the user kAnonymousUser: the name it claims
// is kept for display only (gp-ls shows "anonymous (claims alice)"), never given a user's policy rights nor counted
// in that user's holdings; one it can authenticate is recorded as the user it proved to be, whatever it claims.
#ifndef GPUPOOL_AGENT_AUTH_H_
#define GPUPOOL_AGENT_AUTH_H_

#include <sys/types.h>

#include <map>
#include <string>

#include <kj/async-io.h>
#include <kj/compat/tls.h>

#include "gpupool/status.h"

namespace gpupool::agent {

// Who a client the agent could not authenticate is, for policies (rules naming "anonymous" apply to it), holdings,
// gp-ls and metrics.
inline constexpr const char* kAnonymousUser = "anonymous";

struct Peer {
  bool unix_socket = false;
  bool authenticated = false;
  std::string user;  // Set when authenticated.
};

// The name of user `uid` ("uid1234" when it has no passwd entry).
std::string UserNameOf(uid_t uid);

// The user behind a Unix socket connection, from the kernel; unauthenticated if the socket cannot tell.
Peer UnixPeer(kj::AsyncIoStream& stream);

// The user a TLS client certificate names (its common name); unauthenticated without one.
Peer TlsPeer(kj::PeerIdentity* identity);

// The user a TCP client's token names, or empty.
class TokenTable {
 public:
  // Reads `path`: a TOML table [tokens] of `user = "token"` (tokens of 16 characters or more). The file must be
  // readable by its owner alone (mode 0600 or stricter): a token anyone can read proves nothing.
  static Result<TokenTable> Load(const std::string& path);
  TokenTable() = default;

  // The user whose token this is; empty if none (compared in constant time per token).
  std::string UserOf(const std::string& token) const;
  size_t size() const { return users_.size(); }

 private:
  std::map<std::string, std::string> users_;  // User -> token.
};

}  // namespace gpupool::agent

#endif  // GPUPOOL_AGENT_AUTH_H_
