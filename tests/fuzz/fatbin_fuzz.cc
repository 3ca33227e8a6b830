// libFuzzer target for the fatbin reader (lib/emu/fatbin.cc, lib/emu/lz4.cc): PtxForDevice, ParseFatbinContainer
// and ExtractEntry must fail cleanly on any input, never read outside it, never crash. Built by tests/fuzz/run.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/fatbin.h"

namespace {

using gpupool::CallResult;
namespace cu = gpupool::cu;

constexpr uint32_t kWrapperMagic = 0x466243B1;
constexpr uint32_t kContainerMagic = 0xBA55ED50;

// The fatbin wrapper as cudart registers it (fatbinary_section.h's __fatBinC_Wrapper_t).
struct Wrapper {
  uint32_t magic;
  uint32_t version;
  const void* data;
  void* filename_or_fatbins;
};

constexpr uint32_t kElfMagic = 0x464C457F;

template <typename T>
T Field(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// True when an ELF64's program and section header tables, and the section/segment records ImageSize reads,
// lie inside [data, data + size).
bool ElfTablesInside(const uint8_t* data, size_t size) {
  if (size < 64) return false;
  const uint64_t phoff = Field<uint64_t>(data + 0x20), shoff = Field<uint64_t>(data + 0x28);
  const uint64_t phentsize = Field<uint16_t>(data + 0x36), phnum = Field<uint16_t>(data + 0x38);
  const uint64_t shentsize = Field<uint16_t>(data + 0x3a), shnum = Field<uint16_t>(data + 0x3c);
  auto inside = [size](uint64_t offset, uint64_t count, uint64_t entsize, uint64_t needed) {
    if (count == 0) return true;
    if (entsize < needed || offset > size) return false;
    return (count - 1) * entsize + needed <= size - offset;
  };
  return inside(phoff, phnum, phentsize, 0x28) && inside(shoff, shnum, shentsize, 0x28);
}

uint32_t Magic(const uint8_t* data, size_t size) {
  uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, data, 4);
  return magic;
}

// A failure must carry one of the documented codes and say what went wrong.
template <typename T>
void CheckFailure(const CallResult<T>& r, const char* call) {
  if (r.ok()) return;
  int code = r.status().code();
  if ((code != cu::kInvalidImage && code != cu::kNoBinaryForGpu && code != cu::kInvalidValue) ||
      r.status().message().empty()) {
    std::fprintf(stderr, "%s failed with code %d and message \"%s\"\n", call, code,
                 r.status().message().c_str());
    std::abort();
  }
}

void ParseAndExtractAll(const uint8_t* data, size_t size) {
  auto entries = gpupool::emu::ParseFatbinContainer(data, size);
  CheckFailure(entries, "ParseFatbinContainer");
  if (!entries.ok()) return;
  for (const auto& entry : *entries) {
    if (entry.payload_offset + entry.payload_size > size) {
      std::fprintf(stderr, "ParseFatbinContainer returned an entry outside the input\n");
      std::abort();
    }
    CheckFailure(gpupool::emu::ExtractEntry(data, size, entry), "ExtractEntry");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;  // Size 0 means "unknown" to PtxForDevice: covered below with a terminated copy.
  const uint32_t magic = Magic(data, size);
  const int arch = 50 + data[size - 1] % 60;  // Varies PTX selection; 75 is always tried too.

  if (magic != kWrapperMagic) {
    CheckFailure(gpupool::emu::PtxForDevice(data, size, 75), "PtxForDevice");
    CheckFailure(gpupool::emu::PtxForDevice(data, size, arch), "PtxForDevice");
    ParseAndExtractAll(data, size);
  }

  // Size-unknown paths trust the headers, so they only get inputs whose headers stay inside the input. A copy
  // followed by a NUL and zeros lets ImageSize read its 16-byte header or find the end of a string.
  const uint8_t* rest = data;
  size_t rest_size = size;
  Wrapper wrapper{};
  if (magic == kWrapperMagic) {
    // A wrapper holds a raw pointer, which no reader can check: point it at the rest of the input instead.
    if (size < 16) {  // Too short to hold the pointer: refused before it is read.
      CheckFailure(gpupool::emu::PtxForDevice(data, size, 75), "PtxForDevice(short wrapper)");
      return 0;
    }
    std::memcpy(&wrapper.version, data + 4, 4);
    rest = data + 16;
    rest_size = size - 16;
  }
  const uint32_t rest_magic = Magic(rest, rest_size);
  // ImageSize believes a wrapper's pointer and an ELF's tables wherever they point: ELF inputs get there only when
  // their tables lie inside the input.
  if (rest_magic == kWrapperMagic) return 0;
  if (rest_magic == kElfMagic) {
    if (magic == kElfMagic && ElfTablesInside(data, size)) {
      std::vector<uint8_t> elf(data, data + size);
      const size_t elf_size = gpupool::emu::ImageSize(elf.data());
      if (elf_size != 0 && elf_size < 64) std::abort();  // Never less than the ELF header.
    }
    return 0;
  }
  std::vector<uint8_t> terminated(rest, rest + rest_size);
  terminated.resize(rest_size + 17, 0);
  const size_t image_size = gpupool::emu::ImageSize(terminated.data());
  if (magic == kWrapperMagic) {
    if (rest_magic != kContainerMagic || image_size == 0 || image_size > rest_size) return 0;
    std::vector<uint8_t> container(rest, rest + image_size);  // Exact size: ASan catches any overread.
    wrapper.magic = kWrapperMagic;
    wrapper.data = container.data();
    CheckFailure(gpupool::emu::PtxForDevice(&wrapper, 0, 75), "PtxForDevice(wrapper)");
    CheckFailure(gpupool::emu::PtxForDevice(&wrapper, sizeof wrapper, arch), "PtxForDevice(wrapper)");
    if (wrapper.version == 1 || wrapper.version == 2) {
      if (gpupool::emu::ImageSize(&wrapper) != image_size) std::abort();
    }
    return 0;
  }
  if (image_size != 0 && image_size <= size) {
    if (rest_magic == kContainerMagic) {
      std::vector<uint8_t> container(data, data + image_size);
      CheckFailure(gpupool::emu::PtxForDevice(container.data(), 0, 75), "PtxForDevice(size 0)");
    } else {
      CheckFailure(gpupool::emu::PtxForDevice(terminated.data(), 0, 75), "PtxForDevice(size 0)");
    }
  }
  return 0;
}
