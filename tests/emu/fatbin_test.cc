// Fatbin reader tests. Real inputs come from the installed nvcc at build time (tests/emu/fatbin.cmake puts them in
// GPUPOOL_FATBIN_DATA_DIR); the rest are containers and LZ4 blocks built here byte by byte.
#include "emu/fatbin.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "emu/lz4.h"

namespace gpupool::emu {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr char kNoPtx[] = "no PTX in this binary; rebuild with PTX (e.g. -arch=compute_75)";
constexpr uint32_t kDebug = 0x2, kLz4 = 0x2000, kZstd = 0x8000, kArchSpecific = 0x100000;

// The fatbin wrapper as cudart registers it (fatbinary_section.h's __fatBinC_Wrapper_t).
struct Wrapper {
  uint32_t magic;
  uint32_t version;
  const void* data;
  void* filename_or_fatbins;
};

Bytes ReadInput(const std::string& name) {
  std::ifstream in(std::string(GPUPOOL_FATBIN_DATA_DIR) + "/" + name, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Loads a build-time input into `bytes`, or skips the test when this machine has no nvcc.
#define LOAD_OR_SKIP(bytes, name)                                  \
  do {                                                             \
    if (!GPUPOOL_HAVE_NVCC) GTEST_SKIP() << "nvcc not installed";  \
    bytes = ReadInput(name);                                       \
    ASSERT_FALSE(bytes.empty()) << "missing build input " << name; \
  } while (0)

// The words of a PTX text with // comments dropped: the fatbin keeps PTX without comments and indentation.
std::vector<std::string> PtxTokens(const std::string& text) {
  std::vector<std::string> tokens;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line.substr(0, line.find("//")));
    for (std::string word; words >> word;) tokens.push_back(word);
  }
  return tokens;
}

// The first line of PTX that is not blank: nvcc leaves empty lines where its header comment was.
std::string FirstDirective(const std::string& ptx) {
  std::istringstream lines(ptx);
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
  }
  return "";
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

const FatbinEntry* FindPtxEntry(const std::vector<FatbinEntry>& entries, int arch) {
  for (const auto& e : entries) {
    if (e.kind == FatbinEntry::Kind::kPtx && e.arch == arch) return &e;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------------------
// Real nvcc output.

TEST(FatbinReal, EveryCompressionModeDecodesToTheSamePtxAsNvccPtx) {
  Bytes reference;
  LOAD_OR_SKIP(reference, "kernels.ptx");
  const std::string reference_text(reference.begin(), reference.end());
  struct Mode {
    const char* file;
    uint32_t ptx_compression;  // Flag expected on the PTX entry: proves the input exercises that decoder.
    bool same_as_nvcc_ptx;     // False where nvcc options change the PTX itself (-lineinfo adds .loc).
  };
  for (const Mode& mode :
       {Mode{"default.fatbin", kZstd, true}, Mode{"speed.fatbin", kLz4, true}, Mode{"balance.fatbin", kZstd, true},
        Mode{"size.fatbin", kZstd, true}, Mode{"none.fatbin", 0, true}, Mode{"lineinfo.fatbin", kZstd, false},
        Mode{"rdc.fatbin", kZstd, true}}) {
    SCOPED_TRACE(mode.file);
    Bytes bin;
    LOAD_OR_SKIP(bin, mode.file);
    auto entries = ParseFatbinContainer(bin.data(), bin.size());
    ASSERT_TRUE(entries.ok()) << entries.status().message();
    const FatbinEntry* ptx_entry = FindPtxEntry(*entries, 75);
    ASSERT_NE(ptx_entry, nullptr);
    EXPECT_EQ(ptx_entry->flags & (kLz4 | kZstd), mode.ptx_compression);

    auto ptx = PtxForDevice(bin.data(), bin.size(), 75);
    ASSERT_TRUE(ptx.ok()) << ptx.status().message();
    EXPECT_EQ(FirstDirective(*ptx),
              ".version " + std::to_string(ptx_entry->version_major) + "." + std::to_string(ptx_entry->version_minor));
    EXPECT_TRUE(Contains(*ptx, "\n.target sm_75\n")) << ptx->substr(0, 200);
    EXPECT_TRUE(Contains(*ptx, ".entry saxpy(")) << ptx->substr(0, 200);
    EXPECT_TRUE(Contains(*ptx, ".entry unrolled("));
    EXPECT_EQ(ptx->find('\0'), std::string::npos);
    if (mode.same_as_nvcc_ptx) {
      EXPECT_EQ(PtxTokens(*ptx), PtxTokens(reference_text));
    }
  }
}

TEST(FatbinReal, DefaultOutputIsSass75PlusZstdPtx75) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "default.fatbin");
  auto entries = ParseFatbinContainer(bin.data(), bin.size());
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  ASSERT_EQ(entries->size(), 2u);
  const FatbinEntry& elf = (*entries)[0];
  const FatbinEntry& ptx = (*entries)[1];
  EXPECT_EQ(elf.kind, FatbinEntry::Kind::kElf);
  EXPECT_EQ(elf.arch, 75);
  EXPECT_FALSE(elf.compressed());
  EXPECT_EQ(ptx.kind, FatbinEntry::Kind::kPtx);
  EXPECT_EQ(ptx.arch, 75);
  EXPECT_TRUE(ptx.compressed());
  EXPECT_GE(ptx.version_major, 9);
  EXPECT_GT(ptx.uncompressed_size, ptx.payload_size);
  EXPECT_LE(ptx.payload_offset + ptx.payload_size, bin.size());

  auto sass = ExtractEntry(bin.data(), bin.size(), elf);
  ASSERT_TRUE(sass.ok()) << sass.status().message();
  EXPECT_EQ(sass->substr(0, 4),
            "\x7f"
            "ELF");
  auto text = ExtractEntry(bin.data(), bin.size(), ptx);
  ASSERT_TRUE(text.ok()) << text.status().message();
  // The NUL is dropped: exactly one byte shorter than what the header says was compressed.
  EXPECT_EQ(text->size() + 1, ptx.uncompressed_size);
}

TEST(FatbinReal, CompressedSassDecodesToElf) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "size.fatbin");  // --compress-mode=size compresses the SASS too.
  auto entries = ParseFatbinContainer(bin.data(), bin.size());
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  bool seen = false;
  for (const auto& e : *entries) {
    if (e.kind != FatbinEntry::Kind::kElf) continue;
    seen = true;
    EXPECT_TRUE(e.compressed());
    auto elf = ExtractEntry(bin.data(), bin.size(), e);
    ASSERT_TRUE(elf.ok()) << elf.status().message();
    EXPECT_EQ(elf->size(), e.uncompressed_size);
    EXPECT_EQ(elf->substr(0, 4),
              "\x7f"
              "ELF");
  }
  EXPECT_TRUE(seen);
}

