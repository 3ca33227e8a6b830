// A decoder for raw LZ4 blocks, the format nvcc writes into fatbins built with --compress-mode=speed (no LZ4 frame
// header, no checksum: the fatbin entry header carries both sizes). Written here to avoid a dependency for ~60
// lines of code.
#ifndef GPUPOOL_EMU_LZ4_H_
#define GPUPOOL_EMU_LZ4_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpupool::emu {

// Decodes the LZ4 block [src, src + src_size) into [dst, dst + dst_size). The block must decode to exactly
// dst_size bytes and consume exactly src_size bytes. Never reads or writes outside the two buffers, whatever
// the input. Returns "" on success, else what is wrong with the block ("match offset 70000 reaches before the
// start of the output", ...), with the byte position where it was found.
std::string Lz4DecompressBlock(const uint8_t* src, size_t src_size, uint8_t* dst, size_t dst_size);

}  // namespace gpupool::emu

#endif  // GPUPOOL_EMU_LZ4_H_
