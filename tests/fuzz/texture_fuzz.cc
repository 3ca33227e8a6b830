// libFuzzer target for texture and surface objects on the emulated device (issue "Tenant isolation, hardened",
// item 1): random descriptions through Device::CreateTextureObject, and random handles, forged records in device
// memory (the layout descriptors had when handles were their addresses), stale and neighbouring handles, at random
// coordinates, through every texture and surface instruction form nvcc emits. Whatever the input, creation either
// succeeds or is refused with kInvalidValue, and a launch either runs or fails with a kernel fault the device
// reports (illegal address or instruction); ASan and UBSan (tests/fuzz/run.sh) catch any undefined behaviour on the
// way. Built by tests/fuzz/run.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/device.h"

namespace {

using gpupool::CallStatus;
using gpupool::emu::Device;
namespace cu = gpupool::cu;
using gpupool::emu::Function;
using gpupool::emu::LaunchConfig;
using gpupool::emu::Module;
using gpupool::emu::TexAddress;
using gpupool::emu::TexFormat;
using gpupool::emu::TextureDesc;

// One kernel per instruction form: each takes (handle, coordinates, output), reads its coordinates as 32-bit
// words (integers, or float bits) and stores what the instruction returns.
const char* const kKernels[] = {"tex1d", "tex1d_fetch", "tex2d", "tex3d", "tex_a1d", "tex_a2d", "tld4",
                                "suld2d_trap", "suld2d_clamp", "suld2d_zero", "sust2d_trap", "sust2d_zero",
                                "suld1d_v4", "suld3d_b8", "suld_a2d_b16", "sust_a1d_b16", "suld2d_b64"};

// Loads four coordinate words into %r1..%r4 (and %f1..%f4, the same bits), the handle into %rd1, the output
// address into %rd3.
#define PROLOGUE                                                                               \
  "  .reg .b32 %r<16>;\n  .reg .f32 %f<16>;\n  .reg .b64 %rd<8>;\n  .reg .b16 %rs<8>;\n"      \
  "  ld.param.u64 %rd1, [h];\n  ld.param.u64 %rd2, [c];\n  ld.param.u64 %rd3, [o];\n"         \
  "  cvta.to.global.u64 %rd2, %rd2;\n  cvta.to.global.u64 %rd3, %rd3;\n"                       \
  "  ld.global.u32 %r1, [%rd2];\n  ld.global.u32 %r2, [%rd2+4];\n"                             \
  "  ld.global.u32 %r3, [%rd2+8];\n  ld.global.u32 %r4, [%rd2+12];\n"                          \
  "  mov.b32 %f1, %r1;\n  mov.b32 %f2, %r2;\n  mov.b32 %f3, %r3;\n  mov.b32 %f4, %r4;\n"
#define ENTRY(name, body) \
  ".visible .entry " name "(.param .u64 h, .param .u64 c, .param .u64 o)\n{\n" PROLOGUE body "  ret;\n}\n"
#define STORE4F "  st.global.v4.f32 [%rd3], {%f5, %f6, %f7, %f8};\n"
#define STORE1 "  st.global.u32 [%rd3], %r5;\n"

const char kPtx[] =
    ".version 7.0\n.target sm_75\n.address_size 64\n"
    ENTRY("tex1d", "  tex.1d.v4.f32.f32 {%f5, %f6, %f7, %f8}, [%rd1, {%f1}];\n" STORE4F)
    ENTRY("tex1d_fetch", "  tex.1d.v4.s32.s32 {%r5, %r6, %r7, %r8}, [%rd1, {%r1}];\n" STORE1)
    ENTRY("tex2d", "  tex.2d.v4.f32.f32 {%f5, %f6, %f7, %f8}, [%rd1, {%f1, %f2}];\n" STORE4F)
    ENTRY("tex3d", "  tex.3d.v4.f32.f32 {%f5, %f6, %f7, %f8}, [%rd1, {%f1, %f2, %f3, %f3}];\n" STORE4F)
    ENTRY("tex_a1d", "  tex.a1d.v4.f32.f32 {%f5, %f6, %f7, %f8}, [%rd1, {%r3, %f1}];\n" STORE4F)
    ENTRY("tex_a2d", "  tex.a2d.v4.f32.f32 {%f5, %f6, %f7, %f8}, [%rd1, {%r3, %f1, %f2, %f2}];\n" STORE4F)
    ENTRY("tld4", "  tld4.g.2d.v4.s32.f32 {%r5, %r6, %r7, %r8}, [%rd1, {%f1, %f2}];\n" STORE1)
    ENTRY("suld2d_trap", "  suld.b.2d.b32.trap {%r5}, [%rd1, {%r1, %r2}];\n" STORE1)
    ENTRY("suld2d_clamp", "  suld.b.2d.b32.clamp {%r5}, [%rd1, {%r1, %r2}];\n" STORE1)
    ENTRY("suld2d_zero", "  suld.b.2d.b32.zero {%r5}, [%rd1, {%r1, %r2}];\n" STORE1)
    ENTRY("sust2d_trap", "  sust.b.2d.b32.trap [%rd1, {%r1, %r2}], {%r4};\n")
    ENTRY("sust2d_zero", "  sust.b.2d.b32.zero [%rd1, {%r1, %r2}], {%r4};\n")
    ENTRY("suld1d_v4", "  suld.b.1d.v4.b32.trap {%r5, %r6, %r7, %r8}, [%rd1, {%r1}];\n" STORE1)
    ENTRY("suld3d_b8",
          "  suld.b.3d.v4.b8.clamp {%rs1, %rs2, %rs3, %rs4}, [%rd1, {%r1, %r2, %r3, %r3}];\n"
          "  cvt.u32.u16 %r5, %rs1;\n" STORE1)
    ENTRY("suld_a2d_b16", "  suld.b.a2d.b16.zero {%rs1}, [%rd1, {%r3, %r1, %r2, %r2}];\n  cvt.u32.u16 %r5, %rs1;\n" STORE1)
    ENTRY("sust_a1d_b16", "  cvt.u16.u32 %rs1, %r4;\n  sust.b.a1d.b16.trap [%rd1, {%r3, %r1}], {%rs1};\n")
    ENTRY("suld2d_b64", "  suld.b.2d.b64.clamp {%rd4}, [%rd1, {%r1, %r2}];\n  st.global.u64 [%rd3], %rd4;\n");

constexpr uint64_t kTexelBytes = 64 * 1024;

// Reads the input front to back; past its end, zeros.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T Take() {
    T v{};
    const size_t n = std::min(sizeof(T), size_ - std::min(size_, at_));
    if (n > 0) std::memcpy(&v, data_ + at_, n);
    at_ += sizeof(T);
    return v;
  }
  std::vector<uint8_t> Rest(size_t at_most) {
    const size_t from = std::min(at_, size_);
    return std::vector<uint8_t>(data_ + from, data_ + from + std::min(at_most, size_ - from));
  }

 private:
  const uint8_t* data_;
  size_t size_, at_ = 0;
};

