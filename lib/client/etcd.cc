#include "client/etcd.h"

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/encoding.h>

#include <fmt/format.h>

#include "core/json.h"
#include "core/log.h"
#include "core/util.h"

namespace gpupool::internal {
namespace {

// The largest answer read from etcd: a directory of thousands of agents is a few MiB; anything past this is not
// etcd answering a range of ours.
constexpr uint64_t kMaxReply = 64ull << 20;

std::string Base64(std::string_view bytes) {
  return std::string(kj::encodeBase64(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()))
                         .cStr());
}

bool FromBase64(std::string_view text, std::string* out) {
  auto decoded = kj::decodeBase64(kj::arrayPtr(text.data(), text.size()));
  if (decoded.hadErrors) return false;
  out->assign(reinterpret_cast<const char*>(decoded.begin()), decoded.size());
  return true;
}

// The key just past every key starting with `prefix` (etcd's range_end for a prefix read).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    auto last = static_cast<unsigned char>(prefix.back());
    if (last < 0xff) {
      prefix.back() = static_cast<char>(last + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // Every key.
}

// A parsed JSON answer. etcd's gateway writes 64-bit numbers as strings.
class Json {
 public:
  bool Parse(std::string_view text) {
    try {
      codec_.decodeRaw(kj::arrayPtr(text.data(), text.size()), message_.initRoot<capnp::JsonValue>());
      return true;
    } catch (const kj::Exception&) {
      return false;
    }
  }
  capnp::JsonValue::Reader root() { return message_.getRoot<capnp::JsonValue>().asReader(); }

  static std::optional<capnp::JsonValue::Reader> Field(capnp::JsonValue::Reader object, std::string_view name) {
    if (!object.isObject()) return std::nullopt;
    for (auto field : object.getObject()) {
      if (std::string_view(field.getName().cStr(), field.getName().size()) == name) return field.getValue();
    }
    return std::nullopt;
  }
  static std::string Text(capnp::JsonValue::Reader object, std::string_view name) {
    auto v = Field(object, name);
    if (!v || !v->isString()) return "";
    return v->getString();
  }
  static int64_t Int(capnp::JsonValue::Reader object, std::string_view name) {
    auto v = Field(object, name);
    if (!v) return 0;
    if (v->isNumber()) {
      double d = v->getNumber();
      // Out of range (or NaN) would be undefined behaviour to convert: etcd writes 64-bit numbers as strings anyway.
      return d >= -9.0e18 && d <= 9.0e18 ? static_cast<int64_t>(d) : 0;
    }
    if (!v->isString()) return 0;
    int64_t out = 0;
    std::string_view s(v->getString().cStr(), v->getString().size());
    bool negative = !s.empty() && s[0] == '-';
    for (char c : s.substr(negative ? 1 : 0)) {
      if (c < '0' || c > '9' || out > (INT64_MAX - 9) / 10) return 0;
      out = out * 10 + (c - '0');
    }
    return negative ? -out : out;
  }

 private:
  capnp::JsonCodec codec_;
  capnp::MallocMessageBuilder message_;
};

// gRPC codes etcd answers with that mean "ask another member": unavailable, deadline exceeded, and "no leader".
bool TryAnotherMember(unsigned http_status, int64_t grpc_code, const std::string& message) {
  return http_status >= 500 && (grpc_code == 14 || grpc_code == 4 || message.find("no leader") != std::string::npos ||
                                message.find("leader changed") != std::string::npos || grpc_code == 0);
}

}  // namespace

Status CheckDirectoryPrefix(std::string_view prefix, std::string_view source) {
  bool bad_char = false;
  for (char c : prefix) bad_char = bad_char || static_cast<unsigned char>(c) <= ' ' || c == 0x7f;
  if (prefix.size() < 2 || prefix[0] != '/' || prefix.back() == '/' || bad_char || prefix.size() > 200) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: etcd key prefix '{}' must start with '/', not end with one, and hold no spaces "
                              "(e.g. \"/gpupool\")",
                              source, prefix));
  }
  return Status::Ok();
}