TEST(FatbinReal, DebugBuildIsFlaggedAndStillYieldsPtx) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "debug.fatbin");
  auto entries = ParseFatbinContainer(bin.data(), bin.size());
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  const FatbinEntry* ptx_entry = FindPtxEntry(*entries, 75);
  ASSERT_NE(ptx_entry, nullptr);
  EXPECT_NE(ptx_entry->flags & kDebug, 0u);
  auto ptx = PtxForDevice(bin.data(), bin.size(), 75);
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  EXPECT_TRUE(Contains(*ptx, ".target sm_75, debug"));
  EXPECT_TRUE(Contains(*ptx, ".entry saxpy("));
  EXPECT_TRUE(Contains(*ptx, ".loc"));
}

TEST(FatbinReal, SassOnlyHasNoBinaryForGpu) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "sass_only.fatbin");
  for (int arch : {75, 80, 90}) {
    auto ptx = PtxForDevice(bin.data(), bin.size(), arch);
    ASSERT_FALSE(ptx.ok());
    EXPECT_EQ(ptx.status().code(), cu::kNoBinaryForGpu);
    EXPECT_EQ(ptx.status().message(), kNoPtx);
  }
}

TEST(FatbinReal, CubinHasNoBinaryForGpu) {
  Bytes cubin;
  LOAD_OR_SKIP(cubin, "kernels.cubin");
  auto ptx = PtxForDevice(cubin.data(), cubin.size(), 75);
  ASSERT_FALSE(ptx.ok());
  EXPECT_EQ(ptx.status().code(), cu::kNoBinaryForGpu);
  // Names what made it and how to get PTX instead.
  EXPECT_EQ(ptx.status().message().rfind("no PTX in this binary: it is a cubin", 0), 0u) << ptx.status().message();
  EXPECT_NE(ptx.status().message().find("gpupool.attach()"), std::string::npos) << ptx.status().message();
  EXPECT_EQ(ImageSize(cubin.data()), cubin.size());
}

