// Fatbin layout, as nvcc 13.0 writes it (reverse-engineered; the toolkit documents only the wrapper, in
// fatbinary_section.h). All fields little-endian.
//
// Wrapper (__fatBinC_Wrapper_t, what cudart registers and passes to cuLibraryLoadData):
//   0x00 u32 magic 0x466243B1   0x04 u32 version (1; 2 for -rdc device-linked code)
//   0x08 ptr container          0x10 ptr filename (v1) or prelinked fatbins (v2)
// Container:
//   0x00 u32 magic 0xBA55ED50   0x04 u16 version 1   0x06 u16 header size (16)   0x08 u64 bytes of entries
// Entry (back to back after the container header; header 0x40 bytes, more when it carries a name or options):
//   0x00 u16 kind (1 PTX, 2 ELF)  0x02 u16 unknown (0x0101)   0x04 u32 header size   0x08 u64 payload size
//   0x10 u32 compressed size      0x14 u32 options offset     0x18 u16 minor, 0x1a u16 major version
//   0x1c u32 arch (75)            0x20 u32 name offset        0x24 u32 name length    0x28 u64 flags
//   0x30 u64 zero                 0x38 u64 uncompressed size (0 when not compressed)
// Flags: 0x1 64-bit, 0x2 debug, 0x10 Linux, 0x2000 LZ4, 0x8000 zstd, 0x100000 arch-specific (compute_90a),
// 0x200000 family-specific (compute_100f).
// The payload follows the entry header, padded to 8 bytes: PTX text with its NUL, an ELF, or (flags 0x2000) a raw
// LZ4 block or (flags 0x8000) one zstd frame of `compressed size` bytes that decodes to `uncompressed size`
// bytes, PTX's NUL included.
#include "emu/fatbin.h"

#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "emu/lz4.h"
#include "emu/ptx_text.h"

