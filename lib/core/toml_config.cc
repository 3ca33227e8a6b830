#include "core/toml_config.h"

#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "gpupool/units.h"

namespace gpupool {
namespace {

Result<TomlFile> FromParseError(const toml::parse_error& e, const std::string& name) {
  return Status(StatusCode::kInvalidArgument,
                fmt::format("{}:{}:{}: malformed TOML: {}", name, e.source().begin.line, e.source().begin.column,
                            e.description()));
}

}  // namespace

Result<TomlFile> TomlFile::Load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Status(StatusCode::kNotFound, fmt::format("{}: no such file", path));
  }
  // A directory reads as no text at all, which would pass for an empty file: every key at its default, silently.
  if (std::filesystem::is_directory(path, ec)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{} is a directory; name the TOML file itself", path));
  }
  TomlFile file;
  file.path_ = path;
  try {
    file.root_ = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return FromParseError(e, path);
  }
  return file;
}

Result<TomlFile> TomlFile::Parse(std::string_view text, const std::string& name) {
  TomlFile file;
  file.path_ = name;
  try {
    file.root_ = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return FromParseError(e, name);
  }
  return file;
}

Status TomlFile::Error(const toml::node& node, std::string_view message) const {
  return Status(StatusCode::kInvalidArgument, fmt::format("{}:{}: {}", path_, node.source().begin.line, message));
}

Status TomlFile::CheckKeys(const toml::table& table, std::initializer_list<std::string_view> allowed,
                           std::string_view section) const {
  for (const auto& [key, node] : table) {
    bool known = false;
    for (auto a : allowed) known = known || a == key.str();
    if (!known) {
      std::string names;
      for (auto a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{}:{}: unknown key '{}' in {} (known keys: {})", path_, key.source().begin.line,
                                key.str(), section, names));
    }
  }
  return Status::Ok();
}

namespace {

// Reads `key` of `t` into *out when it is there as a T; `kind` says what it must be otherwise.
template <typename T>
Status GetExact(const TomlFile& file, const toml::table& t, std::string_view key, const char* kind, T* out) {
  const toml::node* node = t.get(key);
  if (!node) return Status::Ok();
  std::optional<T> value = node->value_exact<T>();
  if (!value) return file.Error(*node, fmt::format("'{}' must be {}", key, kind));
  *out = std::move(*value);
  return Status::Ok();
}

}  // namespace

Status TomlFile::GetString(const toml::table& t, std::string_view key, std::string* out) const {
  return GetExact(*this, t, key, "a string", out);
}

Status TomlFile::GetInt(const toml::table& t, std::string_view key, int64_t* out) const {
  return GetExact(*this, t, key, "an integer", out);
}

Status TomlFile::GetBool(const toml::table& t, std::string_view key, bool* out) const {
  return GetExact(*this, t, key, "true or false", out);
}

Status TomlFile::GetMemory(const toml::table& t, std::string_view key, uint64_t* out) const {
  const toml::node* node = t.get(key);
  if (!node) return Status::Ok();
  if (node->is_integer()) {
    int64_t v = node->as_integer()->get();
    if (v <= 0) return Error(*node, fmt::format("'{}' must be a positive size", key));
    *out = static_cast<uint64_t>(v);
    return Status::Ok();
  }
  if (!node->is_string()) return Error(*node, fmt::format("'{}' must be a size such as \"16GiB\"", key));
  auto parsed = ParseMemorySize(node->as_string()->get());
  if (!parsed.ok()) return Error(*node, parsed.status().message());
  *out = *parsed;
  return Status::Ok();
}

Status TomlFile::GetDuration(const toml::table& t, std::string_view key, std::chrono::milliseconds* out) const {
  const toml::node* node = t.get(key);
  if (!node) return Status::Ok();
  if (node->is_integer() || node->is_floating_point()) {
    double seconds = node->value<double>().value_or(-1);
    if (seconds < 0) return Error(*node, fmt::format("'{}' must not be negative", key));
    *out = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    return Status::Ok();
  }
  if (!node->is_string()) return Error(*node, fmt::format("'{}' must be a duration such as \"5s\"", key));
  auto parsed = ParseDuration(node->as_string()->get());
  if (!parsed.ok()) return Error(*node, parsed.status().message());
  *out = *parsed;
  return Status::Ok();
}

Status TomlFile::GetStringList(const toml::table& t, std::string_view key, std::vector<std::string>* out) const {
  const toml::node* node = t.get(key);
  if (!node) return Status::Ok();
  const toml::array* array = node->as_array();
  if (!array) return Error(*node, fmt::format("'{}' must be a list of strings", key));
  out->clear();
  for (const auto& item : *array) {
    if (!item.is_string()) return Error(item, fmt::format("'{}' must contain only strings", key));
    out->push_back(item.as_string()->get());
  }
  return Status::Ok();
}

}  // namespace gpupool
