// libFuzzer target for the PTX parser (lib/emu/ptx_parser.cc): any text either parses or fails with kInvalidPtx and
// a message, never crashes. Built by tests/fuzz/run.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "emu/ptx_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto module = gpupool::emu::ParsePtx(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!module.ok() &&
      (module.status().code() != gpupool::cu::kInvalidPtx || module.status().message().empty())) {
    std::fprintf(stderr, "ParsePtx failed with code %d and message \"%s\"\n", static_cast<int>(module.status().code()),
                 module.status().message().c_str());
    std::abort();
  }
  return 0;
}
