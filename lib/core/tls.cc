#include "core/tls.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <fmt/format.h>

#include "core/util.h"

namespace gpupool {
namespace {

// KJ 0.9 checks the name a client connects to as a host name, also when it is an IP address, so an agent reached as
// tls:10.0.0.5:7450 failed with "hostname mismatch" although its certificate names 10.0.0.5 (an IP SAN). Its
// SSL_CTX is private; an explicit instantiation may name a private member (C++17 [temp.spec]/6), which is how
// SetUpVerification below reaches it, to check IP addresses as IP SANs (as newer KJ does).
struct TlsContextCtx {
  using type = void* kj::TlsContext::*;
  friend type CtxMember(TlsContextCtx);
};
template <typename Tag, typename Tag::type kMember>
struct PrivateMember {
  friend typename Tag::type CtxMember(Tag) { return kMember; }
};
template struct PrivateMember<TlsContextCtx, &kj::TlsContext::ctx>;

// The address in `name` ("10.0.0.5", "::1", "[::1]") without brackets; empty when it is a host name.
std::string IpAddressIn(std::string name) {
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  unsigned char buffer[16];
  if (inet_pton(AF_INET, name.c_str(), buffer) == 1 || inet_pton(AF_INET6, name.c_str(), buffer) == 1) return name;
  return "";
}

// OpenSSL's verification of a peer's chain, with the expected name moved from the host names to the IP addresses
// when it is an IP address: it then matches the certificate's IP SANs (and never a DNS SAN or the common name that
// happens to read the same). The parameters changed are this one verification's copy.
int VerifyNamingIpAddresses(X509_STORE_CTX* store, void*) {
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(store);
  if (const char* host = X509_VERIFY_PARAM_get0_host(param, 0); host != nullptr) {
    if (std::string ip = IpAddressIn(host); !ip.empty()) {
      if (X509_VERIFY_PARAM_set1_host(param, nullptr, 0) != 1 || X509_VERIFY_PARAM_set1_ip_asc(param, ip.c_str()) != 1) {
        return 0;  // Fails closed.
      }
    }
  }
  return X509_verify_cert(store);
}

void SetUpVerification(kj::TlsContext& context) {
  auto* ssl_context = static_cast<SSL_CTX*>(context.*CtxMember(TlsContextCtx{}));
  SSL_CTX_set_cert_verify_callback(ssl_context, VerifyNamingIpAddresses, nullptr);
}

Result<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, fmt::format("TLS {} {}: cannot read it", what, path));
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN") == std::string::npos) {
    return Status(StatusCode::kInvalidArgument, fmt::format("TLS {} {}: not a PEM file", what, path));
  }
  return text.str();
}

}  // namespace

Result<kj::Own<TlsSetup>> MakeTls(const TlsFiles& files, bool server) {
  auto setup = kj::heap<TlsSetup>();
  kj::TlsContext::Options options;
  try {
    if (!files.cert.empty() || !files.key.empty()) {
      if (files.cert.empty() || files.key.empty()) {
        return Status(StatusCode::kInvalidArgument, "TLS needs both a certificate and its private key");
      }
      auto cert = ReadPem(files.cert, "certificate");
      if (!cert.ok()) return cert.status();
      auto key = ReadPem(files.key, "private key");
      if (!key.ok()) return key.status();
      setup->keypair = kj::heap<kj::TlsKeypair>(
          kj::TlsKeypair{kj::TlsPrivateKey(kj::StringPtr(key->c_str())), kj::TlsCertificate(kj::StringPtr(cert->c_str()))});
      options.defaultKeypair = *setup->keypair;
    } else if (server) {
      return Status(StatusCode::kInvalidArgument, "a TLS server needs a certificate and its private key");
    }
    if (!files.ca.empty()) {
      auto ca = ReadPem(files.ca, "CA certificate");
      if (!ca.ok()) return ca.status();
      setup->trusted = kj::heapArray<kj::TlsCertificate>({kj::TlsCertificate(kj::StringPtr(ca->c_str()))});
      options.trustedCertificates = setup->trusted;
      options.useSystemTrustStore = false;
      options.verifyClients = server;
    }
    setup->context = kj::heap<kj::TlsContext>(kj::mv(options));
    SetUpVerification(*setup->context);
  } catch (const kj::Exception& e) {
    return Status(StatusCode::kInvalidArgument, fmt::format("TLS setup failed: {}", e.getDescription().cStr()));
  }
  return setup;
}

TlsFiles ClientTlsFiles() {
  return {EnvOrEmpty("GPUPOOL_TLS_CERT"), EnvOrEmpty("GPUPOOL_TLS_KEY"), EnvOrEmpty("GPUPOOL_TLS_CA")};
}

bool StripTlsScheme(std::string* address) {
  if (address->rfind("tls:", 0) != 0) return false;
  address->erase(0, 4);
  return true;
}

}  // namespace gpupool