Status ParseDirectorySpec(std::string_view spec, EtcdConfig* config) {
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("directory '{}': {} (write \"etcd:http://HOST:2379\", several endpoints separated by "
                              "commas, https:// for TLS)",
                              spec, why));
  };
  constexpr std::string_view kScheme = "etcd:";
  if (spec.substr(0, kScheme.size()) != kScheme) return bad("only etcd directories are known");
  std::vector<std::string> endpoints;
  for (const std::string& raw : SplitList(std::string(spec.substr(kScheme.size())), ',')) {
    std::string e = raw;
    size_t scheme_end = e.find("://");
    if (scheme_end == std::string::npos) return bad(fmt::format("endpoint '{}' has no http:// or https://", e));
    std::string scheme = e.substr(0, scheme_end);
    if (scheme != "http" && scheme != "https") return bad(fmt::format("endpoint '{}' is not http or https", e));
    std::string rest = e.substr(scheme_end + 3);
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    size_t colon = rest.rfind(':');
    if (rest.empty() || rest.find('/') != std::string::npos || rest.find('@') != std::string::npos ||
        colon == std::string::npos || colon == 0) {
      return bad(fmt::format("endpoint '{}' must be SCHEME://HOST:PORT", e));
    }
    std::string port = rest.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535) {
      return bad(fmt::format("endpoint '{}' has no valid port", e));
    }
    endpoints.push_back(scheme + "://" + rest);
  }
  if (endpoints.empty()) return bad("it names no endpoint");
  config->endpoints = std::move(endpoints);
  return Status::Ok();
}

Result<kj::Own<EtcdClient>> EtcdClient::Make(kj::Network& network, kj::Timer& timer, EtcdConfig config) {
  if (config.endpoints.empty()) return Status(StatusCode::kInvalidArgument, "etcd: no endpoints");
  auto client = kj::Own<EtcdClient>(new EtcdClient(timer, std::move(config)), kj::_::HeapDisposer<EtcdClient>::instance);
  bool https = false;
  for (const auto& e : client->config_.endpoints) https = https || e.rfind("https://", 0) == 0;
  kj::Maybe<kj::Network&> tls_network;
  if (https) {
    auto made = MakeTls(client->config_.tls, false);
    if (!made.ok()) return Status(made.status().code(), "etcd TLS: " + made.status().message());
    client->tls_ = std::move(made).value();
    client->tls_network_ = client->tls_->context->wrapNetwork(network);
    tls_network = *client->tls_network_;
  }
  kj::HttpClientSettings settings;
  settings.idleTimeout = 30 * kj::SECONDS;
  client->http_ = kj::newHttpClient(timer, client->headers_, network, tls_network, settings);
  return client;
}

EtcdClient::EtcdClient(kj::Timer& timer, EtcdConfig config) : timer_(timer), config_(std::move(config)) {}
EtcdClient::~EtcdClient() = default;

kj::Promise<kj::HttpClient::Response> EtcdClient::Send(const std::string& endpoint, const std::string& path,
                                                       const std::string& body, bool with_token) {
  kj::HttpHeaders headers(headers_);
  headers.add("Content-Type", "application/json");
  if (with_token && !token_.empty()) headers.add("Authorization", kj::heapString(token_));
  auto request = http_->request(kj::HttpMethod::POST, endpoint + path, headers, static_cast<uint64_t>(body.size()));
  auto text = kj::heapString(body);
  auto sent = request.body->write(text.begin(), text.size()).attach(kj::mv(text), kj::mv(request.body));
  return sent.then([response = kj::mv(request.response)]() mutable { return kj::mv(response); });
}

kj::Promise<EtcdClient::Reply> EtcdClient::Post(const std::string& endpoint, const std::string& path,
                                                const std::string& body, bool with_token) {
  auto answered = Send(endpoint, path, body, with_token).then([](kj::HttpClient::Response&& response) {
    unsigned status = response.statusCode;
    return response.body->readAllText(kMaxReply).attach(kj::mv(response.body)).then([status](kj::String&& text) {
      return Reply{status, std::string(text.cStr(), text.size())};
    });
  });
  return timer_.timeoutAfter(config_.timeout.count() * kj::MILLISECONDS, kj::mv(answered));
}

kj::Promise<Status> EtcdClient::EnsureToken(const std::string& endpoint) {
  if (config_.user.empty() || !token_.empty()) return Status::Ok();
  return Authenticate(endpoint);
}

