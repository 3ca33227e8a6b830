// Texture and surface objects of the emulated GPU (cuTexObjectCreate, cuSurfObjectCreate): what a kernel's tex,
// tld4, suld and sust instructions read through a 64-bit handle.
//
// Why the handle is an index into a table of the device, not an address: a texture object is a plain 64-bit kernel
// argument that the kernel resolves on the device, and everything the kernel can write is the tenant's. Handles
// were once the addresses of descriptors in the context's device memory, checked only by a magic word: a kernel
// handed the address of a record it wrote itself (200 channels, a zero width) made the interpreter write past its
// stack or divide by zero. So, as a GPU keeps its texture headers in a descriptor heap that kernels cannot write,
// the device keeps its objects' descriptions in a TextureTable that only the device itself (its queue, in stream
// order) writes, and a handle is an opaque number naming an entry (see TextureTable for its layout): a forged or
// stale handle names nothing, and nothing a tenant writes reaches a description.
#ifndef GPUPOOL_EMU_TEXTURE_H_
#define GPUPOOL_EMU_TEXTURE_H_

#include <cstdint>
#include <vector>

namespace gpupool::emu {

// Element formats of textures and surfaces (CUarray_format's integer and float formats).
enum class TexFormat : uint8_t { kU8, kS8, kU16, kS16, kHalf, kU32, kS32, kF32 };

// Bytes of one channel of `format`.
constexpr uint32_t TexFormatBytes(TexFormat format) {
  switch (format) {
    case TexFormat::kU8: case TexFormat::kS8: return 1;
    case TexFormat::kU16: case TexFormat::kS16: case TexFormat::kHalf: return 2;
    default: return 4;
  }
}

// Address modes, in CUaddress_mode's order (CU_TR_ADDRESS_MODE_WRAP = 0 ... _BORDER = 3).
enum class TexAddress : uint8_t { kWrap, kClamp, kMirror, kBorder };

// What a texture or surface object describes. Plain data, held in the device's TextureTable.
struct TextureDesc {
  bool surface = false;      // A surface object (suld/sust) rather than a texture object (tex/tld4).
  uint8_t dims = 1;          // 1, 2 or 3 (a layered array: 1 or 2, with `layers` set).
  uint8_t channels = 1;      // 1, 2 or 4.
  TexFormat format = TexFormat::kF32;
  uint64_t base = 0;         // Device address of texel (0, 0, 0) of layer 0.
  uint64_t pitch = 0;        // Bytes from one row to the next.
  uint64_t slice_pitch = 0;  // Bytes from one depth slice (or layer) to the next.
  uint32_t width = 1, height = 1, depth = 1;  // Texels; unused dimensions are 1.
  uint32_t layers = 0;       // 0: not layered; else the number of layers (depth must be 1).
  // Texture sampling state (ignored for surfaces).
  TexAddress address[3] = {TexAddress::kWrap, TexAddress::kWrap, TexAddress::kWrap};
  bool linear_filter = false;       // CU_TR_FILTER_MODE_LINEAR; else point sampling.
  bool normalized_coords = false;   // CU_TRSF_NORMALIZED_COORDINATES.
  bool read_as_integer = false;     // CU_TRSF_READ_AS_INTEGER: 8/16-bit integers are not mapped to [0,1]/[-1,1].
  bool srgb = false;                // CU_TRSF_SRGB: 8-bit unsigned RGB channels are sRGB-decoded.
  // A resource of linear memory (cuTexObjectCreate with CU_RESOURCE_TYPE_LINEAR, tex1Dfetch): an out-of-range
  // index reads zero, whatever the address mode says (see exec_tex.inc).
  bool linear_resource = false;
  float border[4] = {0, 0, 0, 0};   // CU_TR_ADDRESS_MODE_BORDER's colour.

