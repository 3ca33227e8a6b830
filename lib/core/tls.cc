#include "core/tls.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace gpupool {
namespace {

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

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
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
  } catch (const kj::Exception& e) {
    return Status(StatusCode::kInvalidArgument, fmt::format("TLS setup failed: {}", e.getDescription().cStr()));
  }
  return setup;
}

TlsFiles ClientTlsFiles() { return {Env("GPUPOOL_TLS_CERT"), Env("GPUPOOL_TLS_KEY"), Env("GPUPOOL_TLS_CA")}; }

bool StripTlsScheme(std::string* address) {
  if (address->rfind("tls:", 0) != 0) return false;
  address->erase(0, 4);
  return true;
}

}  // namespace gpupool