kj::Promise<Status> EtcdClient::Authenticate(const std::string& endpoint) {
  JsonWriter body;
  body.BeginObject().Key("name").String(config_.user).Key("password").String(config_.password).EndObject();
  return Post(endpoint, "/v3/auth/authenticate", body.str(), false).then([this, endpoint](Reply&& reply) -> Status {
    Json json;
    if (!json.Parse(reply.body)) {
      return Status(StatusCode::kUnavailable, fmt::format("etcd at {}: unreadable answer to authenticate", endpoint));
    }
    if (reply.status != 200) {
      return Status(StatusCode::kPermissionDenied,
                    fmt::format("etcd at {}: authentication as '{}' refused: {}", endpoint, config_.user,
                                Json::Text(json.root(), "message")));
    }
    token_ = Json::Text(json.root(), "token");
    if (token_.empty()) return Status(StatusCode::kPermissionDenied, fmt::format("etcd at {}: no token", endpoint));
    return Status::Ok();
  });
}

kj::Promise<Result<std::string>> EtcdClient::Call(std::string path, std::string body) {
  return CallFrom(std::move(path), std::move(body), current_, 0, false);
}

kj::Promise<Result<std::string>> EtcdClient::CallFrom(std::string path, std::string body, size_t first, size_t tried,
                                                      bool reauthenticated) {
  // Each call walks the members from the one that answered last, on its own count: two calls failing at once do
  // not make each other skip a live member.
  const size_t n = config_.endpoints.size();
  const size_t at = (first + tried) % n;
  const std::string endpoint = config_.endpoints[at];
  auto next_member = [this, path, body, first, tried, n,
                      endpoint](const std::string& why) -> kj::Promise<Result<std::string>> {
    token_.clear();  // Tokens are per member in etcd 3.4's simple tokens: the next one issues its own.
    if (tried + 1 >= n) {
      return Result<std::string>(Status(StatusCode::kUnavailable,
                                        fmt::format("etcd: no member answered ({}: {})", endpoint, why)));
    }
    GP_DEBUG("directory", "etcd {}: {}; trying {}", endpoint, why, config_.endpoints[(first + tried + 1) % n]);
    return CallFrom(path, body, first, tried + 1, false);
  };
  return EnsureToken(endpoint)
      .then([this, endpoint, path, body](Status auth) -> kj::Promise<kj::Maybe<Reply>> {
        if (!auth.ok()) {
          if (auth.code() == StatusCode::kPermissionDenied) {
            return kj::Maybe<Reply>(Reply{401, auth.message()});
          }
          return kj::Maybe<Reply>(Reply{503, auth.message()});
        }
        return Post(endpoint, path, body, true).then([](Reply&& r) { return kj::Maybe<Reply>(kj::mv(r)); });
      })
      .catch_([](kj::Exception&& e) -> kj::Maybe<Reply> {
        GP_DEBUG("directory", "etcd request failed: {}", e.getDescription().cStr());
        return nullptr;
      })
      .then([this, next_member, path, body, first, tried, reauthenticated, at,
             endpoint](kj::Maybe<Reply> maybe) mutable -> kj::Promise<Result<std::string>> {
        KJ_IF_MAYBE (reply, maybe) {
          if (reply->status == 401) {  // From Authenticate: the user or password is wrong; no member will differ.
            return Result<std::string>(Status(StatusCode::kPermissionDenied, reply->body));
          }
          if (reply->status == 200) {
            current_ = at;
            return Result<std::string>(kj::mv(reply->body));
          }
          Json json;
          const bool parsed = json.Parse(reply->body);
          std::string message = parsed ? Json::Text(json.root(), "message") : reply->body.substr(0, 200);
          int64_t code = parsed ? Json::Int(json.root(), "code") : 0;
          if (message.empty()) message = fmt::format("HTTP {}", reply->status);
          if (!config_.user.empty() && !reauthenticated &&
              (message.find("invalid auth token") != std::string::npos || code == 16)) {
            token_.clear();
            return CallFrom(path, body, first, tried, true);
          }
          if (TryAnotherMember(reply->status, code, message)) return next_member(message);
          StatusCode status = code == 7 || code == 16 ? StatusCode::kPermissionDenied
                              : code == 5             ? StatusCode::kNotFound
                                                      : StatusCode::kUnavailable;
          return Result<std::string>(Status(status, fmt::format("etcd at {}: {}", endpoint, message)));
        }
        return next_member("no answer (connection refused, reset or timed out)");
      });
}

