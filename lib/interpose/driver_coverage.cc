// driver_coverage: prints the README's table of the CUDA driver API families gpupool's libcuda.so.1 implements,
// from the library's own objects: every function of cuda.h (and cudaProfiler.h) by its doxygen group, and for
// each whether a hand-written implementation replaced its generated stub (which answers CUDA_ERROR_NOT_SUPPORTED
// and names itself in the log). Nothing in the table is written by hand; scripts/coverage-table.sh puts it into
// README.md and the test interpose.coverage_table checks that the README's copy is current.
//
// usage: driver_coverage   (markdown on stdout)
#include <cstdio>
#include <string>
#include <vector>

#include "driver_tables.h"

namespace {

bool Implemented(int symbol) {
  return gpupool_interpose_symbol_addresses[symbol] != gpupool_interpose_stub_addresses[symbol];
}

struct Family {
  int names = 0, implemented = 0;
  std::vector<std::string> refused;  // Names with no implemented variant.
  std::vector<std::string> partly;   // Names whose current variant is refused: "cuFoo (not cuFoo_ptsz)".
  int superseded = 0;  // Refused older ABI variants of implemented names (CUDA 3.1's 32-bit cuMemAlloc, ...).
};

std::string Code(const std::string& s) { return "`" + s + "`"; }

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

int main() {
  std::vector<Family> families(gpupool_interpose_family_count);
  int names = 0, implemented = 0;
  for (int n = 0; n < gpupool_interpose_name_count; ++n) {
    const GpupoolProcName& name = gpupool_interpose_names[n];
    std::vector<int> symbols;
    for (int v = 0; v < name.legacy_count; ++v) symbols.push_back(gpupool_interpose_variants[name.legacy_begin + v].symbol);
    for (int v = 0; v < name.per_thread_count; ++v) {
      symbols.push_back(gpupool_interpose_variants[name.per_thread_begin + v].symbol);
    }
    // The variants in force today (cudart asks for them): the newest legacy one and the newest per-thread one;
    // older ones are superseded ABIs.
    const int current = name.legacy_count > 0
                            ? gpupool_interpose_variants[name.legacy_begin + name.legacy_count - 1].symbol
                            : -1;
    const int current_per_thread =
        name.per_thread_count > 0
            ? gpupool_interpose_variants[name.per_thread_begin + name.per_thread_count - 1].symbol
            : -1;
    std::vector<std::string> missing;
    int done = 0, superseded = 0;
    for (size_t i = 0; i < symbols.size(); ++i) {
      bool repeated = false;  // Several versions may name one variant.
      for (size_t j = 0; j < i; ++j) repeated = repeated || symbols[j] == symbols[i];
      if (repeated) continue;
      if (Implemented(symbols[i])) {
        ++done;
      } else if (symbols[i] != current && symbols[i] != current_per_thread) {
        ++superseded;
      } else {
        missing.push_back(Code(gpupool_interpose_symbol_names[symbols[i]]));
      }
    }
    Family& f = families[name.family];
    ++f.names;
    ++names;
    if (done == 0) {
      f.refused.push_back(Code(name.name));
      continue;
    }
    ++f.implemented;
    ++implemented;
    f.superseded += superseded;
    if (!missing.empty()) f.partly.push_back(Code(name.name) + " (not " + Join(missing) + ")");
  }

  std::printf("| API family (cuda.h) | implemented | refused: `CUDA_ERROR_NOT_SUPPORTED`, named in the log |\n");
  std::printf("| --- | --- | --- |\n");
  for (int i = 0; i < gpupool_interpose_family_count; ++i) {
    const Family& f = families[i];
    if (f.names == 0) continue;
    std::string refused = Join(f.refused);
    if (!f.partly.empty()) refused += std::string(refused.empty() ? "" : "; ") + "some variants: " + Join(f.partly);
    if (f.superseded > 0) {
      refused += std::string(refused.empty() ? "" : "; ") + std::to_string(f.superseded) +
                 " superseded ABI variant(s) of implemented functions";
    }
    if (refused.empty()) refused = "none";
    std::printf("| %s | %d of %d | %s |\n", gpupool_interpose_family_names[i], f.implemented, f.names,
                refused.c_str());
  }
  std::printf("| **all** | **%d of %d** | |\n", implemented, names);
  return 0;
}
