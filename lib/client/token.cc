#include <fmt/format.h>

#include "client/lease_core.h"
#include "core/util.h"

namespace gpupool::internal {
namespace {

constexpr std::string_view kPrefix = "gpl1:";

// Addresses may hold ':' (host:port) and odd characters (unix paths); percent-encode all but a safe set.
std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == '/') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

bool Unescape(std::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    unsigned v = 0;
    for (int k = 1; k <= 2; ++k) {
      char c = s[i + k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else return false;
    }
    out->push_back(static_cast<char>(v));
    i += 2;
  }
  return true;
}

bool IsHex(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::string EncodeToken(const TokenFields& f) {
  std::string servers;
  for (const auto& s : f.servers) servers += (servers.empty() ? "" : ",") + Escape(s);
  return fmt::format("{}{}:{}:{}", kPrefix, f.id, f.secret, servers);
}

Result<TokenFields> DecodeToken(const std::string& token) {
  auto bad = [](std::string why) {
    return Status(StatusCode::kInvalidArgument, "malformed lease token (GPUPOOL_LEASE): " + why);
  };
  if (token.compare(0, kPrefix.size(), kPrefix) != 0) return bad("it does not start with 'gpl1:'");
  std::string_view rest = std::string_view(token).substr(kPrefix.size());
  auto c1 = rest.find(':');
  if (c1 == std::string_view::npos) return bad("missing secret");
  auto c2 = rest.find(':', c1 + 1);
  if (c2 == std::string_view::npos) return bad("missing server list");
  TokenFields f;
  f.id = std::string(rest.substr(0, c1));
  f.secret = std::string(rest.substr(c1 + 1, c2 - c1 - 1));
  if (!IsHex(f.id) || !IsHex(f.secret)) return bad("id and secret must be hex");
  for (const std::string& piece : SplitList(rest.substr(c2 + 1), ',')) {
    std::string address;
    if (!Unescape(piece, &address) || address.empty()) return bad("bad server address '" + piece + "'");
    f.servers.push_back(address);
  }
  if (f.servers.empty()) return bad("no servers");
  return f;
}

}  // namespace gpupool::internal