  uint32_t ElementBytes() const { return TexFormatBytes(format) * channels; }
  // Slices of depth, or layers: how many `slice_pitch` steps the resource spans.
  uint32_t Slices() const { return layers ? layers : depth; }
  // Bytes from `base` to the end of the last texel; 0 when the extents are empty or the span overflows 2^48.
  uint64_t SpanBytes() const {
    if (width == 0 || height == 0 || Slices() == 0) return 0;
    const unsigned __int128 span = static_cast<unsigned __int128>(Slices() - 1) * slice_pitch +
                                   static_cast<unsigned __int128>(height - 1) * pitch +
                                   static_cast<unsigned __int128>(width) * ElementBytes();
    return span > (static_cast<unsigned __int128>(1) << 48) ? 0 : static_cast<uint64_t>(span);
  }
};

// The texture and surface objects of one device as its kernels see them: the device's descriptor heap.
//
// A handle is, from the high bits down: kHandleTag (8 bits: no address of a 64-bit process has it, so a handle is
// never mistaken for a pointer, nor a pointer for a handle), the device's salt (16 bits), the entry's slot
// (16 bits) and the entry's generation (24 bits, never 0), which changes each time the slot is given to a new
// object, so that a destroyed object's handle stays refused after its slot is reused (until the same slot has
// been reused 2^24 times; the device hands out fresh slots before reusing any, and reuses the longest free
// first). The salt keeps the handles of different devices apart: the interposer keys one table of objects by
// handle over every slice of a program (interpose/texture.cc), and each slice's device sits in a window of its own.
//
// Thread safety: none. The device writes the table only from its queue's executor, between kernels, and kernels
// read it while they run; so a kernel sees exactly the objects created before it and not destroyed before it, in
// the device's one queue order.
class TextureTable {
 public:
  static constexpr uint64_t kHandleTag = 0xE7;
  static constexpr uint32_t kCapacity = 1u << 16;          // Live objects per device at once.
  static constexpr uint32_t kGenerationMask = (1u << 24) - 1;

  explicit TextureTable(uint16_t salt = 0) : salt_(salt) {}

  static uint64_t Handle(uint16_t salt, uint32_t slot, uint32_t generation) {
    return (kHandleTag << 56) | (uint64_t{salt} << 40) | (uint64_t{slot & 0xffff} << 24) |
           (generation & kGenerationMask);
  }
  // Whether `handle` has this table's tag and salt; then `*slot` and `*generation` are its fields.
  bool Decode(uint64_t handle, uint32_t* slot, uint32_t* generation) const {
    if (handle >> 56 != kHandleTag || ((handle >> 40) & 0xffff) != salt_) return false;
    *slot = static_cast<uint32_t>((handle >> 24) & 0xffff);
    *generation = static_cast<uint32_t>(handle & kGenerationMask);
    return true;
  }
  uint16_t salt() const { return salt_; }

  // The live object `handle` names, or nullptr: an index and two compares, cheap enough for every fetch.
  const TextureDesc* Find(uint64_t handle) const {
    uint32_t slot = 0, generation = 0;
    if (!Decode(handle, &slot, &generation) || generation == 0 || slot >= entries_.size()) return nullptr;
    const Entry& e = entries_[slot];
    return e.generation == generation ? &e.desc : nullptr;
  }
  // REQUIRES: `desc` passed Device::CreateTextureObject's checks; generation != 0.
  void Set(uint32_t slot, uint32_t generation, const TextureDesc& desc) {
    if (slot >= entries_.size()) entries_.resize(slot + 1);
    entries_[slot] = {generation, desc};
  }
  void Clear(uint32_t slot, uint32_t generation) {
    if (slot < entries_.size() && entries_[slot].generation == generation) entries_[slot].generation = 0;
  }
  void Reset() { entries_.clear(); }

 private:
  struct Entry {
    uint32_t generation = 0;  // 0: no object.
    TextureDesc desc;
  };
  uint16_t salt_;
  std::vector<Entry> entries_;
};

}  // namespace gpupool::emu

#endif  // GPUPOOL_EMU_TEXTURE_H_
