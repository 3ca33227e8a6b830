// A minimal streaming JSON writer for the tools' --json output.
#ifndef GPUPOOL_CORE_JSON_H_
#define GPUPOOL_CORE_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& UInt(uint64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  const std::string& str() const { return out_; }

 private:
  void Separate();
  // Opens an object or array with `bracket`; Close ends it with its closing bracket.
  JsonWriter& Open(char bracket);
  JsonWriter& Close(char bracket);
  std::string out_;
  std::vector<bool> first_;  // Per open container: no element written yet.
  bool after_key_ = false;
};

std::string JsonEscape(std::string_view text);

}  // namespace gpupool

#endif  // GPUPOOL_CORE_JSON_H_
