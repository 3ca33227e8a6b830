// The properties of an emulated device of a compute capability: what libcuda.so.1's fake devices report too, so this
// lives in gpupool_emu_formats, without the interpreter.
#include <algorithm>
#include <cstdint>
#include <string>

#include "emu/device.h"

namespace gpupool::emu {

// Per capability: the multiprocessor limits from NVIDIA's own table (CCCL's cuda/__device/arch_traits.h, shipped
// with CUDA 13; the CUDA C++ Programming Guide's "Technical Specifications per Compute Capability" for 5.x and 7.2),
// and the multiprocessor count and L2 size of the product named.
DeviceProperties PropertiesOfCapability(int cc_major, int cc_minor) {
  struct Row {
    int cc;
    const char* product;
    int multiprocessors;
    int shared_per_sm_kib, shared_optin_kib, threads_per_sm, blocks_per_sm, registers_per_block;
    int l2_kib;
  };
  static constexpr Row kRows[] = {
      {50, "GeForce GTX 750 Ti", 5, 64, 48, 2048, 32, 65536, 2048},
      {52, "Tesla M40", 24, 96, 48, 2048, 32, 65536, 3072},
      {53, "Jetson TX1", 2, 64, 48, 2048, 32, 32768, 256},
      {60, "Tesla P100", 56, 64, 48, 2048, 32, 65536, 4096},
      {61, "Tesla P40", 30, 96, 48, 2048, 32, 65536, 3072},
      {62, "Jetson TX2", 2, 64, 48, 2048, 32, 32768, 512},
      {70, "Tesla V100", 80, 96, 96, 2048, 32, 65536, 6144},
      {72, "Jetson AGX Xavier", 8, 96, 96, 2048, 32, 65536, 512},
      {75, "Tesla T4", 40, 64, 64, 1024, 16, 65536, 4096},
      {80, "A100", 108, 164, 163, 2048, 32, 65536, 40960},
      {86, "A10", 72, 100, 99, 1536, 16, 65536, 6144},
      {87, "Jetson AGX Orin", 16, 164, 163, 1536, 16, 65536, 4096},
      {89, "L4", 58, 100, 99, 1536, 24, 65536, 49152},
      {90, "H100 SXM", 132, 228, 227, 2048, 32, 65536, 51200},
      {120, "GeForce RTX 5090", 170, 100, 99, 1536, 24, 65536, 98304},
      // GB10 (DGX Spark): its L2 size is not in NVIDIA's datasheets; 24 MiB as public reports give it.
      {121, "GB10", 48, 100, 99, 1536, 24, 65536, 24576},
      // No product: a capability newer than every architecture CUDA 13's libraries carry SASS for, so that those
      // choosing kernels by capability (cuBLAS, cuBLASLt, cuSOLVER) take their forward-compatible PTX, which the
      // emulator runs, instead of SASS-only cubins, which it cannot. The limits of the newest GPU it stands for.
      {130, "GB10", 48, 100, 99, 1536, 24, 65536, 24576},
  };
  const int cc = cc_major * 10 + cc_minor;
  const Row* row = nullptr;
  const Row* t4 = nullptr;
  for (const Row& r : kRows) {
    if (r.cc == cc) row = &r;
    if (r.cc == 75) t4 = &r;
  }
  if (row == nullptr) row = t4;  // Not a capability gpupool emulates: a T4, the default.
  DeviceProperties p;
  p.cc_major = cc_major;
  p.cc_minor = cc_minor;
  p.multiprocessor_count = row->multiprocessors;
  p.shared_memory_per_multiprocessor = row->shared_per_sm_kib * 1024;
  p.shared_memory_per_block_optin = row->shared_optin_kib * 1024;
  p.reserved_shared_memory_per_block = cc >= 80 ? 1024 : 0;
  p.max_threads_per_multiprocessor = row->threads_per_sm;
  p.max_blocks_per_multiprocessor = row->blocks_per_sm;
  p.registers_per_block = row->registers_per_block;
  p.registers_per_multiprocessor = 65536;
  p.l2_cache_size = row->l2_kib * 1024;
  return p;
}

}  // namespace gpupool::emu
