#include "agent/auth.h"

#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include "core/toml_config.h"
#include "core/util.h"

namespace gpupool::agent {

std::string UserNameOf(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found) return found->pw_name;
  return fmt::format("uid{}", uid);  // A uid without a passwd entry is still a uid.
}

Peer UnixPeer(kj::AsyncIoStream& stream) {
  Peer peer;
  peer.unix_socket = true;
  ucred cred{};
  uint len = sizeof(cred);
  try {
    stream.getsockopt(SOL_SOCKET, SO_PEERCRED, &cred, &len);
  } catch (const kj::Exception&) {
    return peer;
  }
  if (len != sizeof(cred)) return peer;
  peer.user = UserNameOf(cred.uid);
  peer.authenticated = true;
  return peer;
}

Peer TlsPeer(kj::PeerIdentity* identity) {
  Peer peer;
  if (!identity) return peer;
  KJ_IF_MAYBE(tls, kj::dynamicDowncastIfAvailable<kj::TlsPeerIdentity>(*identity)) {
    if (tls->hasCertificate()) {
      peer.user = tls->getCommonName().cStr();
      peer.authenticated = !peer.user.empty();
    }
  }
  return peer;
}

Result<TokenTable> TokenTable::Load(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return Status(StatusCode::kNotFound, fmt::format("token file {}: {}", path, std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("token file {} is readable by others (mode {:o}): chmod 600 it", path, st.st_mode & 0777));
  }
  auto file = TomlFile::Load(path);
  if (!file.ok()) return file.status();
  const toml::table& root = file->root();
  if (Status s = file->CheckKeys(root, {"tokens"}, "the token file"); !s.ok()) return s;
  TokenTable table;
  const toml::node* tokens = root.get("tokens");
  if (!tokens || !tokens->is_table()) {
    return Status(StatusCode::kInvalidArgument, fmt::format("token file {}: no [tokens] table", path));
  }
  for (const auto& [user, node] : *tokens->as_table()) {
    auto token = node.value<std::string>();
    if (!token) return file->Error(node, fmt::format("the token of '{}' must be a string", user.str()));
    if (token->size() < 16) return file->Error(node, fmt::format("the token of '{}' is shorter than 16 characters", user.str()));
    table.users_[std::string(user.str())] = *token;
  }
  return table;
}

std::string TokenTable::UserOf(const std::string& token) const {
  std::string found;
  // Every token is compared, and each in constant time: how long the answer takes tells nothing of a guess.
  for (const auto& [user, t] : users_) {
    if (ConstantTimeEquals(t, token)) found = user;
  }
  return found;
}

}  // namespace gpupool::agent