TEST(FatbinReal, PicksHighestPtxArchNotAboveDevice) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "multi_ptx.fatbin");
  struct Case {
    int device;
    const char* target;
  };
  for (const Case& c : {Case{75, "sm_75"}, Case{80, "sm_75"}, Case{86, "sm_86"}, Case{89, "sm_86"}, Case{90, "sm_86"},
                        Case{120, "sm_86"}}) {
    SCOPED_TRACE(c.device);
    auto ptx = PtxForDevice(bin.data(), bin.size(), c.device);
    ASSERT_TRUE(ptx.ok()) << ptx.status().message();
    EXPECT_TRUE(Contains(*ptx, std::string("\n.target ") + c.target + "\n"));
  }
  auto too_old = PtxForDevice(bin.data(), bin.size(), 70);
  EXPECT_EQ(too_old.status().code(), cu::kNoBinaryForGpu);
  EXPECT_EQ(too_old.status().message(),
            "the binary's PTX is for compute_75 and newer; this device has compute capability 7.0 (an emulated device "
            "reports what gp-agent --emu-cc sets)");
}

TEST(FatbinReal, ArchSpecificPtxOnlyForItsOwnArch) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "arch_specific.fatbin");  // compute_90a + compute_80.
  auto entries = ParseFatbinContainer(bin.data(), bin.size());
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  const FatbinEntry* a = FindPtxEntry(*entries, 90);
  ASSERT_NE(a, nullptr);
  EXPECT_NE(a->flags & kArchSpecific, 0u);

  auto on90 = PtxForDevice(bin.data(), bin.size(), 90);
  ASSERT_TRUE(on90.ok()) << on90.status().message();
  EXPECT_TRUE(Contains(*on90, "\n.target sm_90a\n"));
  for (int device : {80, 89, 100, 120}) {
    SCOPED_TRACE(device);
    auto ptx = PtxForDevice(bin.data(), bin.size(), device);
    ASSERT_TRUE(ptx.ok()) << ptx.status().message();
    EXPECT_TRUE(Contains(*ptx, "\n.target sm_80\n"));
  }
  EXPECT_EQ(PtxForDevice(bin.data(), bin.size(), 75).status().code(), cu::kNoBinaryForGpu);
}

TEST(FatbinReal, FamilySpecificPtxForItsFamily) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "family.fatbin");  // compute_100f + compute_100a + compute_86.
  struct Case {
    int device;
    const char* target;
  };
  // On sm_100 both 100f and 100a fit: the family PTX is the more portable one.
  for (const Case& c :
       {Case{100, "sm_100f"}, Case{103, "sm_100f"}, Case{110, "sm_86"}, Case{120, "sm_86"}, Case{90, "sm_86"}}) {
    SCOPED_TRACE(c.device);
    auto ptx = PtxForDevice(bin.data(), bin.size(), c.device);
    ASSERT_TRUE(ptx.ok()) << ptx.status().message();
    EXPECT_TRUE(Contains(*ptx, std::string("\n.target ") + c.target + "\n")) << ptx->substr(0, 100);
  }
}

TEST(FatbinReal, WrapperWithUnknownSize) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "default.fatbin");
  for (uint32_t version : {1u, 2u}) {
    Wrapper wrapper{0x466243B1, version, bin.data(), nullptr};
    for (size_t size : {size_t{0}, sizeof wrapper}) {
      auto ptx = PtxForDevice(&wrapper, size, 75);
      ASSERT_TRUE(ptx.ok()) << ptx.status().message();
      EXPECT_TRUE(Contains(*ptx, ".entry saxpy("));
    }
    EXPECT_EQ(ImageSize(&wrapper), bin.size());
  }

  Wrapper bad_version{0x466243B1, 3, bin.data(), nullptr};
  auto v3 = PtxForDevice(&bad_version, 0, 75);
  EXPECT_EQ(v3.status().code(), cu::kInvalidImage);
  EXPECT_TRUE(Contains(v3.status().message(), "wrapper version 3")) << v3.status().message();
  EXPECT_EQ(ImageSize(&bad_version), 0u);

  Wrapper no_data{0x466243B1, 1, nullptr, nullptr};
  auto null_data = PtxForDevice(&no_data, 0, 75);
  EXPECT_EQ(null_data.status().code(), cu::kInvalidImage);
  EXPECT_TRUE(Contains(null_data.status().message(), "null")) << null_data.status().message();
  EXPECT_EQ(ImageSize(&no_data), 0u);

  Wrapper sass_only{0x466243B1, 1, nullptr, nullptr};
  Bytes sass;
  LOAD_OR_SKIP(sass, "sass_only.fatbin");
  sass_only.data = sass.data();
  EXPECT_EQ(PtxForDevice(&sass_only, 0, 75).status().message(), kNoPtx);
}

