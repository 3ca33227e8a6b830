// ptx_survey: loads PTX files on an emulated device and tallies why those it refuses are refused, so that the
// emulator's gaps in what NVIDIA's libraries carry (scripts/ptx-survey.sh extracts their PTX) are counted, not
// guessed.
//
//   ptx_survey [--cc MAJOR.MINOR] [--list] FILE...
// Prints one line per refusal reason (the loader's message with names, numbers and line numbers taken out), most
// frequent first, then how many files loaded. --list also prints each refused file with its message.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "emu/device.h"

namespace {

// The reason without what differs between files: line numbers, quoted names, numbers.
std::string Reason(const std::string& message) {
  std::string out;
  for (size_t i = 0; i < message.size(); ++i) {
    char c = message[i];
    if (c == '\'') {
      // Keep the first word of a quoted instruction or directive ("unsupported instruction 'cp.async.bulk...'"),
      // drop quoted names.
      size_t end = message.find('\'', i + 1);
      std::string quoted = message.substr(i + 1, end == std::string::npos ? std::string::npos : end - i - 1);
      if (out.find("instruction") != std::string::npos || out.find("directive") != std::string::npos) {
        out += "'" + quoted.substr(0, quoted.find(' ')) + "'";
      } else {
        out += "'…'";
      }
      i = end == std::string::npos ? message.size() : end;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      while (i + 1 < message.size() && std::isdigit(static_cast<unsigned char>(message[i + 1]))) ++i;
      out += 'N';
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  gpupool::emu::DeviceOptions options;
  options.cc_major = 12;
  options.cc_minor = 0;
  options.memory_bytes = 1ull << 30;
  bool list = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cc") == 0 && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d.%d", &options.cc_major, &options.cc_minor) != 2) {
        std::fprintf(stderr, "ptx_survey: --cc takes MAJOR.MINOR, e.g. 12.0\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--list") == 0) {
      list = true;
    } else {
      files.emplace_back(argv[i]);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: ptx_survey [--cc MAJOR.MINOR] [--list] FILE...\n");
    return 2;
  }
  gpupool::emu::Device device(options);
  std::map<std::string, int> reasons;
  int loaded = 0;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "ptx_survey: cannot read %s\n", path.c_str());
      return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    gpupool::emu::Module* module = nullptr;
    gpupool::CallStatus s = device.LoadPtx(text.str(), &module);
    if (s.ok()) {
      ++loaded;
      device.UnloadModule(module);
      continue;
    }
    ++reasons[Reason(s.message())];
    if (list) std::printf("refused %s: %s\n", path.c_str(), s.message().c_str());
  }
  std::vector<std::pair<int, std::string>> sorted;
  for (auto& [reason, count] : reasons) sorted.emplace_back(count, reason);
  std::sort(sorted.rbegin(), sorted.rend());
  for (auto& [count, reason] : sorted) std::printf("%6d  %s\n", count, reason.c_str());
  std::printf("loaded %d of %zu PTX files on an emulated device of compute capability %d.%d\n", loaded, files.size(),
              options.cc_major, options.cc_minor);
  return 0;
}