namespace gpupool::emu {
namespace {

static_assert(std::endian::native == std::endian::little, "fatbin fields are read in host byte order");

constexpr uint32_t kWrapperMagic = 0x466243B1;
constexpr uint32_t kContainerMagic = 0xBA55ED50;
constexpr size_t kWrapperHeaderSize = 16;  // Magic, version, container pointer: all we read.
constexpr size_t kContainerHeaderSize = 16;
constexpr size_t kMaxContainerHeaderSize = 4096;
constexpr size_t kMinEntryHeaderSize = 0x40;
// Sizes read from headers are believed only up to this; no kernel image comes near it.
constexpr uint64_t kMaxImageBytes = 1ull << 30;
// LZ4 cannot do better than ~255:1 (a 1-byte extension adds 255 to a match length).
constexpr uint64_t kMaxLz4Ratio = 256;

constexpr uint32_t kFlagLz4 = 0x2000;
constexpr uint32_t kFlagZstd = 0x8000;
constexpr uint32_t kFlagArchSpecific = 0x100000;    // compute_90a.
constexpr uint32_t kFlagFamilySpecific = 0x200000;  // compute_100f (CUDA 12.9+).

constexpr char kNoPtxMessage[] = "no PTX in this binary; rebuild with PTX (e.g. -arch=compute_75)";
// A bare cubin comes from a linker or compiler that was asked for SASS; name the usual culprits and their PTX
// switches (README "Python frameworks").
constexpr char kCubinMessage[] =
    "no PTX in this binary: it is a cubin (SASS only), as nvJitLink, NVRTC with an sm_XX architecture or ptxas "
    "produce; the emulated device runs PTX: load PTX text instead (NVRTC and cuda.core: compile to PTX for a "
    "compute_XX architecture; numba-cuda: take the slices with gpupool.attach(), which links numba's kernels as "
    "PTX, or see README's numba section); cuBLAS, cuBLASLt and cuSOLVER load such cubins for the architectures "
    "they carry SASS for and take their PTX on a newer one, which gpupool tells them an emulated 12.x device is "
    "unless GPUPOOL_LIBRARY_CC=0 (or use gp-agent --emu-cc 13.0)";

template <typename T>
T Load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

CallStatus Invalid(std::string message) { return CallStatus(cu::kInvalidImage, std::move(message)); }

std::string Hex(uint64_t value) {
  char buf[24];
  snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

// Reads up to 4 bytes of magic. With an unknown size (0) it stops at a NUL, so a short C string is never read
// past its end. Returns 0 when fewer than 4 bytes are available.
uint32_t PeekMagic(const uint8_t* p, size_t size) {
  uint8_t bytes[4];
  for (size_t i = 0; i < 4; ++i) {
    if (size != 0 && i >= size) return 0;
    bytes[i] = p[i];
    if (size == 0 && bytes[i] == 0) return 0;  // None of the magics holds a NUL: a C string ended.
  }
  return Load<uint32_t>(bytes);
}

// The size a container's header claims (header + entries), checked for sanity; the header must be readable.
CallResult<size_t> ContainerSizeFromHeader(const uint8_t* p) {
  uint32_t magic = Load<uint32_t>(p);
  if (magic != kContainerMagic) {
    return Invalid("not a fatbin container (magic " + Hex(magic) + ", expected " + Hex(kContainerMagic) + ")");
  }
  uint16_t version = Load<uint16_t>(p + 4);
  if (version != 1) return Invalid("fatbin container version " + std::to_string(version) + " not supported");
  uint16_t header_size = Load<uint16_t>(p + 6);
  if (header_size < kContainerHeaderSize || header_size > kMaxContainerHeaderSize) {
    return Invalid("fatbin container header size " + std::to_string(header_size) + " is not plausible");
  }
  uint64_t payload = Load<uint64_t>(p + 8);
  if (payload > kMaxImageBytes) {
    return Invalid("fatbin container claims " + std::to_string(payload) + " bytes of entries (limit " +
                   std::to_string(kMaxImageBytes) + ")");
  }
  return static_cast<size_t>(header_size + payload);
}

// PTX text starts, after whitespace and comments, with a directive (".version", ".target", ...).
bool LooksLikePtx(const char* p, size_t n) {
  size_t i = 0;
  if (n >= 3 && std::memcmp(p, "\xEF\xBB\xBF", 3) == 0) i = 3;  // UTF-8 byte order mark.
  while (i < n) {
    char c = p[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
    } else if (c == '/' && i + 1 < n && p[i + 1] == '/') {
      while (i < n && p[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < n && p[i + 1] == '*') {
      size_t end = std::string_view(p, n).find("*/", i + 2);
      if (end == std::string_view::npos) return false;
      i = end + 2;
    } else {
      return c == '.' && i + 1 < n && ((p[i + 1] >= 'a' && p[i + 1] <= 'z') || (p[i + 1] >= 'A' && p[i + 1] <= 'Z'));
    }
  }
  return false;
}

bool IsElf(uint32_t magic) { return magic == 0x464C457F; }  // "\x7fELF".

// The extent of an ELF64 file from its headers: the furthest byte any header, section or segment reaches.
// 0 when the headers are not plausible.
size_t ElfSize(const uint8_t* p) {
  if (p[4] != 2 || p[5] != 1) return 0;  // ELFCLASS64, little-endian: what cubins are.
  uint64_t phoff = Load<uint64_t>(p + 0x20), shoff = Load<uint64_t>(p + 0x28);
  uint16_t ehsize = Load<uint16_t>(p + 0x34), phentsize = Load<uint16_t>(p + 0x36), phnum = Load<uint16_t>(p + 0x38);
  uint16_t shentsize = Load<uint16_t>(p + 0x3a), shnum = Load<uint16_t>(p + 0x3c);
  if (ehsize < 0x40) return 0;
  if ((phnum != 0 && phentsize < 0x38) || (shnum != 0 && shentsize < 0x40)) return 0;
  // Each term stays far below 2^64: offsets are capped before the (16-bit x 16-bit) table sizes are added.
  if (phoff > kMaxImageBytes || shoff > kMaxImageBytes) return 0;
  uint64_t end = std::max<uint64_t>({ehsize, phoff + uint64_t{phnum} * phentsize, shoff + uint64_t{shnum} * shentsize});
  if (end > kMaxImageBytes) return 0;
  for (uint16_t i = 0; i < phnum; ++i) {
    const uint8_t* ph = p + phoff + uint64_t{i} * phentsize;
    uint64_t offset = Load<uint64_t>(ph + 0x08), filesz = Load<uint64_t>(ph + 0x20);
    if (offset > kMaxImageBytes || filesz > kMaxImageBytes) return 0;
    end = std::max(end, offset + filesz);
  }
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint8_t* sh = p + shoff + uint64_t{i} * shentsize;
    uint32_t type = Load<uint32_t>(sh + 0x04);
    uint64_t offset = Load<uint64_t>(sh + 0x18), sz = Load<uint64_t>(sh + 0x20);
    if (type == 8 /* SHT_NOBITS */ || type == 0 /* SHT_NULL */) continue;
    if (offset > kMaxImageBytes || sz > kMaxImageBytes) return 0;
    end = std::max(end, offset + sz);
  }
  return end > kMaxImageBytes ? 0 : static_cast<size_t>(end);
}

CallStatus ZstdDecompress(const uint8_t* src, size_t src_size, size_t expected, std::string* out) {
  // A frame that records its size is checked before anything is allocated.
  unsigned long long declared = ZSTD_getFrameContentSize(src, src_size);
  if (declared == ZSTD_CONTENTSIZE_ERROR) return Invalid("zstd payload does not start with a valid zstd frame header");
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != expected) {
    return Invalid("zstd frame holds " + std::to_string(declared) + " bytes but the entry header says " +
                   std::to_string(expected));
  }
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!dctx) return CallStatus(cu::kOutOfMemory, "cannot allocate a zstd decoder");
  // Streaming into a buffer that grows with what the frame actually produces: a header claiming a huge size
  // costs nothing unless the data backs it. One spare byte detects output beyond `expected`.
  out->clear();
  out->resize(std::min<size_t>(expected + 1, std::max<size_t>(4 * src_size, 64 * 1024)));
  ZSTD_inBuffer in{src, src_size, 0};
  size_t produced = 0;
  for (;;) {
    ZSTD_outBuffer o{out->data(), out->size(), produced};
    size_t in_before = in.pos;
    size_t ret = ZSTD_decompressStream(dctx.get(), &o, &in);
    if (ZSTD_isError(ret)) return Invalid(std::string("zstd payload is corrupt: ") + ZSTD_getErrorName(ret));
    bool progress = o.pos != produced || in.pos != in_before;
    produced = o.pos;
    if (produced > expected) {
      return Invalid("zstd payload decodes to more than the " + std::to_string(expected) +
                     " bytes the entry header says");
    }
    if (ret == 0 && in.pos == in.size) break;  // Last frame complete, input consumed.
    if (produced == out->size()) {
      out->resize(std::min<size_t>(expected + 1, out->size() * 2));  // Output full: more may come.
    } else if (in.pos == in.size || !progress) {
      // Room left and nothing more to read, yet the frame is unfinished.
      return Invalid("zstd payload is truncated (" + std::to_string(produced) + " of " + std::to_string(expected) +
                     " bytes decoded)");
    }
  }
  if (produced != expected) {
    return Invalid("zstd payload decodes to " + std::to_string(produced) + " bytes but the entry header says " +
                   std::to_string(expected));
  }
  out->resize(produced);
  return CallStatus::Ok();
}

CallResult<std::string> SelectPtx(const uint8_t* container, size_t size, int arch) {
  auto entries = ParseFatbinContainer(container, size);
  if (!entries.ok()) return entries.status();
  // How widely a PTX entry runs: portable PTX on any later arch, family PTX (compute_100f) on the later archs of
  // its major version, arch-specific PTX (compute_90a) on its own arch only. -1: not on this device.
  auto portability = [arch](const FatbinEntry& e) {
    if (e.kind != FatbinEntry::Kind::kPtx || e.arch > arch) return -1;
    if (e.flags & kFlagArchSpecific) return e.arch == arch ? 0 : -1;
    if (e.flags & kFlagFamilySpecific) return e.arch / 10 == arch / 10 ? 1 : -1;
    return 2;
  };
  // Highest arch wins; on a tie, the more portable PTX (it uses no features the emulator may lack).
  const FatbinEntry* best = nullptr;
  int best_portability = -1;
  for (const FatbinEntry& e : *entries) {
    int p = portability(e);
    if (p < 0) continue;
    if (best == nullptr || e.arch > best->arch || (e.arch == best->arch && p > best_portability)) {
      best = &e;
      best_portability = p;
    }
  }
  if (best == nullptr) {
    // PTX there is, but only for newer GPUs: say which, and what this device is.
    int oldest = 0;
    for (const FatbinEntry& e : *entries) {
      if (e.kind == FatbinEntry::Kind::kPtx && (oldest == 0 || e.arch < oldest)) oldest = e.arch;
    }
    if (oldest == 0) return CallStatus(cu::kNoBinaryForGpu, kNoPtxMessage);
    return CallStatus(cu::kNoBinaryForGpu,
                     "the binary's PTX is for compute_" + std::to_string(oldest) + " and newer; this device has " +
                         "compute capability " + std::to_string(arch / 10) + "." + std::to_string(arch % 10) +
                         " (an emulated device reports what gp-agent --emu-cc sets)");
  }
  return ExtractEntry(container, size, *best);
}

}  // namespace

CallResult<std::vector<FatbinEntry>> ParseFatbinContainer(const uint8_t* data, size_t size) {
  if (data == nullptr) return Invalid("fatbin container pointer is null");
  if (size < kContainerHeaderSize) {
    return Invalid("fatbin container header truncated (" + std::to_string(size) + " of 16 bytes)");
  }
  auto claimed = ContainerSizeFromHeader(data);
  if (!claimed.ok()) return claimed.status();
  size_t header_size = Load<uint16_t>(data + 6);
  if (*claimed > size) {
    return Invalid("fatbin container truncated: its header claims " + std::to_string(*claimed) + " bytes, only " +
                   std::to_string(size) + " given");
  }
  const size_t end = *claimed;
  std::vector<FatbinEntry> entries;
  for (size_t off = header_size; off < end;) {
    auto where = [&] { return "fatbin entry " + std::to_string(entries.size()) + " at offset " + std::to_string(off); };
    if (end - off < kMinEntryHeaderSize) {
      return Invalid(where() + ": header truncated (" + std::to_string(end - off) + " of " +
                     std::to_string(kMinEntryHeaderSize) + " bytes left in the container)");
    }
    const uint8_t* h = data + off;
    uint32_t entry_header_size = Load<uint32_t>(h + 0x04);
    uint64_t payload_size = Load<uint64_t>(h + 0x08);
    if (entry_header_size < kMinEntryHeaderSize || entry_header_size > end - off) {
      return Invalid(where() + ": header size " + std::to_string(entry_header_size) + " is not plausible");
    }
    if (payload_size > end - off - entry_header_size) {
      return Invalid(where() + ": payload of " + std::to_string(payload_size) +
                     " bytes runs past the end of the container");
    }
    FatbinEntry e;
    uint16_t kind = Load<uint16_t>(h);
    e.kind = kind == 1 ? FatbinEntry::Kind::kPtx : kind == 2 ? FatbinEntry::Kind::kElf : FatbinEntry::Kind::kUnknown;
    e.version_minor = Load<uint16_t>(h + 0x18);
    e.version_major = Load<uint16_t>(h + 0x1a);
    e.arch = static_cast<int>(std::min<uint32_t>(Load<uint32_t>(h + 0x1c), 1u << 30));
    e.flags = static_cast<uint32_t>(Load<uint64_t>(h + 0x28));
    e.payload_offset = off + entry_header_size;
    if ((e.flags & kFlagLz4) && (e.flags & kFlagZstd)) {
      return Invalid(where() + ": flags " + Hex(e.flags) + " claim both LZ4 and zstd compression");
    }
    if (e.compressed()) {
      uint32_t compressed_size = Load<uint32_t>(h + 0x10);
      uint64_t uncompressed_size = Load<uint64_t>(h + 0x38);
      if (compressed_size == 0 || compressed_size > payload_size) {
        return Invalid(where() + ": compressed size " + std::to_string(compressed_size) + " does not fit its " +
                       std::to_string(payload_size) + "-byte payload");
      }
      if (uncompressed_size == 0 || uncompressed_size > kMaxImageBytes) {
        return Invalid(where() + ": uncompressed size " + std::to_string(uncompressed_size) + " is not plausible");
      }
      e.payload_size = compressed_size;
      e.uncompressed_size = uncompressed_size;
    } else {
      e.payload_size = payload_size;
      e.uncompressed_size = payload_size;
    }
    entries.push_back(e);
    off += entry_header_size + payload_size;
  }
  return entries;
}

CallResult<std::string> ExtractEntry(const uint8_t* container, size_t size, const FatbinEntry& entry) {
  if (container == nullptr) return Invalid("fatbin container pointer is null");
  if (entry.payload_offset > size || entry.payload_size > size - entry.payload_offset) {
    return Invalid("fatbin entry payload [" + std::to_string(entry.payload_offset) + ", +" +
                   std::to_string(entry.payload_size) + ") lies outside the " + std::to_string(size) +
                   "-byte container");
  }
  const uint8_t* src = container + entry.payload_offset;
  const size_t src_size = static_cast<size_t>(entry.payload_size);
  std::string out;
  if ((entry.flags & kFlagLz4) && (entry.flags & kFlagZstd)) {
    return Invalid("fatbin entry claims both LZ4 and zstd compression");
  }
  if (entry.compressed() && (entry.uncompressed_size == 0 || entry.uncompressed_size > kMaxImageBytes)) {
    return Invalid("fatbin entry uncompressed size " + std::to_string(entry.uncompressed_size) + " is not plausible");
  }
  if (entry.flags & kFlagLz4) {
    if (entry.uncompressed_size > kMaxLz4Ratio * src_size) {
      return Invalid("fatbin entry: " + std::to_string(src_size) + " LZ4 bytes cannot hold " +
                     std::to_string(entry.uncompressed_size) + " bytes");
    }
    out.resize(static_cast<size_t>(entry.uncompressed_size));
    std::string error = Lz4DecompressBlock(src, src_size, reinterpret_cast<uint8_t*>(out.data()), out.size());
    if (!error.empty()) return Invalid("fatbin entry LZ4 payload is corrupt: " + error);
  } else if (entry.flags & kFlagZstd) {
    CallStatus status = ZstdDecompress(src, src_size, static_cast<size_t>(entry.uncompressed_size), &out);
    if (!status.ok()) return status;
  } else {
    out.assign(reinterpret_cast<const char*>(src), src_size);
  }
  if (entry.kind == FatbinEntry::Kind::kPtx) {
    // PTX ends at its NUL; padding follows in uncompressed entries.
    size_t nul = out.find('\0');
    if (nul != std::string::npos) out.resize(nul);
  }
  return out;
}

CallResult<std::string> PtxForDevice(const void* image, size_t size, int arch) {
  if (image == nullptr) return CallStatus(cu::kInvalidValue, "image pointer is null");
  const auto* p = static_cast<const uint8_t*>(image);
  const uint32_t magic = PeekMagic(p, size);

  if (magic == kWrapperMagic) {
    if (size != 0 && size < kWrapperHeaderSize) {
      return Invalid("fatbin wrapper truncated (" + std::to_string(size) + " of 16 bytes)");
    }
    uint32_t version = Load<uint32_t>(p + 4);
    if (version != 1 && version != 2) {
      return Invalid("fatbin wrapper version " + std::to_string(version) + " not supported (expected 1 or 2)");
    }
    const auto* container = static_cast<const uint8_t*>(Load<const void*>(p + 8));
    if (container == nullptr) return Invalid("fatbin wrapper points at no container (null data pointer)");
    // Only the pointer is known: the container's own header gives its size.
    auto container_size = ContainerSizeFromHeader(container);
    if (!container_size.ok()) return container_size.status();
    return SelectPtx(container, *container_size, arch);
  }
  if (magic == kContainerMagic) {
    // The header is read when the buffer holds one, or when only the pointer is known (its size comes from it).
    auto container_size = size == 0 || size >= kContainerHeaderSize
                              ? ContainerSizeFromHeader(p)
                              : CallResult<size_t>(CallStatus(cu::kInvalidImage, "truncated header"));
    if (size == 0) {
      if (!container_size.ok()) return container_size.status();
      size = *container_size;
    }
    // A container followed by PTX text: the linked image of a device-linked binary (PrelinkedPtx), which
    // gpupool's libcuda appends because the container itself holds only the linked SASS.
    if (container_size.ok() && size > *container_size) {
      const char* trailer = reinterpret_cast<const char*>(p + *container_size);
      const size_t rest = size - *container_size;
      const size_t length = static_cast<size_t>(std::find(trailer, trailer + rest, '\0') - trailer);
      if (LooksLikePtx(trailer, length)) return std::string(trailer, length);
    }
    return SelectPtx(p, size, arch);
  }
  if (IsElf(magic)) return CallStatus(cu::kNoBinaryForGpu, kCubinMessage);

  const char* text = static_cast<const char*>(image);
  size_t length = size == 0 ? std::strlen(text) : static_cast<size_t>(std::find(text, text + size, '\0') - text);
  if (LooksLikePtx(text, length)) return std::string(text, length);

  std::string first;
  for (size_t i = 0; i < 4 && (size == 0 ? i < length : i < size); ++i) {
    char byte[4];
    snprintf(byte, sizeof byte, "%02x", p[i]);
    first += (i ? " " : "") + std::string(byte);
  }
  return Invalid("image is not a fatbin wrapper, a fatbin container or PTX text (first bytes: " +
                 (first.empty() ? std::string("none") : first) + ")");
}

CallResult<std::string> PrelinkedPtx(const void* wrapper, int arch) {
  if (wrapper == nullptr || PeekMagic(static_cast<const uint8_t*>(wrapper), 0) != kWrapperMagic) return std::string();
  const auto* p = static_cast<const uint8_t*>(wrapper);
  if (Load<uint32_t>(p + 4) != 2) return std::string();
  const auto* units = static_cast<const void* const*>(Load<const void*>(p + 16));
  if (units == nullptr) return std::string();
  std::string linked;
  CallStatus missing;  // The first unit without PTX for the device.
  // A program has a handful of translation units; a bound keeps a corrupt list from running away.
  constexpr size_t kMaxUnits = 4096;
  size_t i = 0;
  for (; i < kMaxUnits && units[i] != nullptr; ++i) {
    const auto* container = static_cast<const uint8_t*>(units[i]);
    auto size = ContainerSizeFromHeader(container);
    if (!size.ok()) return size.status();
    auto ptx = SelectPtx(container, *size, arch);
    if (!ptx.ok()) {
      if (missing.ok()) {
        missing = CallStatus(ptx.status().code(), "translation unit " + std::to_string(i + 1) +
                                                     " of a device-linked binary: " + ptx.status().message());
      }
      continue;
    }
    linked += *ptx;
    if (!linked.empty() && linked.back() != '\n') linked += '\n';
  }
  if (i == kMaxUnits) return Invalid("device-linked binary lists more than 4096 translation units");
  if (!missing.ok()) {
    // The unit without PTX is libcudadevrt's when the program launches kernels from the device (its PTX is for
    // newer GPUs only): the launches are why the binary cannot run here, and the message says so.
    if (std::string launch = DeviceLaunchNamedIn(linked); !launch.empty()) {
      return CallStatus(cu::kNotSupported, DeviceLaunchRefusal({}, launch));
    }
    return missing;
  }
  return linked;
}

size_t ImageSize(const void* image) {
  if (image == nullptr) return 0;
  const auto* p = static_cast<const uint8_t*>(image);
  const uint32_t magic = PeekMagic(p, 0);
  if (magic == kWrapperMagic) {
    uint32_t version = Load<uint32_t>(p + 4);
    const auto* container = static_cast<const uint8_t*>(Load<const void*>(p + 8));
    if ((version != 1 && version != 2) || container == nullptr) return 0;
    auto size = ContainerSizeFromHeader(container);
    return size.ok() ? *size : 0;
  }
  if (magic == kContainerMagic) {
    auto size = ContainerSizeFromHeader(p);
    return size.ok() ? *size : 0;
  }
  if (IsElf(magic)) return ElfSize(p);
  const char* text = static_cast<const char*>(image);
  size_t length = std::strlen(text);
  return LooksLikePtx(text, length) ? length + 1 : 0;
}

}  // namespace gpupool::emu
