// TLS for the pool service: an agent with a certificate serves its TCP socket over TLS, and with a CA it also
// requires a client certificate, whose common name is the user it authenticates. Clients reach such an agent at
// "tls:host:port" and trust it through GPUPOOL_TLS_CA (else the system's store); their own certificate, when the
// agent wants one, comes from GPUPOOL_TLS_CERT and GPUPOOL_TLS_KEY. PEM files throughout.
#ifndef GPUPOOL_CORE_TLS_H_
#define GPUPOOL_CORE_TLS_H_

#include <string>

#include <kj/compat/tls.h>

#include "gpupool/status.h"

namespace gpupool {

struct TlsFiles {
  std::string cert, key;  // This side's certificate and private key (a server's are required).
  std::string ca;         // Whom to trust: a server checks client certificates against it, a client the server's.
};

// A TLS context and the keys and certificates it refers to.
struct TlsSetup {
  kj::Own<kj::TlsKeypair> keypair;
  kj::Array<kj::TlsCertificate> trusted;
  kj::Own<kj::TlsContext> context;
};

// Reads the files and builds the context. A server with a CA requires client certificates signed by it.
Result<kj::Own<TlsSetup>> MakeTls(const TlsFiles& files, bool server);

// A client's files, from GPUPOOL_TLS_CA, GPUPOOL_TLS_CERT and GPUPOOL_TLS_KEY.
TlsFiles ClientTlsFiles();

// "tls:host:port" -> "host:port" and true; anything else unchanged and false.
bool StripTlsScheme(std::string* address);

}  // namespace gpupool

#endif  // GPUPOOL_CORE_TLS_H_