[[noreturn]] void Die(const std::string& what, const CallStatus& s) {
  std::fprintf(stderr, "%s: code %d: %s\n", what.c_str(), static_cast<int>(s.code()), s.message().c_str());
  std::abort();
}

struct Fixture {
  Device device{[] {
    gpupool::emu::DeviceOptions o;
    o.memory_bytes = 16ull << 20;
    o.worker_threads = 1;
    return o;
  }()};
  Module* module = nullptr;
  std::vector<Function*> kernels;
  uint64_t texels = 0, coords = 0, out = 0, forged = 0;

  // (Re)loads the kernels and allocates the buffers: after a fault, the context was reset and they are gone.
  void Prepare() {
    if (module != nullptr) return;
    if (CallStatus s = device.LoadPtx(kPtx, &module); !s.ok()) Die("LoadPtx", s);
    kernels.clear();
    for (const char* name : kKernels) {
      Function* f = nullptr;
      if (CallStatus s = device.GetFunction(module, name, &f); !s.ok()) Die(name, s);
      kernels.push_back(f);
    }
    for (uint64_t* p : {&texels, &coords, &out, &forged}) {
      if (CallStatus s = device.Malloc(p == &texels ? kTexelBytes : 256, p); !s.ok()) Die("Malloc", s);
    }
  }
};

