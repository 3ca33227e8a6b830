#include "emu/ptx_text.h"

#include <cctype>

namespace gpupool::emu {

std::vector<std::string_view> SplitPtxModules(std::string_view text) {
  std::vector<size_t> starts;
  size_t line = 0;
  while (line < text.size()) {
    size_t first = text.find_first_not_of(" \t", line);
    if (first != std::string_view::npos && text.compare(first, 8, ".version") == 0 &&
        (first + 8 == text.size() || text[first + 8] == ' ' || text[first + 8] == '\t')) {
      starts.push_back(starts.empty() ? 0 : line);
    }
    size_t end = text.find('\n', line);
    if (end == std::string_view::npos) break;
    line = end + 1;
  }
  if (starts.size() <= 1) return {text};
  std::vector<std::string_view> out;
  for (size_t i = 0; i < starts.size(); ++i) {
    size_t end = i + 1 < starts.size() ? starts[i + 1] : text.size();
    out.push_back(text.substr(starts[i], end - starts[i]));
  }
  return out;
}

namespace {

bool IdentifierChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

}  // namespace

bool IsDeviceLaunchFunction(std::string_view name) {
  constexpr std::string_view kCdp2 = "__cudaCDP2", kCuda = "cuda";
  if (name.substr(0, kCdp2.size()) == kCdp2) {
    name.remove_prefix(kCdp2.size());
  } else if (name.substr(0, kCuda.size()) == kCuda) {
    name.remove_prefix(kCuda.size());
  } else {
    return false;
  }
  for (std::string_view base : {"LaunchDevice", "GetParameterBuffer"}) {
    if (name == base ||
        (name.size() == base.size() + 2 && name.substr(0, base.size()) == base && name.substr(base.size()) == "V2")) {
      return true;
    }
  }
  return false;
}

std::string DeviceLaunchNamedIn(std::string_view ptx) {
  for (std::string_view marker : {"LaunchDevice", "GetParameterBuffer"}) {
    for (size_t at = ptx.find(marker); at != std::string_view::npos; at = ptx.find(marker, at + 1)) {
      size_t begin = at, end = at + marker.size();
      while (begin > 0 && IdentifierChar(ptx[begin - 1])) --begin;
      while (end < ptx.size() && IdentifierChar(ptx[end])) ++end;
      std::string_view name = ptx.substr(begin, end - begin);
      if (IsDeviceLaunchFunction(name)) return std::string(name);
    }
  }
  return {};
}

std::string DeviceLaunchRefusal(std::string_view caller, std::string_view function) {
  std::string who = caller.empty() ? std::string("this module") : "'" + std::string(caller) + "'";
  return who + " launches kernels from the device (it calls " + std::string(function) +
         ": CUDA dynamic parallelism, built with -rdc=true): the emulated device does not support device-side "
         "kernel launches; launch the kernels from the host";
}

}  // namespace gpupool::emu
