#include "client/request_flags.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "gpupool/units.h"

namespace gpupool {
namespace {

Status Invalid(std::string why) { return Status(StatusCode::kInvalidArgument, std::move(why)); }

}  // namespace

Status ParseRequestFlags(std::string_view text, RequestFlags* flags) {
  std::vector<std::string_view> words;
  for (size_t pos = 0; pos < text.size();) {
    size_t start = text.find_first_not_of(" \t\n\v\f\r", pos);
    if (start == std::string_view::npos) break;
    size_t end = std::min(text.find_first_of(" \t\n\v\f\r", start), text.size());
    words.push_back(text.substr(start, end - start));
    pos = end;
  }
  for (size_t i = 0; i < words.size(); ++i) {
    std::string_view option = words[i], value;
    bool has_value = false;
    if (size_t eq = option.find('='); option.substr(0, 2) == "--" && eq != std::string_view::npos) {
      value = option.substr(eq + 1);
      option = option.substr(0, eq);
      has_value = true;
    }
    const std::string name(option);
    if (option == "--same-server" || option == "--spread") {
      flags->spread = option == "--same-server" ? Spread::kSameServer : Spread::kSpread;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= words.size()) return Invalid(name + " needs a value");
      value = words[++i];
    }
    if (option == "-n" || option == "--count") {
      int n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size()) {
        return Invalid("-n: '" + std::string(value) + "' is not a count");
      }
      flags->count = n;
    } else if (option == "-p" || option == "--fraction") {
      flags->fraction = value;
    } else if (option == "-m" || option == "--memory") {
      flags->memory = value;
    } else if (option == "--wait") {
      flags->wait = value;
    } else if (option == "--class") {
      flags->device_class = value;
    } else if (option == "--servers") {
      flags->servers = value;
      flags->servers_given = true;
    } else {
      return Invalid("unknown option '" + name + "'");
    }
  }
  return Status::Ok();
}

Status BuildRequest(const RequestFlags& flags, Request* request, PoolOptions* options) {
  request->count = flags.count;
  if (!flags.fraction.empty()) {
    auto f = ParseFraction(flags.fraction);
    if (!f.ok()) return Invalid("-p: " + f.status().message());
    request->fraction = *f;
  }
  if (!flags.memory.empty()) {
    auto m = ParseMemorySize(flags.memory);
    if (!m.ok()) return Invalid("-m: " + m.status().message());
    request->memory_bytes = *m;
  }
  if (!flags.wait.empty()) {
    auto d = ParseDuration(flags.wait);
    if (!d.ok()) return Invalid("--wait: " + d.status().message());
    request->wait = *d;
  }
  request->device_class = flags.device_class;
  request->spread = flags.spread;
  return SplitServers(flags.servers, flags.servers_given, &options->servers);
}

Status SplitServers(std::string_view text, bool given, std::vector<std::string>* servers) {
  const size_t before = servers->size();
  for (size_t pos = 0; pos < text.size();) {
    size_t comma = std::min(text.find(',', pos), text.size());
    if (comma > pos) servers->emplace_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  if (given && servers->size() == before) {
    return Invalid("--servers names no servers: give agent addresses (host:port or unix:/path), or leave the flag out "
                   "to use $GPUPOOL_SERVERS or the pool file");
  }
  return Status::Ok();
}

}  // namespace gpupool