kj::Promise<Result<EtcdRange>> EtcdClient::RangePrefix(std::string prefix) {
  JsonWriter body;
  body.BeginObject().Key("key").String(Base64(prefix)).Key("range_end").String(Base64(PrefixEnd(prefix))).EndObject();
  return Call("/v3/kv/range", body.str()).then([](Result<std::string>&& reply) -> Result<EtcdRange> {
    if (!reply.ok()) return reply.status();
    Json json;
    if (!json.Parse(*reply)) return Status(StatusCode::kUnavailable, "etcd: unreadable answer to a range read");
    EtcdRange out;
    if (auto header = Json::Field(json.root(), "header")) out.revision = Json::Int(*header, "revision");
    if (auto kvs = Json::Field(json.root(), "kvs"); kvs && kvs->isArray()) {
      for (auto kv : kvs->getArray()) {
        EtcdKeyValue item;
        if (!FromBase64(Json::Text(kv, "key"), &item.key) || !FromBase64(Json::Text(kv, "value"), &item.value)) {
          continue;  // Not etcd's base64: nothing of ours.
        }
        item.lease = Json::Int(kv, "lease");
        item.mod_revision = Json::Int(kv, "mod_revision");
        out.kvs.push_back(std::move(item));
      }
    }
    return out;
  });
}

kj::Promise<Status> EtcdClient::Put(std::string key, std::string value, int64_t lease) {
  JsonWriter body;
  body.BeginObject().Key("key").String(Base64(key)).Key("value").String(Base64(value));
  if (lease != 0) body.Key("lease").String(std::to_string(lease));
  body.EndObject();
  return Call("/v3/kv/put", body.str()).then([](Result<std::string>&& reply) { return reply.status(); });
}

kj::Promise<Status> EtcdClient::Delete(std::string key) {
  JsonWriter body;
  body.BeginObject().Key("key").String(Base64(key)).EndObject();
  return Call("/v3/kv/deleterange", body.str()).then([](Result<std::string>&& reply) { return reply.status(); });
}

kj::Promise<Result<int64_t>> EtcdClient::Grant(int64_t ttl_s) {
  JsonWriter body;
  body.BeginObject().Key("TTL").Int(ttl_s).EndObject();
  return Call("/v3/lease/grant", body.str()).then([](Result<std::string>&& reply) -> Result<int64_t> {
    if (!reply.ok()) return reply.status();
    Json json;
    if (!json.Parse(*reply)) return Status(StatusCode::kUnavailable, "etcd: unreadable answer to a lease grant");
    int64_t id = Json::Int(json.root(), "ID");
    if (id == 0) {
      return Status(StatusCode::kUnavailable, fmt::format("etcd granted no lease: {}", Json::Text(json.root(), "error")));
    }
    return id;
  });
}

kj::Promise<Result<int64_t>> EtcdClient::KeepAlive(int64_t lease) {
  JsonWriter body;
  body.BeginObject().Key("ID").String(std::to_string(lease)).EndObject();
  return Call("/v3/lease/keepalive", body.str()).then([](Result<std::string>&& reply) -> Result<int64_t> {
    if (!reply.ok()) return reply.status();
    Json json;
    if (!json.Parse(*reply)) return Status(StatusCode::kUnavailable, "etcd: unreadable answer to a keepalive");
    // A stream's message: {"result": {...}}. A lease etcd no longer has comes back without a TTL.
    auto result = Json::Field(json.root(), "result");
    if (!result) {
      return Status(StatusCode::kUnavailable, fmt::format("etcd: keepalive failed: {}", Json::Text(json.root(), "error")));
    }
    return std::max<int64_t>(0, Json::Int(*result, "TTL"));
  });
}

namespace {

// A watch's response stream: newline-separated JSON messages, {"result": {...}} each.
struct WatchStream {
  kj::Own<kj::AsyncInputStream> body;
  std::string pending;
  size_t scanned = 0;  // Bytes of `pending` searched for a newline already.
  char buffer[16384];
  std::function<void()> created;
  std::function<void(const EtcdClient::Change&)> changed;
  std::string endpoint;