Fixture& TheFixture() {
  static Fixture* fixture = new Fixture();  // Lives for the whole run, as a worker's device does.
  return *fixture;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& fx = TheFixture();
  fx.Prepare();
  Device& device = fx.device;
  Input in(data, size);
  const uint8_t kernel = in.Take<uint8_t>();
  const uint8_t handle_mode = in.Take<uint8_t>();

  // A description with every field from the input: the device must refuse what does not hold together.
  TextureDesc d;
  const uint8_t flags = in.Take<uint8_t>();
  d.surface = flags & 1;
  d.linear_filter = flags & 2;
  d.normalized_coords = flags & 4;
  d.read_as_integer = flags & 8;
  d.srgb = flags & 16;
  d.linear_resource = flags & 32;
  d.dims = in.Take<uint8_t>() % 5;
  d.channels = in.Take<uint8_t>() % 6;
  d.format = static_cast<TexFormat>(in.Take<uint8_t>() % 10);
  for (TexAddress& a : d.address) a = static_cast<TexAddress>(in.Take<uint8_t>() % 5);
  d.width = in.Take<uint16_t>();
  d.height = in.Take<uint8_t>();
  d.depth = in.Take<uint8_t>();
  d.layers = in.Take<uint8_t>();
  d.pitch = in.Take<uint16_t>();
  d.slice_pitch = in.Take<uint32_t>();
  d.base = fx.texels + in.Take<uint16_t>() % kTexelBytes;
  for (float& b : d.border) b = in.Take<float>();
  uint32_t coords[4];
  for (uint32_t& c : coords) c = in.Take<uint32_t>();
  const uint64_t noise = in.Take<uint64_t>();
  std::vector<uint8_t> texels = in.Rest(kTexelBytes);

  if (CallStatus s = device.CopyToDevice(fx.coords, coords, sizeof(coords)); !s.ok()) Die("coords", s);
  if (!texels.empty()) {
    if (CallStatus s = device.CopyToDevice(fx.texels, texels.data(), texels.size()); !s.ok()) Die("texels", s);
  }
  uint64_t object = 0;
  CallStatus created = device.CreateTextureObject(d, &object);
  if (!created.ok() && (created.code() != cu::kInvalidValue || created.message().empty())) {
    Die("CreateTextureObject", created);
  }
  uint64_t handle = 0;
  switch (handle_mode % 6) {
    case 0: handle = object; break;
    case 1: handle = object ^ noise; break;             // A neighbour: flipped generation, slot, salt or tag.
    case 2: handle = noise; break;                      // Anything.
    case 3: handle = object + (noise & 0xff) - 0x80; break;
    case 4: {  // A forged record in device memory, in the layout descriptors had when handles were their
               // addresses (a magic word, then a TextureDesc, unchecked: the input's own bytes), passed as a handle.
      const uint64_t magic = d.surface ? 0x4f46525350475047ull : 0x4f58455450475047ull;
      uint8_t record[256] = {};
      std::memcpy(record, &magic, sizeof(magic));
      if (!texels.empty()) {
        std::memcpy(record + sizeof(magic), texels.data(), std::min(texels.size(), sizeof(record) - sizeof(magic)));
      }
      // A tenant knows its own pointers: the forgery's texels may lie in its real memory.
      if (noise >> 63) std::memcpy(record + sizeof(magic) + offsetof(TextureDesc, base), &fx.texels, 8);
      if (CallStatus s = device.CopyToDevice(fx.forged, record, sizeof(record)); !s.ok()) Die("forged", s);
      handle = fx.forged + (noise & 0x7f) * 8 % 128;
      break;
    }
    default:  // Stale: destroyed before the launch.
      handle = object;
      if (created.ok()) {
        if (CallStatus s = device.DestroyTextureObject(object); !s.ok()) Die("DestroyTextureObject", s);
        created = CallStatus(cu::kInvalidValue, "destroyed");
      }
      break;
  }
  Function* f = fx.kernels[kernel % fx.kernels.size()];
  void* params[] = {&handle, &fx.coords, &fx.out};
  CallStatus launched = device.Launch(f, LaunchConfig{{1}, {1}, 0, nullptr}, params);
  if (launched.ok()) launched = device.Synchronize();
  if (created.ok()) {
    if (CallStatus s = device.DestroyTextureObject(object); !s.ok() && device.StickyError().ok()) {
      Die("DestroyTextureObject", s);
    }
  }
  if (!launched.ok()) {
    if (launched.code() != cu::kIllegalAddress && launched.code() != cu::kIllegalInstruction &&
        launched.code() != cu::kMisalignedAddress) {
      Die("launch", launched);
    }
    device.ResetContext();  // A fault is sticky: start the next input on a clean context.
    fx.module = nullptr;
  }
  return 0;
}
