// Texture and surface objects of the emulated GPU (cuTexObjectCreate, cuSurfObjectCreate): what a kernel's tex,
// tld4, suld and sust instructions read through a 64-bit handle.
//
// Why the handle is a device address: a texture object is a plain 64-bit kernel argument, and the kernel must
// resolve it on the device, with no help from the host, while other work of the context may create and destroy
// objects. So Device::CreateTextureObject writes a small descriptor (TextureRecord: a magic word, then the
// resource's base address, pitches, extents, format and sampling modes) into device memory of its own, and the
// descriptor's address is the handle. The interpreter reads the descriptor through the same bounds checks as any
// load: a handle that is not in the context's memory faults (kIllegalAddress), one whose bytes do not start with
// the magic word faults with a message naming the handle. A kernel can only reach its own context's memory that
// way, so a forged descriptor (a program writing one into its buffers) reaches nothing a load could not.
#ifndef GPUPOOL_EMU_TEXTURE_H_
#define GPUPOOL_EMU_TEXTURE_H_

#include <cstdint>

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

// What a texture or surface object describes. Plain data: it is copied into device memory as it is.
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

// The descriptor in device memory: its address is the object's handle.
struct TextureRecord {
  static constexpr uint64_t kTextureMagic = 0x4f58455450475047ull;  // "GPGPTEXO"
  static constexpr uint64_t kSurfaceMagic = 0x4f46525350475047ull;  // "GPGPSRFO"
  uint64_t magic = 0;
  TextureDesc desc;
};

}  // namespace gpupool::emu

#endif  // GPUPOOL_EMU_TEXTURE_H_