  // Handles one message; a reason to stop, or "" to go on.
  std::string Take(std::string_view line) {
    Json json;
    if (!json.Parse(line)) return "an unreadable watch message";
    auto result = Json::Field(json.root(), "result");
    if (!result) return "watch failed: " + Json::Text(json.root(), "message");
    if (auto c = Json::Field(*result, "canceled"); c && c->isBoolean() && c->getBoolean()) {
      return "watch canceled: " + Json::Text(*result, "cancel_reason");
    }
    if (auto c = Json::Field(*result, "created"); c && c->isBoolean() && c->getBoolean()) created();
    auto events = Json::Field(*result, "events");
    if (!events || !events->isArray()) return "";
    for (auto event : events->getArray()) {
      auto kv = Json::Field(event, "kv");
      if (!kv) continue;
      EtcdClient::Change change;
      change.deleted = Json::Text(event, "type") == "DELETE";
      change.revision = Json::Int(*kv, "mod_revision");
      if (!FromBase64(Json::Text(*kv, "key"), &change.key)) continue;
      if (!change.deleted && !FromBase64(Json::Text(*kv, "value"), &change.value)) continue;
      changed(change);
    }
    return "";
  }

  kj::Promise<Status> Read() {
    return body->tryRead(buffer, 1, sizeof(buffer)).then([this](size_t n) -> kj::Promise<Status> {
      if (n == 0) return Status(StatusCode::kUnavailable, fmt::format("etcd at {}: the watch stream ended", endpoint));
      pending.append(buffer, n);
      size_t start = 0;
      // Only the bytes just read can hold the next newline: a long message is not searched again for every read.
      for (size_t nl; (nl = pending.find('\n', std::max(start, scanned))) != std::string::npos; start = nl + 1) {
        std::string why = Take(std::string_view(pending).substr(start, nl - start));
        if (!why.empty()) return Status(StatusCode::kUnavailable, fmt::format("etcd at {}: {}", endpoint, why));
      }
      pending.erase(0, start);
      scanned = pending.size();
      if (pending.size() > kMaxReply) {
        return Status(StatusCode::kUnavailable, fmt::format("etcd at {}: a watch message past {} bytes", endpoint,
                                                            kMaxReply));
      }
      return Read();
    });
  }
};

}  // namespace

kj::Promise<Status> EtcdClient::Watch(std::string prefix, int64_t from, std::function<void()> created,
                                      std::function<void(const Change&)> changed) {
  JsonWriter body;
  body.BeginObject().Key("create_request").BeginObject();
  body.Key("key").String(Base64(prefix)).Key("range_end").String(Base64(PrefixEnd(prefix)));
  body.Key("start_revision").String(std::to_string(from)).EndObject().EndObject();
  const std::string endpoint = config_.endpoints[current_ % config_.endpoints.size()];
  auto text = std::make_shared<std::string>(body.str());
  return EnsureToken(endpoint)
      .then([this, endpoint, text, created = std::move(created),
             changed = std::move(changed)](Status auth) mutable -> kj::Promise<Status> {
        if (!auth.ok()) return auth;
        auto stream = kj::heap<WatchStream>();
        stream->created = std::move(created);
        stream->changed = std::move(changed);
        stream->endpoint = endpoint;
        return Send(endpoint, "/v3/watch", *text, true)
            .then([stream = kj::mv(stream), endpoint](kj::HttpClient::Response&& response) mutable
                  -> kj::Promise<Status> {
              if (response.statusCode != 200) {
                return Status(StatusCode::kUnavailable,
                              fmt::format("etcd at {}: watch refused (HTTP {})", endpoint, response.statusCode));
              }
              stream->body = kj::mv(response.body);
              auto& s = *stream;
              return s.Read().attach(kj::mv(stream));
            });
      })
      .catch_([endpoint](kj::Exception&& e) {
        return Status(StatusCode::kUnavailable,
                      fmt::format("etcd at {}: watch failed: {}", endpoint, e.getDescription().cStr()));
      });
}

kj::Promise<Status> EtcdClient::Revoke(int64_t lease) {
  JsonWriter body;
  body.BeginObject().Key("ID").String(std::to_string(lease)).EndObject();
  return Call("/v3/lease/revoke", body.str()).then([](Result<std::string>&& reply) { return reply.status(); });
}

}  // namespace gpupool::internal