TEST(FatbinReal, RawContainerWithUnknownSize) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "speed.fatbin");
  auto ptx = PtxForDevice(bin.data(), 0, 75);
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  EXPECT_TRUE(Contains(*ptx, ".entry unrolled("));
  EXPECT_EQ(ImageSize(bin.data()), bin.size());
  // A larger buffer than the container is fine: the header says where it ends.
  Bytes padded = bin;
  padded.resize(bin.size() + 100, 0xAB);
  EXPECT_TRUE(PtxForDevice(padded.data(), padded.size(), 75).ok());
}

TEST(FatbinReal, PtxTextPassesThrough) {
  Bytes bytes;
  LOAD_OR_SKIP(bytes, "kernels.ptx");
  const std::string text(bytes.begin(), bytes.end());  // Starts with "//" comments.
  auto sized = PtxForDevice(text.data(), text.size(), 75);
  ASSERT_TRUE(sized.ok()) << sized.status().message();
  EXPECT_EQ(*sized, text);
  auto unsized = PtxForDevice(text.c_str(), 0, 75);  // NUL-terminated, size unknown.
  ASSERT_TRUE(unsized.ok()) << unsized.status().message();
  EXPECT_EQ(*unsized, text);
  auto with_nul = PtxForDevice(text.c_str(), text.size() + 1, 75);
  ASSERT_TRUE(with_nul.ok());
  EXPECT_EQ(*with_nul, text);
  EXPECT_EQ(ImageSize(text.c_str()), text.size() + 1);
}

// ---------------------------------------------------------------------------------------------------------------
// Damaged real inputs: every failure is an error naming the problem, never a crash or a read out of bounds (the
// fuzzer, built with ASan, checks the latter; here each cut is copied into an exact-size buffer).

bool IsCleanFailure(const CallResult<std::string>& r) {
  return !r.ok() && (r.status().code() == cu::kInvalidImage || r.status().code() == cu::kNoBinaryForGpu) &&
         !r.status().message().empty();
}

TEST(FatbinDamaged, TruncatedAtEveryLength) {
  for (const char* file :
       {"default.fatbin", "speed.fatbin", "none.fatbin", "debug.fatbin", "size.fatbin", "multi_ptx.fatbin"}) {
    SCOPED_TRACE(file);
    Bytes bin;
    LOAD_OR_SKIP(bin, file);
    for (size_t len = 1; len < bin.size(); len += (len < 200 ? 1 : 7)) {
      SCOPED_TRACE(len);
      auto cut = std::make_unique<uint8_t[]>(len);
      std::memcpy(cut.get(), bin.data(), len);
      auto ptx = PtxForDevice(cut.get(), len, 75);
      ASSERT_TRUE(IsCleanFailure(ptx)) << (ptx.ok() ? "accepted" : ptx.status().message());
      if (len >= 16) {
        EXPECT_TRUE(Contains(ptx.status().message(), "truncated")) << ptx.status().message();
      }
      auto entries = ParseFatbinContainer(cut.get(), len);
      ASSERT_FALSE(entries.ok());
      EXPECT_EQ(entries.status().code(), cu::kInvalidImage);
    }
  }
}

TEST(FatbinDamaged, EveryByteFlipped) {
  for (const char* file : {"default.fatbin", "speed.fatbin", "none.fatbin", "debug.fatbin", "multi_ptx.fatbin"}) {
    SCOPED_TRACE(file);
    Bytes bin;
    LOAD_OR_SKIP(bin, file);
    for (size_t i = 0; i < bin.size(); ++i) {
      for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
        bin[i] ^= mask;
        auto ptx = PtxForDevice(bin.data(), bin.size(), 75);
        bin[i] ^= mask;
        // Some bytes do not matter (padding, names, LZ4 literals without a checksum): those may still load.
        if (!ptx.ok()) {
          ASSERT_TRUE(IsCleanFailure(ptx)) << "byte " << i << ": " << ptx.status().message();
        }
      }
    }
  }
}

