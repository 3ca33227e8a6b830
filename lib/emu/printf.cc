#include "emu/printf.h"

#include <cstdio>
#include <cstring>

namespace gpupool::emu::internal {

bool FormatDevicePrintf(uint64_t format, uint64_t args,
                        const std::function<bool(uint64_t, std::string*)>& read_string,
                        const std::function<bool(uint64_t, size_t, void*)>& read_bytes, std::string* out,
                        std::string* error) {
  std::string fmt;
  if (!read_string(format, &fmt)) {
    *error = "printf format string is not in device memory";
    return false;
  }
  uint64_t offset = 0;
  auto take = [&](size_t size, void* dst) -> bool {
    offset = (offset + size - 1) / size * size;
    if (args == 0 || !read_bytes(args + offset, size, dst)) {
      *error = "printf argument buffer is not readable";
      return false;
    }
    offset += size;
    return true;
  };
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out->push_back(fmt[i]);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '%') {
      out->push_back('%');
      ++i;
      continue;
    }
    // %[flags][width][.precision][length]conversion
    size_t start = i++;
    while (i < fmt.size() && std::strchr("-+ #0", fmt[i])) ++i;
    while (i < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[i])) || fmt[i] == '*')) ++i;
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) ++i;
    }
    int longs = 0;
    bool half = false;
    while (i < fmt.size() && std::strchr("hlLqjzt", fmt[i])) {
      if (fmt[i] == 'l' || fmt[i] == 'q' || fmt[i] == 'j' || fmt[i] == 'z' || fmt[i] == 't' || fmt[i] == 'L') ++longs;
      if (fmt[i] == 'h') half = true;
      ++i;
    }
    if (i >= fmt.size()) {
      out->append(fmt, start, std::string::npos);
      break;
    }
    char conv = fmt[i];
    std::string spec = fmt.substr(start, i - start);
    // Rebuild the spec without length modifiers; we pass 64-bit values with ll.
    std::string base;
    for (char c : spec) {
      if (!std::strchr("hlLqjzt", c)) base.push_back(c);
    }
    char buf[512];
    switch (conv) {
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': case 'c': {
        uint64_t v = 0;
        if (longs > 0) {
          if (!take(8, &v)) return false;
        } else {
          uint32_t v32 = 0;
          if (!take(4, &v32)) return false;
          bool is_signed = conv == 'd' || conv == 'i';
          v = is_signed ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(v32))) : v32;
          if (half) v = is_signed ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(v32))) : (v32 & 0xffff);
        }
        if (conv == 'c') {
          std::snprintf(buf, sizeof(buf), (base + "c").c_str(), static_cast<int>(v));
        } else {
          std::snprintf(buf, sizeof(buf), (base + "ll" + conv).c_str(), static_cast<long long>(v));
        }
        out->append(buf);
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A': {
        double d = 0;
        if (!take(8, &d)) return false;
        std::snprintf(buf, sizeof(buf), (base + conv).c_str(), d);
        out->append(buf);
        break;
      }
      case 'p': {
        uint64_t v = 0;
        if (!take(8, &v)) return false;
        std::snprintf(buf, sizeof(buf), (base + "p").c_str(), reinterpret_cast<void*>(v));
        out->append(buf);
        break;
      }
      case 's': {
        uint64_t p = 0;
        if (!take(8, &p)) return false;
        std::string s;
        if (p == 0) s = "(null)";
        else if (!read_string(p, &s)) s = "(bad string)";
        std::string f = base + "s";
        int n = std::snprintf(nullptr, 0, f.c_str(), s.c_str());
        std::string tmp(static_cast<size_t>(n) + 1, '\0');
        std::snprintf(tmp.data(), tmp.size(), f.c_str(), s.c_str());
        tmp.resize(static_cast<size_t>(n));
        out->append(tmp);
        break;
      }
      default:
        out->append(spec);
        out->push_back(conv);
    }
  }
  return true;
}

}  // namespace gpupool::emu::internal
