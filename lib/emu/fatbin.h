// Kernel images as CUDA hands them over: a fatbin wrapper (what cudart registers), a raw fatbin container, or
// PTX text. Finds the PTX best suited to a device and returns it as text.
#ifndef GPUPOOL_EMU_FATBIN_H_
#define GPUPOOL_EMU_FATBIN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/call_status.h"

namespace gpupool::emu {

struct FatbinEntry {
  enum class Kind { kPtx = 1, kElf = 2, kUnknown = 0 };
  Kind kind = Kind::kUnknown;
  int arch = 0;            // 75 for sm_75 / compute_75.
  uint32_t flags = 0;      // 0x2 debug, 0x2000 LZ4, 0x8000 zstd, 0x100000 arch-specific "a" target.
  int version_major = 0, version_minor = 0;  // PTX ISA or ELF version of the entry.
  uint64_t payload_offset = 0;    // From the start of the container.
  uint64_t payload_size = 0;      // Bytes stored (compressed size when compressed).
  uint64_t uncompressed_size = 0;
  bool compressed() const { return (flags & (0x2000 | 0x8000)) != 0; }
};

// Walks one fatbin container (magic 0xBA55ED50). Fails with kInvalidImage naming what is wrong (bad magic,
// truncated header or entry, entry beyond the end) and never reads outside [data, data + size).
CallResult<std::vector<FatbinEntry>> ParseFatbinContainer(const uint8_t* data, size_t size);

// The payload of one entry, decompressed (zstd or LZ4) as needed; PTX keeps its text and drops the trailing NUL.
CallResult<std::string> ExtractEntry(const uint8_t* container, size_t size, const FatbinEntry& entry);

// Accepts a fatbin wrapper (magic 0x466243B1, version 1 or 2, pointing at a container), a raw container, or PTX
// text (starts, after whitespace/comments, with a directive such as ".version"). `size` is the buffer's size
// when known, or 0 when only the pointer is (the wrapper and container headers then give the size).
// Returns the PTX for a device of compute capability `arch` (e.g. 75): the highest PTX arch <= `arch`.
// A container followed by PTX text (its size counting both) gives that text: how gpupool's libcuda hands over the
// translation units of a device-linked binary (PrelinkedPtx) beside the container the real driver reads.
// A container with no usable PTX fails with kNoBinaryForGpu and the message
// "no PTX in this binary; rebuild with PTX (e.g. -arch=compute_75)"; corrupt input fails with kInvalidImage.
CallResult<std::string> PtxForDevice(const void* image, size_t size, int arch);

// nvcc -rdc=true registers the device-linked fatbin (SASS only) through a version-2 wrapper whose last field lists
// the translation units' own fatbins (NULL-terminated), each with its PTX. Returns that PTX, the best for `arch`
// from each unit, one module after another: a linked image (emu/ptx_link.h). Fails with kNoBinaryForGpu naming
// the unit that has none; returns an empty string when `wrapper` is no such wrapper.
CallResult<std::string> PrelinkedPtx(const void* wrapper, int arch);

// The number of bytes the image occupies (wrapper: its container), so callers can copy an image given only a
// pointer (cuLibraryLoadData). 0 when the image is not recognised. PTX: strlen + 1.
size_t ImageSize(const void* image);

}  // namespace gpupool::emu

#endif  // GPUPOOL_EMU_FATBIN_H_