// Field offsets in the headers, as documented in fatbin.cc.
constexpr size_t kContainerPayloadSize = 8;
constexpr size_t kEntryHeaderSize = 0x04, kEntryPayloadSize = 0x08, kEntryCompressedSize = 0x10, kEntryArch = 0x1c,
                 kEntryFlags = 0x28, kEntryUncompressedSize = 0x38;

template <typename T>
void Store(Bytes& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}
template <typename T>
T Fetch(const Bytes& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

// The offset of the PTX entry's header in a real container.
size_t PtxHeaderOffset(const Bytes& bin) {
  auto entries = ParseFatbinContainer(bin.data(), bin.size());
  EXPECT_TRUE(entries.ok());
  for (size_t off = 16; off < bin.size(); off += Fetch<uint32_t>(bin, off + 4) + Fetch<uint64_t>(bin, off + 8)) {
    if (Fetch<uint16_t>(bin, off) == 1) return off;
  }
  ADD_FAILURE() << "no PTX entry";
  return 16;
}

void ExpectInvalid(const Bytes& bin, const std::string& words) {
  auto ptx = PtxForDevice(bin.data(), bin.size(), 75);
  ASSERT_FALSE(ptx.ok());
  EXPECT_EQ(ptx.status().code(), cu::kInvalidImage) << ptx.status().message();
  EXPECT_TRUE(Contains(ptx.status().message(), words)) << ptx.status().message();
}

TEST(FatbinDamaged, NamedHeaderErrors) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "default.fatbin");
  const size_t ptx = PtxHeaderOffset(bin);
  {
    Bytes b = bin;
    Store<uint16_t>(b, 4, 2);
    ExpectInvalid(b, "container version 2");
  }
  {
    Bytes b = bin;
    Store<uint64_t>(b, kContainerPayloadSize, 1ull << 40);
    ExpectInvalid(b, "claims");
    EXPECT_FALSE(PtxForDevice(b.data(), 0, 75).ok());  // Size unknown: the cap alone stops it.
    EXPECT_EQ(ImageSize(b.data()), 0u);
  }
  {
    Bytes b = bin;
    Store<uint64_t>(b, kContainerPayloadSize, Fetch<uint64_t>(b, 8) + 8);
    ExpectInvalid(b, "truncated");
  }
  {
    Bytes b = bin;
    Store<uint32_t>(b, 16 + kEntryHeaderSize, 8);
    ExpectInvalid(b, "header size 8");
  }
  {
    Bytes b = bin;
    Store<uint64_t>(b, 16 + kEntryPayloadSize, 1ull << 33);
    ExpectInvalid(b, "runs past the end");
  }
  {
    Bytes b = bin;
    Store<uint32_t>(b, ptx + kEntryCompressedSize, Fetch<uint64_t>(b, ptx + kEntryPayloadSize) + 1);
    ExpectInvalid(b, "compressed size");
  }
  {
    Bytes b = bin;
    Store<uint64_t>(b, ptx + kEntryUncompressedSize, Fetch<uint64_t>(b, ptx + kEntryUncompressedSize) + 1);
    ExpectInvalid(b, "entry header says");
  }
  {
    Bytes b = bin;
    Store<uint64_t>(b, ptx + kEntryUncompressedSize, 0);
    ExpectInvalid(b, "uncompressed size 0");
  }
  {
    Bytes b = bin;
    Store<uint64_t>(b, ptx + kEntryFlags, Fetch<uint64_t>(b, ptx + kEntryFlags) | kLz4);
    ExpectInvalid(b, "both LZ4 and zstd");
  }
  {
    Bytes b = bin;  // The zstd frame's magic.
    b[ptx + Fetch<uint32_t>(b, ptx + 4)] ^= 0xFF;
    ExpectInvalid(b, "zstd");
  }
  {
    Bytes b = bin;  // Arch beyond the device: no PTX left to choose.
    Store<uint32_t>(b, ptx + kEntryArch, 86);
    EXPECT_EQ(PtxForDevice(b.data(), b.size(), 75).status().code(), cu::kNoBinaryForGpu);
  }
  {
    Bytes b = bin;
    b[0] ^= 0xFF;  // Neither magic nor text.
    ExpectInvalid(b, "not a fatbin wrapper, a fatbin container or PTX text");
  }
}

