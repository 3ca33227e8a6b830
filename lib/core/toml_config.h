// Strict TOML reading for gpupool's config files: unknown keys and wrong types are errors that name the file
// and line, so a typo never silently falls back to a default.
#ifndef GPUPOOL_CORE_TOML_CONFIG_H_
#define GPUPOOL_CORE_TOML_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "gpupool/status.h"

namespace gpupool {

class TomlFile {
 public:
  // Parses `path`; kNotFound if it does not exist, kInvalidArgument "path:line:col: why" if malformed.
  static Result<TomlFile> Load(const std::string& path);
  // Parses text (for tests and embedded configs); `name` stands in for the path in messages.
  static Result<TomlFile> Parse(std::string_view text, const std::string& name);

  const toml::table& root() const { return root_; }
  const std::string& path() const { return path_; }

  // kInvalidArgument naming the first key of `table` not in `allowed`, with its line.
  Status CheckKeys(const toml::table& table, std::initializer_list<std::string_view> allowed,
                   std::string_view section) const;
  // Each getter leaves *out untouched when the key is absent and fails when it has the wrong type or value.
  Status GetString(const toml::table& t, std::string_view key, std::string* out) const;
  Status GetInt(const toml::table& t, std::string_view key, int64_t* out) const;
  Status GetBool(const toml::table& t, std::string_view key, bool* out) const;
  // A string such as "16GiB", or an integer number of bytes.
  Status GetMemory(const toml::table& t, std::string_view key, uint64_t* out) const;
  // A string such as "5s" or "500ms", or a number of seconds.
  Status GetDuration(const toml::table& t, std::string_view key, std::chrono::milliseconds* out) const;
  Status GetStringList(const toml::table& t, std::string_view key, std::vector<std::string>* out) const;
  // "path:line: message" for a node.
  Status Error(const toml::node& node, std::string_view message) const;

 private:
  toml::table root_;
  std::string path_;
};

}  // namespace gpupool

#endif  // GPUPOOL_CORE_TOML_CONFIG_H_