TEST(FatbinDamaged, Lz4SizeMismatch) {
  Bytes bin;
  LOAD_OR_SKIP(bin, "speed.fatbin");
  const size_t ptx = PtxHeaderOffset(bin);
  uint64_t real = Fetch<uint64_t>(bin, ptx + kEntryUncompressedSize);
  for (uint64_t claimed : {real - 1, real + 1, real * 2, uint64_t{1} << 29}) {
    SCOPED_TRACE(claimed);
    Bytes b = bin;
    Store<uint64_t>(b, ptx + kEntryUncompressedSize, claimed);
    ExpectInvalid(b, "LZ4");
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Containers built here.

struct EntrySpec {
  uint16_t kind = 1;
  uint32_t arch = 75;
  uint32_t flags = 0x11;
  std::string payload;  // As stored (compressed when flagged).
  uint64_t uncompressed_size = 0;
};

Bytes MakeContainer(const std::vector<EntrySpec>& specs) {
  Bytes entries;
  for (const auto& s : specs) {
    Bytes h(0x40, 0);
    size_t padded = (s.payload.size() + 7) / 8 * 8;
    Store<uint16_t>(h, 0, s.kind);
    Store<uint16_t>(h, 2, 0x0101);
    Store<uint32_t>(h, 4, 0x40);
    Store<uint64_t>(h, 8, padded);
    if (s.flags & (kLz4 | kZstd)) Store<uint32_t>(h, 0x10, static_cast<uint32_t>(s.payload.size()));
    Store<uint16_t>(h, 0x18, 0);
    Store<uint16_t>(h, 0x1a, 9);
    Store<uint32_t>(h, 0x1c, s.arch);
    Store<uint64_t>(h, 0x28, s.flags);
    Store<uint64_t>(h, 0x38, s.uncompressed_size);
    entries.insert(entries.end(), h.begin(), h.end());
    entries.insert(entries.end(), s.payload.begin(), s.payload.end());
    entries.resize(entries.size() + padded - s.payload.size(), 0);
  }
  Bytes c(16, 0);
  Store<uint32_t>(c, 0, 0xBA55ED50);
  Store<uint16_t>(c, 4, 1);
  Store<uint16_t>(c, 6, 16);
  Store<uint64_t>(c, 8, entries.size());
  c.insert(c.end(), entries.begin(), entries.end());
  return c;
}

std::string Ptx(int arch) { return ".version 9.0\n.target sm_" + std::to_string(arch) + "\n.address_size 64\n"; }

std::string ZstdCompress(const std::string& text, bool record_size) {
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, record_size ? 1 : 0);
  std::string out(ZSTD_compressBound(text.size()), '\0');
  size_t n = ZSTD_compress2(cctx.get(), out.data(), out.size(), text.data(), text.size());
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

TEST(FatbinSynthetic, EmptyContainerHasNoBinary) {
  Bytes c = MakeContainer({});
  auto ptx = PtxForDevice(c.data(), c.size(), 75);
  EXPECT_EQ(ptx.status().code(), cu::kNoBinaryForGpu);
  EXPECT_EQ(ptx.status().message(), kNoPtx);
}

TEST(FatbinSynthetic, UncompressedPtxWithoutNul) {
  std::string text = Ptx(75) + "// no NUL at the end";  // 8-byte padding adds the NULs here; none is required.
  Bytes c = MakeContainer({{.payload = text}});
  auto ptx = PtxForDevice(c.data(), c.size(), 75);
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  EXPECT_EQ(*ptx, text);
}

TEST(FatbinSynthetic, UnknownKindsAreSkipped) {
  Bytes c = MakeContainer({{.kind = 7, .payload = "whatever"}, {.kind = 1, .arch = 60, .payload = Ptx(60)}});
  auto entries = ParseFatbinContainer(c.data(), c.size());
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ((*entries)[0].kind, FatbinEntry::Kind::kUnknown);
  auto ptx = PtxForDevice(c.data(), c.size(), 75);
  ASSERT_TRUE(ptx.ok());
  EXPECT_TRUE(Contains(*ptx, "sm_60"));
}

TEST(FatbinSynthetic, PortablePtxPreferredOverArchSpecificOfTheSameArch) {
  Bytes c = MakeContainer({{.arch = 90, .flags = 0x11 | kArchSpecific, .payload = Ptx(90) + "// a\n"},
                           {.arch = 90, .payload = Ptx(90) + "// portable\n"}});
  auto ptx = PtxForDevice(c.data(), c.size(), 90);
  ASSERT_TRUE(ptx.ok());
  EXPECT_TRUE(Contains(*ptx, "portable"));
}

TEST(FatbinSynthetic, ZstdFrameWithoutRecordedSize) {
  const std::string text = Ptx(75) + std::string(5000, '\n') + '\0';
  {
    Bytes c = MakeContainer(
        {{.flags = 0x11 | kZstd, .payload = ZstdCompress(text, false), .uncompressed_size = text.size()}});
    auto ptx = PtxForDevice(c.data(), c.size(), 75);
    ASSERT_TRUE(ptx.ok()) << ptx.status().message();
    EXPECT_EQ(*ptx + '\0', text);
  }
  {  // Header says less than the frame holds.
    Bytes c = MakeContainer(
        {{.flags = 0x11 | kZstd, .payload = ZstdCompress(text, false), .uncompressed_size = text.size() - 1}});
    ExpectInvalid(c, "more than");
  }
  {  // Header says more than the frame holds.
    Bytes c =
        MakeContainer({{.flags = 0x11 | kZstd, .payload = ZstdCompress(text, false), .uncompressed_size = 1u << 29}});
    ExpectInvalid(c, "zstd");
  }
  {  // Frame cut short.
    std::string frame = ZstdCompress(text, false);
    frame.resize(frame.size() - 3);
    Bytes c = MakeContainer({{.flags = 0x11 | kZstd, .payload = frame, .uncompressed_size = text.size()}});
    ExpectInvalid(c, "zstd");
  }
}

TEST(FatbinSynthetic, HighlyCompressedZstdGrowsItsBuffer) {
  std::string text = Ptx(75);
  for (int i = 0; text.size() < (3u << 20); ++i) text += "add.s32 %r" + std::to_string(i % 7) + ", %r1, 1;\n";
  text += '\0';
  for (bool record_size : {true, false}) {
    std::string frame = ZstdCompress(text, record_size);
    ASSERT_LT(frame.size() * 16, text.size());  // Beyond the decoder's first guess of 4 x the input.
    Bytes c = MakeContainer({{.flags = 0x11 | kZstd, .payload = frame, .uncompressed_size = text.size()}});
    auto ptx = PtxForDevice(c.data(), c.size(), 75);
    ASSERT_TRUE(ptx.ok()) << ptx.status().message();
    EXPECT_EQ(*ptx + '\0', text);
  }
}

TEST(FatbinSynthetic, ExtractEntryChecksTheCallersEntry) {
  Bytes c = MakeContainer({{.payload = Ptx(75)}});
  FatbinEntry e;
  e.kind = FatbinEntry::Kind::kPtx;
  e.payload_offset = c.size() - 4;
  e.payload_size = 8;
  auto r = ExtractEntry(c.data(), c.size(), e);
  EXPECT_EQ(r.status().code(), cu::kInvalidImage);
  e.payload_offset = ~uint64_t{0};
  EXPECT_EQ(ExtractEntry(c.data(), c.size(), e).status().code(), cu::kInvalidImage);
}

TEST(FatbinInput, NotAnImage) {
  EXPECT_EQ(PtxForDevice(nullptr, 0, 75).status().code(), cu::kInvalidValue);
  EXPECT_EQ(ImageSize(nullptr), 0u);
  const char garbage[] = "hello, world";
  auto r = PtxForDevice(garbage, sizeof garbage, 75);
  EXPECT_EQ(r.status().code(), cu::kInvalidImage);
  EXPECT_TRUE(Contains(r.status().message(), "68 65 6c 6c")) << r.status().message();
  EXPECT_EQ(ImageSize(garbage), 0u);
  EXPECT_EQ(PtxForDevice("", 0, 75).status().code(), cu::kInvalidImage);
  EXPECT_EQ(PtxForDevice("ab", 0, 75).status().code(), cu::kInvalidImage);
  EXPECT_EQ(PtxForDevice("/* unterminated", 0, 75).status().code(), cu::kInvalidImage);
  uint8_t short_magic[] = {0xB1, 0x43};  // The wrapper magic's first bytes, size known.
  EXPECT_EQ(PtxForDevice(short_magic, sizeof short_magic, 75).status().code(), cu::kInvalidImage);
  uint8_t wrapper_prefix[8] = {0xB1, 0x43, 0x62, 0x46, 1, 0, 0, 0};
  auto w = PtxForDevice(wrapper_prefix, sizeof wrapper_prefix, 75);
  EXPECT_EQ(w.status().code(), cu::kInvalidImage);
  EXPECT_TRUE(Contains(w.status().message(), "wrapper truncated")) << w.status().message();
}

TEST(FatbinInput, PtxTextDetection) {
  for (const char* text : {".version 9.0\n", "\n\n  \t.version 8.0", "// comment\n.target sm_75",
                           "/* block */ .version 7.0", "\xEF\xBB\xBF.version 9.0"}) {
    SCOPED_TRACE(text);
    auto r = PtxForDevice(text, 0, 75);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(*r, text);
    EXPECT_EQ(ImageSize(text), std::strlen(text) + 1);
  }
  for (const char* text : {"version 9.0", "// only a comment", ". version",
                           "\x7f"
                           "ELF\x01"}) {
    SCOPED_TRACE(text);
    EXPECT_FALSE(PtxForDevice(text, 0, 75).ok());
  }
}

// ---------------------------------------------------------------------------------------------------------------
// LZ4 block decoder.

std::string Lz4(const Bytes& block, size_t out_size, std::string* out) {
  out->assign(out_size, '\0');
  return Lz4DecompressBlock(block.data(), block.size(), reinterpret_cast<uint8_t*>(out->data()), out->size());
}

TEST(Lz4Block, LiteralsOnly) {
  std::string out;
  EXPECT_EQ(Lz4({0x30, 'a', 'b', 'c'}, 3, &out), "");
  EXPECT_EQ(out, "abc");
  EXPECT_EQ(Lz4({}, 0, &out), "");
  EXPECT_NE(Lz4({}, 1, &out), "");
}

TEST(Lz4Block, OverlappingMatchRepeatsAPattern) {
  std::string out;
  // "ab", then a match at offset 2 of length 4 + 6 = 10, then the final literal "z".
  EXPECT_EQ(Lz4({0x26, 'a', 'b', 0x02, 0x00, 0x10, 'z'}, 13, &out), "");
  EXPECT_EQ(out, "ababababababz");
}

TEST(Lz4Block, LongLengthsUseExtensionBytes) {
  // 15 + 255 + 30 = 300 literals 'x', then a match of 4 + 15 + 255 + 255 + 0 = 529 at offset 1, then "!".
  Bytes block = {0xFF, 255, 30};
  block.insert(block.end(), 300, 'x');
  block.insert(block.end(), {0x01, 0x00, 255, 255, 0, 0x10, '!'});
  std::string out;
  EXPECT_EQ(Lz4(block, 300 + 529 + 1, &out), "");
  EXPECT_EQ(out, std::string(829, 'x') + "!");
}

TEST(Lz4Block, RejectsBadBlocks) {
  std::string out;
  EXPECT_TRUE(Contains(Lz4({0x10, 'a', 0x00, 0x00, 0x10, 'b'}, 6, &out), "offset 0"));
  EXPECT_TRUE(Contains(Lz4({0x10, 'a', 0x02, 0x00, 0x10, 'b'}, 6, &out), "before the start"));
  EXPECT_TRUE(Contains(Lz4({0x50, 'a', 'b'}, 5, &out), "past the end of the block"));
  EXPECT_TRUE(Contains(Lz4({0x30, 'a', 'b', 'c'}, 2, &out), "overflow"));
  EXPECT_TRUE(Contains(Lz4({0x30, 'a', 'b', 'c'}, 4, &out), "expected 4"));
  EXPECT_TRUE(Contains(Lz4({0x1F, 'a', 0x01, 0x00, 255, 255}, 600, &out), "match length"));
  EXPECT_TRUE(Contains(Lz4({0x10, 'a', 0x01}, 6, &out), "cut off"));
  EXPECT_TRUE(Contains(Lz4({0x1F, 'a', 0x01, 0x00, 200, 0x00}, 10, &out), "match length"));
  EXPECT_TRUE(Contains(Lz4({0x14, 'a', 0x01, 0x00, 0x00}, 5, &out), "match overflows"));
  EXPECT_TRUE(Contains(Lz4({0xF0, 255, 255, 255}, 100000, &out), "literal length"));
  EXPECT_TRUE(Contains(Lz4({0x10, 'a', 0x01, 0x00}, 5, &out), "final literals"));
}

}  // namespace
}  // namespace gpupool::emu
