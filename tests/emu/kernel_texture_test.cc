// Texture and surface objects on the emulated device (texture.cu): every fetch of nvcc-built kernels against a
// host reference written from the CUDA C++ Programming Guide's appendix "Texture Fetching":
//   nearest point: T[floor(x)]; linear: xB = x - 0.5, i = floor(xB), alpha = frac(xB) held in 9-bit fixed point
//   with 8 fractional bits, tex(x) = (1 - alpha) T[i] + alpha T[i + 1] (2D, 3D: products of the axis weights);
//   normalised coordinates scale by the extent; address modes clamp, border, wrap and mirror per texel index (wrap
//   and mirror only with normalised coordinates); 8/16-bit integers read as normalised floats unless read as
//   integers. Texel values are chosen so every filtered sum is exact in double, and the device rounds once to
//   float, as the reference does: results must match bit for bit.
// Surfaces: raw reads and writes at byte x coordinates, with .trap, .clamp and .zero out-of-range modes.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include <zstd.h>

#include "kernel_harness.h"

namespace gpupool::emu::test {
namespace {

constexpr uint32_t kBlock = 64;
constexpr uint32_t Blocks(size_t n) { return static_cast<uint32_t>((n + kBlock - 1) / kBlock); }

float F(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t U(float f) { return std::bit_cast<uint32_t>(f); }

// IEEE half -> float (the formats test stores halves).
float HalfBits(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// A texture's texels on the host, as the device holds them, and the reference fetch.
struct HostTexture {
  TextureDesc desc;
  std::vector<uint8_t> bytes;  // From desc.base: slices of rows of `pitch` bytes.

  // Texel (x, y, slice), decoded: floats for float results, integer bits otherwise; missing channels 0, 0, 1.
  std::array<uint32_t, 4> Texel(int64_t x, int64_t y, int64_t slice, bool float_result) const {
    const uint8_t* p = bytes.data() + slice * desc.slice_pitch + y * desc.pitch + x * desc.ElementBytes();
    std::array<float, 4> f = {0, 0, 0, 1};
    std::array<uint32_t, 4> u = {0, 0, 0, 1};
    for (int c = 0; c < desc.channels; ++c) {
      const uint8_t* q = p + c * TexFormatBytes(desc.format);
      switch (desc.format) {
        case TexFormat::kU8: {
          u[c] = q[0];
          f[c] = q[0] / 255.0f;
          if (desc.srgb && c < 3) {
            f[c] = f[c] <= 0.04045f ? f[c] / 12.92f : static_cast<float>(std::pow((f[c] + 0.055) / 1.055, 2.4));
          }
          break;
        }
        case TexFormat::kS8: {
          int8_t v = static_cast<int8_t>(q[0]);
          u[c] = static_cast<uint32_t>(int32_t{v});
          f[c] = std::max(v / 127.0f, -1.0f);
          break;
        }
        case TexFormat::kU16: {
          uint16_t v;
          std::memcpy(&v, q, 2);
          u[c] = v;
          f[c] = v / 65535.0f;
          break;
        }
        case TexFormat::kS16: {
          int16_t v;
          std::memcpy(&v, q, 2);
          u[c] = static_cast<uint32_t>(int32_t{v});
          f[c] = std::max(v / 32767.0f, -1.0f);
          break;
        }
        case TexFormat::kHalf: {
          uint16_t v;
          std::memcpy(&v, q, 2);
          f[c] = HalfBits(v);
          break;
        }
        case TexFormat::kU32: case TexFormat::kS32: std::memcpy(&u[c], q, 4); break;
        case TexFormat::kF32: std::memcpy(&f[c], q, 4); break;
      }
    }
    if (float_result) {
      for (int c = 0; c < 4; ++c) u[c] = U(f[c]);
    }
    return u;
  }

  bool FloatResult() const {
    switch (desc.format) {
      case TexFormat::kHalf: case TexFormat::kF32: return true;
      case TexFormat::kU32: case TexFormat::kS32: return false;
      default: return !desc.read_as_integer;
    }
  }

  // The Guide's addressing of texel index i on an axis of n texels; false: the border.
  bool Address(int64_t i, int64_t n, int axis, int64_t* out) const {
    TexAddress mode = desc.linear_resource ? TexAddress::kBorder : desc.address[axis];
    if (!desc.normalized_coords && (mode == TexAddress::kWrap || mode == TexAddress::kMirror)) {
      mode = TexAddress::kClamp;
    }
    switch (mode) {
      case TexAddress::kClamp: *out = std::clamp<int64_t>(i, 0, n - 1); return true;
      case TexAddress::kBorder: *out = i; return i >= 0 && i < n;
      case TexAddress::kWrap: *out = ((i % n) + n) % n; return true;
      case TexAddress::kMirror: {
        int64_t m = ((i % (2 * n)) + 2 * n) % (2 * n);
        *out = m < n ? m : 2 * n - 1 - m;
        return true;
      }
    }
    return false;
  }

  std::array<uint32_t, 4> At(const int64_t idx[3], int dims, int64_t layer, bool float_result) const {
    const int64_t extent[3] = {desc.width, desc.height, desc.depth};
    int64_t a[3] = {0, 0, 0};
    for (int k = 0; k < dims; ++k) {
      if (!Address(idx[k], extent[k], k, &a[k])) {
        std::array<uint32_t, 4> border;
        for (int c = 0; c < 4; ++c) border[c] = U(desc.linear_resource ? 0.0f : desc.border[c]);
        return border;
      }
    }
    return Texel(a[0], a[1], desc.layers ? layer : a[2], float_result);
  }

  // tex(x[, y[, z]]) on layer `layer`, as the Guide defines it. `integer_coords`: tex1Dfetch's indices.
  std::array<uint32_t, 4> Fetch(const float* coords, int64_t layer, bool integer_coords = false) const {
    const int dims = desc.dims;
    const bool float_result = FloatResult();
    if (desc.layers) layer = std::clamp<int64_t>(layer, 0, desc.layers - 1);
    const int64_t extent[3] = {desc.width, desc.height, desc.depth};
    const bool linear = desc.linear_filter && float_result && !integer_coords;
    int64_t i[3] = {0, 0, 0};
    double alpha[3] = {0, 0, 0};
    for (int k = 0; k < dims; ++k) {
      if (integer_coords) {
        i[k] = static_cast<int64_t>(coords[k]);
        continue;
      }
      float u = coords[k];
      if (desc.normalized_coords) u *= static_cast<float>(extent[k]);
      if (!linear) {
        i[k] = static_cast<int64_t>(std::floor(u));
        continue;
      }
      const float b = u - 0.5f;
      i[k] = static_cast<int64_t>(std::floor(b));
      alpha[k] = std::floor((b - std::floor(b)) * 256.0 + 0.5) / 256.0;  // 9-bit fixed point, a tie rounded up.
    }
    if (!linear) return At(i, dims, layer, float_result);
    double sum[4] = {0, 0, 0, 0};
    auto held = [](double v) { return std::floor(v * 256.0 + 0.5) / 256.0; };
    for (int corner = 0; corner < (1 << dims); ++corner) {
      int64_t idx[3];
      int o[3] = {0, 0, 0};
      for (int k = 0; k < dims; ++k) {
        o[k] = (corner >> k) & 1;
        idx[k] = i[k] + o[k];
      }
      // The texel's weight as an H100 forms it (FilterWeightsAreAnH100sOverTheMeasuredGrids): in 3-D, x with z
      // first, the rounded product taken by ox = 1 and the rest by ox = 0; then y, rounded for the texel whose oy
      // equals ox, the rest to the other.
      double w = o[0] ? alpha[0] : 1 - alpha[0];
      if (dims == 3) {
        const double cz = o[2] ? alpha[2] : 1 - alpha[2];
        w = o[0] ? held(alpha[0] * cz) : cz - held(alpha[0] * cz);
      }
      if (dims >= 2) {
        const double same = held(w * (o[0] ? alpha[1] : 1 - alpha[1]));
        w = o[1] == o[0] ? same : w - same;
      }
      const std::array<uint32_t, 4> t = At(idx, dims, layer, true);
      for (int c = 0; c < 4; ++c) sum[c] += w * F(t[c]);
    }
    std::array<uint32_t, 4> r;
    for (int c = 0; c < 4; ++c) r[c] = U(static_cast<float>(sum[c]));
    return r;
  }

  // tex2Dgather component `comp`: texels (i, j+1), (i+1, j+1), (i+1, j), (i, j) of the linear footprint.
  std::array<uint32_t, 4> Gather(float x, float y, int comp) const {
    float u[2] = {x, y};
    int64_t i[2];
    for (int k = 0; k < 2; ++k) {
      if (desc.normalized_coords) u[k] *= static_cast<float>(k == 0 ? desc.width : desc.height);
      i[k] = static_cast<int64_t>(std::floor(u[k] - 0.5f));
    }
    const int offsets[4][2] = {{0, 1}, {1, 1}, {1, 0}, {0, 0}};
    std::array<uint32_t, 4> r;
    for (int n = 0; n < 4; ++n) {
      const int64_t idx[3] = {i[0] + offsets[n][0], i[1] + offsets[n][1], 0};
      r[n] = At(idx, 2, 0, FloatResult())[comp];
    }
    return r;
  }
};

class TextureTest : public KernelTest {
 public:
  // A texture of `desc`'s shape filled with `fill(byte index)`, uploaded; sets desc.base/pitch/slice_pitch.
  HostTexture Make(TextureDesc desc, const std::function<uint8_t(size_t)>& fill) {
    HostTexture t;
    const uint64_t row = uint64_t{desc.width} * desc.ElementBytes();
    desc.pitch = (row + 31) / 32 * 32 + (desc.height > 1 ? 32 : 0);  // Padded rows: the pitch must be honoured.
    desc.slice_pitch = desc.pitch * desc.height;
    t.bytes.resize(desc.slice_pitch * desc.Slices());
    for (size_t k = 0; k < t.bytes.size(); ++k) t.bytes[k] = fill(k);
    desc.base = Upload(t.bytes);
    t.desc = desc;
    return t;
  }
  // Texel values that keep every filtered sum exact: floats with few significant bits.
  HostTexture MakeFloat(TextureDesc desc) {
    desc.format = TexFormat::kF32;
    std::vector<float> values;
    HostTexture t = Make(desc, [](size_t) { return uint8_t{0}; });
    for (size_t k = 0; k + 4 <= t.bytes.size(); k += 4) {
      float v = static_cast<float>(Int(-64, 64)) / 8.0f;
      std::memcpy(&t.bytes[k], &v, 4);
    }
    Check(device().CopyToDevice(t.desc.base, t.bytes.data(), t.bytes.size()), "upload");
    return t;
  }
  uint64_t Object(const TextureDesc& desc) {
    uint64_t handle = 0;
    Check(device().CreateTextureObject(desc, &handle), "CreateTextureObject");
    return handle;
  }
  std::vector<float> Coords(size_t n, float lo, float hi) {
    std::vector<float> c(n);
    // Half on multiples of 1/64 (texel centres and edges, exact weights), half anywhere: fractions that the
    // 9-bit weights must round.
    for (size_t i = 0; i < n; ++i) c[i] = i % 2 ? Float(lo, hi) : std::round(Float(lo, hi) * 64.0f) / 64.0f;
    return c;
  }

  static std::string What(const TextureDesc& d) {
    return "format " + std::to_string(static_cast<int>(d.format)) + " x" + std::to_string(d.channels) +
           " address " + std::to_string(static_cast<int>(d.address[0])) + "/" +
           std::to_string(static_cast<int>(d.address[1])) + (d.linear_filter ? " linear" : " point") +
           (d.normalized_coords ? " normalised" : "") + (d.read_as_integer ? " as-integer" : "");
  }

  // Fetches with tex2D<float4> (or <int4> for integer results) at n random points; compares with the reference.
  void Check2D(const HostTexture& t, size_t n = 200) {
    const bool norm = t.desc.normalized_coords;
    std::vector<float> x = norm ? Coords(n, -1.5f, 2.5f) : Coords(n, -3.0f, t.desc.width + 3.0f);
    std::vector<float> y = norm ? Coords(n, -1.5f, 2.5f) : Coords(n, -3.0f, t.desc.height + 3.0f);
    const uint64_t handle = Object(t.desc);
    uint64_t out = Output<uint32_t>(4 * n);
    Launch(Kernel("texture", t.FloatResult() ? "tex2d_f4" : "tex2d_i4"), {Blocks(n)}, {kBlock}, 0, handle, Upload(x),
           Upload(y), out, static_cast<int>(n));
    std::vector<uint32_t> got = Download<uint32_t>(out, 4 * n);
    for (size_t i = 0; i < n; ++i) {
      const float c[2] = {x[i], y[i]};
      const std::array<uint32_t, 4> want = t.Fetch(c, 0);
      for (int k = 0; k < 4; ++k) {
        ASSERT_EQ(got[4 * i + k], want[k]) << What(t.desc) << " at (" << x[i] << ", " << y[i] << ") channel " << k
                                           << ": got " << F(got[4 * i + k]) << ", want " << F(want[k]);
      }
    }
    Check(device().DestroyTextureObject(handle), "DestroyTextureObject");
  }
};

TEST_P(TextureTest, AddressModesFiltersAndCoordinates2D) {
  TRACE_SEED();
  for (int mode = 0; mode < 4; ++mode) {
    for (bool linear : {false, true}) {
      for (bool normalized : {false, true}) {
        TextureDesc d;
        d.dims = 2;
        d.width = 7;
        d.height = 5;
        d.channels = 4;
        d.address[0] = d.address[1] = static_cast<TexAddress>(mode);
        d.linear_filter = linear;
        d.normalized_coords = normalized;
        d.border[0] = 0.5f, d.border[1] = -2.0f, d.border[2] = 8.0f, d.border[3] = 0.25f;
        Check2D(MakeFloat(d), 120);
      }
    }
  }
  // Different modes per axis.
  TextureDesc d;
  d.dims = 2;
  d.width = 6;
  d.height = 9;
  d.channels = 1;
  d.address[0] = TexAddress::kMirror;
  d.address[1] = TexAddress::kBorder;
  d.linear_filter = true;
  d.normalized_coords = true;
  d.border[0] = 3.0f;
  Check2D(MakeFloat(d));
}

// The weights of a linear filter as an H100 (driver 580) returns them (tests/gpu/texture_weights.cu): between texels
// holding 0 and 1, at x = 0.5 + k/1024, the nearest multiple of 1/256, a tie (k = 2, 6, 10, ...) rounded up.
TEST_P(TextureTest, LinearWeightsRoundTiesUpAsAGpuDoes) {
  TextureDesc d;
  d.width = 2;
  d.channels = 1;
  d.linear_filter = true;
  HostTexture t = MakeFloat(d);
  const float texels[2] = {0.0f, 1.0f};
  std::memcpy(t.bytes.data(), texels, sizeof(texels));
  Check(device().CopyToDevice(t.desc.base, t.bytes.data(), t.bytes.size()), "upload");
  const size_t n = 1025;
  std::vector<float> x(n);
  for (size_t k = 0; k < n; ++k) x[k] = 0.5f + static_cast<float>(k) / 1024.0f;
  uint64_t out = Output<uint32_t>(4 * n);
  Launch(Kernel("texture", "tex1d_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc), Upload(x), out, int(n));
  std::vector<float> got = Download<float>(out, 4 * n);
  for (size_t k = 0; k < n; ++k) {
    ASSERT_EQ(got[4 * k] * 256.0f, std::floor(k / 4.0 + 0.5)) << "x = 0.5 + " << k << "/1024";
  }
  EXPECT_EQ(got[4 * 2] * 256.0f, 1.0f);   // As the H100 answered.
  EXPECT_EQ(got[4 * 10] * 256.0f, 3.0f);  // As the H100 answered.
}

// A 2-D linear filter as an H100 (driver 580) computed it, natively and on a slice: tests/remote/programs/textures's
// 37 x 23 texture, normalised coordinates, clamped. Each texel's weight is the product of its axes' 1/256 weights,
// rounded to 1/256 again: (119 * 3.5 + 101 * 5.25 + 19 * 6.75 + 17 * 1.25) / 256 = 4.28223 at the first point.
TEST_P(TextureTest, BilinearCornerWeightsAreHeldTo256thsAsAGpuDoes) {
  TextureDesc d;
  d.dims = 2;
  d.width = 37;
  d.height = 23;
  d.channels = 1;
  d.linear_filter = true;
  d.normalized_coords = true;
  d.address[0] = d.address[1] = TexAddress::kClamp;
  HostTexture t = MakeFloat(d);
  for (int y = 0; y < 23; ++y) {
    for (int x = 0; x < 37; ++x) {
      const float v = static_cast<float>((x * 7 + y * 13) % 29) * 0.25f;
      std::memcpy(t.bytes.data() + y * t.desc.pitch + x * 4, &v, 4);
    }
  }
  Check(device().CopyToDevice(t.desc.base, t.bytes.data(), t.bytes.size()), "upload");
  // The sample points of the program's pixels 13, 14 and 17 of row 6, computed as it computes them.
  auto coord = [](int pixel, int extent) { return -0.1f + 1.2f * (pixel + 0.5f) / extent; };
  std::vector<float> x = {coord(13, 90), coord(14, 90), coord(17, 90)};
  std::vector<float> y(3, coord(6, 61));
  uint64_t out = Output<uint32_t>(4 * 3);
  Launch(Kernel("texture", "tex2d_f4"), {Blocks(3)}, {kBlock}, 0, Object(t.desc), Upload(x), Upload(y), out, 3);
  std::vector<float> got = Download<float>(out, 4 * 3);
  EXPECT_EQ(got[0], 1096.25f / 256);  // 4.28223, as the H100 returned.
  EXPECT_EQ(got[4], 1193.5f / 256);   // 4.66211.
  EXPECT_EQ(got[8], 1153.5f / 256);   // 4.50586.
}

// A 3-D linear filter as an H100 (driver 580) weighs each of its eight texels (tests/gpu/texture_weights.cu, GPU
// kit 2026-11-27): a 2 x 2 x 2 texture, one texel 1 and the others 0, sampled at (0.5 + 118/256, 0.5 + 36/256,
// 0.5 + 77/256) and (0.5 + 129/256, 0.5 + 131/256, 0.5 + 250/256). The x-y product is held to 1/256 before z's weight
// multiplies it: texel 2 at the first point is (138 * 36 / 256 = 19.41 -> 19) * 179 / 256 = 13.28 -> 13/256, where
// the product held once would be 13.57 -> 14/256.
TEST_P(TextureTest, TrilinearWeightsHoldTheXYProductFirstAsAGpuDoes) {
  const float points[2][3] = {{0.5f + 118 / 256.0f, 0.5f + 36 / 256.0f, 0.5f + 77 / 256.0f},
                              {0.5f + 129 / 256.0f, 0.5f + 131 / 256.0f, 0.5f + 250 / 256.0f}};
  // texel (bit 0: x, bit 1: y, bit 2: z) -> the H100's weight in 256ths at each point.
  const float want[8][2] = {{83, 1}, {71, 1}, {13, 2}, {12, 2}, {36, 61}, {30, 62}, {6, 63}, {5, 64}};
  std::vector<float> x = {points[0][0], points[1][0]}, y = {points[0][1], points[1][1]},
                     z = {points[0][2], points[1][2]};
  for (int hot = 0; hot < 8; ++hot) {
    TextureDesc d;
    d.dims = 3;
    d.width = d.height = d.depth = 2;
    d.channels = 1;
    d.linear_filter = true;
    d.address[0] = d.address[1] = d.address[2] = TexAddress::kClamp;
    HostTexture t = MakeFloat(d);
    for (int k = 0; k < 8; ++k) {
      const float v = k == hot ? 1.0f : 0.0f;
      std::memcpy(t.bytes.data() + (k >> 2) * t.desc.slice_pitch + ((k >> 1) & 1) * t.desc.pitch + (k & 1) * 4, &v, 4);
    }
    Check(device().CopyToDevice(t.desc.base, t.bytes.data(), t.bytes.size()), "upload");
    uint64_t out = Output<uint32_t>(4 * 2);
    Launch(Kernel("texture", "tex3d_f4"), {Blocks(2)}, {kBlock}, 0, Object(t.desc), Upload(x), Upload(y), Upload(z),
           out, 2);
    std::vector<float> got = Download<float>(out, 4 * 2);
    EXPECT_EQ(got[0] * 256.0f, want[hot][0]) << "texel " << hot << " at the first point";
    EXPECT_EQ(got[4] * 256.0f, want[hot][1]) << "texel " << hot << " at the second point";
  }
}

// Every texel's weight of a linear filter as an H100 (driver 580) formed it over the grids of
// tests/gpu/texture_rule.cu: all 256 x 256 axis weights of a 2-D filter and 64^3 of a 3-D one (steps of 4/256), the
// GPU's answers kept in tests/emu/data/h100_texture_rule_{2d,3d}.bin.zst (GPU kit, 2026-11-27), each the weight in
// 256ths of one texel of a 2 x 2 (x 2) texture, against the emulator's at every point. The weights are the same in
// every build variant of the kernels: the default one checks them.
TEST_P(TextureTest, FilterWeightsAreAnH100sOverTheMeasuredGrids) {
  if (GetParam() != std::string("default")) GTEST_SKIP() << "the default variant checks the weights";
  for (int dims = 2; dims <= 3; ++dims) {
    const std::string path = std::string(GPUPOOL_EMU_KERNEL_SRC_DIR) + "/../data/h100_texture_rule_" +
                             std::to_string(dims) + "d.bin.zst";
    std::vector<char> packed;
    {
      FILE* f = std::fopen(path.c_str(), "rb");
      ASSERT_NE(f, nullptr) << path;
      char chunk[65536];
      for (size_t got; (got = std::fread(chunk, 1, sizeof(chunk), f)) > 0;) packed.insert(packed.end(), chunk, chunk + got);
      std::fclose(f);
    }
    const int texels = dims == 2 ? 4 : 8, side = dims == 2 ? 256 : 64, step = dims == 2 ? 1 : 4;
    const size_t n = dims == 2 ? 256 * 256 : 64 * 64 * 64;
    std::vector<uint16_t> want(texels * n);
    ASSERT_EQ(ZSTD_decompress(want.data(), want.size() * 2, packed.data(), packed.size()), want.size() * 2) << path;
    std::vector<float> x(n), y(n), z(n);
    for (size_t i = 0; i < n; ++i) {  // As texture_rule.cu samples: x = 0.5 + a/256 makes the axis weight a/256.
      x[i] = 0.5f + static_cast<float>(step * (i % side)) / 256.0f;
      y[i] = 0.5f + static_cast<float>(step * ((i / side) % side)) / 256.0f;
      z[i] = 0.5f + static_cast<float>(step * (i / (side * side))) / 256.0f;
    }
    const uint64_t dx = Upload(x), dy = Upload(y), dz = Upload(z);
    for (int hot = 0; hot < texels; ++hot) {
      TextureDesc d;
      d.dims = dims;
      d.width = d.height = 2;
      d.depth = dims == 3 ? 2 : 1;
      d.channels = 1;
      d.linear_filter = true;
      d.address[0] = d.address[1] = d.address[2] = TexAddress::kClamp;
      HostTexture t = MakeFloat(d);
      for (int k = 0; k < texels; ++k) {
        const float v = k == hot ? 1.0f : 0.0f;
        std::memcpy(t.bytes.data() + (k >> 2) * t.desc.slice_pitch + ((k >> 1) & 1) * t.desc.pitch + (k & 1) * 4, &v,
                    4);
      }
      Check(device().CopyToDevice(t.desc.base, t.bytes.data(), t.bytes.size()), "upload");
      uint64_t out = Output<uint32_t>(4 * n);
      if (dims == 2) {
        Launch(Kernel("texture", "tex2d_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc), dx, dy, out, int(n));
      } else {
        Launch(Kernel("texture", "tex3d_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc), dx, dy, dz, out, int(n));
      }
      std::vector<float> got = Download<float>(out, 4 * n);
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) {
        const float expected = static_cast<float>(want[hot * n + i]) / 256.0f;
        if (got[4 * i] != expected && wrong++ == 0) {
          ADD_FAILURE() << dims << "-D texel " << hot << " at axis weights (" << step * (i % side) << ", "
                        << step * ((i / side) % side) << ", " << step * (i / (side * side)) << ")/256: "
                        << got[4 * i] * 256.0f << "/256, the H100 " << want[hot * n + i] << "/256";
        }
      }
      EXPECT_EQ(wrong, 0u) << dims << "-D texel " << hot << ": weights unlike the H100's";
    }
  }
}

TEST_P(TextureTest, FormatsChannelsAndReadModes) {
  TRACE_SEED();
  const TexFormat formats[] = {TexFormat::kU8, TexFormat::kS8, TexFormat::kU16, TexFormat::kS16,
                               TexFormat::kHalf, TexFormat::kU32, TexFormat::kS32, TexFormat::kF32};
  for (TexFormat format : formats) {
    for (uint8_t channels : {1, 2, 4}) {
      for (bool as_integer : {false, true}) {
        for (bool linear : {false, true}) {
          TextureDesc d;
          d.dims = 2;
          d.width = 5;
          d.height = 4;
          d.format = format;
          d.channels = channels;
          d.address[0] = d.address[1] = TexAddress::kClamp;
          d.read_as_integer = as_integer;
          d.linear_filter = linear;
          HostTexture t = Make(d, [&](size_t) { return static_cast<uint8_t>(U32()); });
          if (format == TexFormat::kHalf || format == TexFormat::kF32) {
            // Finite values with few significant bits, so that filtered sums stay exact.
            const size_t step = TexFormatBytes(format);
            for (size_t k = 0; k + step <= t.bytes.size(); k += step) {
              const float v = static_cast<float>(Int(-512, 512)) / 16.0f;
              if (format == TexFormat::kF32) {
                std::memcpy(&t.bytes[k], &v, 4);
              } else {
                // v * 16 is an integer below 2^10: exact in half as sign, exponent and mantissa.
                uint16_t h = 0;
                if (v != 0) {
                  int e;
                  const float m = std::frexp(std::fabs(v), &e);  // v = m * 2^e, m in [0.5, 1).
                  h = static_cast<uint16_t>(((e + 14) << 10) | (static_cast<uint32_t>(m * 2048.0f) & 0x3ff));
                  if (v < 0) h |= 0x8000;
                }
                std::memcpy(&t.bytes[k], &h, 2);
              }
            }
            Check(device().CopyToDevice(t.desc.base, t.bytes.data(), t.bytes.size()), "upload");
          }
          Check2D(t, 64);
        }
      }
    }
  }
}

TEST_P(TextureTest, SrgbDecodesColourChannels) {
  TRACE_SEED();
  TextureDesc d;
  d.dims = 2;
  d.width = 4;
  d.height = 4;
  d.format = TexFormat::kU8;
  d.channels = 4;
  d.srgb = true;
  d.linear_filter = true;
  d.address[0] = d.address[1] = TexAddress::kWrap;
  d.normalized_coords = true;
  HostTexture t = Make(d, [&](size_t) { return static_cast<uint8_t>(U32()); });
  Check2D(t, 100);
}

TEST_P(TextureTest, OneThreeDimensionalAndLayered) {
  TRACE_SEED();
  const size_t n = 100;
  {  // 1D, linear, wrap.
    TextureDesc d;
    d.width = 11;
    d.channels = 2;
    d.linear_filter = true;
    d.normalized_coords = true;
    HostTexture t = MakeFloat(d);
    std::vector<float> x = Coords(n, -2, 3);
    uint64_t out = Output<uint32_t>(4 * n);
    Launch(Kernel("texture", "tex1d_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc), Upload(x), out, int(n));
    std::vector<uint32_t> got = Download<uint32_t>(out, 4 * n);
    for (size_t i = 0; i < n; ++i) {
      auto want = t.Fetch(&x[i], 0);
      for (int k = 0; k < 4; ++k) ASSERT_EQ(got[4 * i + k], want[k]) << "1D at " << x[i];
    }
  }
  {  // 3D, linear, mirror / clamp / border.
    TextureDesc d;
    d.dims = 3;
    d.width = 4;
    d.height = 3;
    d.depth = 5;
    d.channels = 1;
    d.linear_filter = true;
    d.normalized_coords = true;
    d.address[0] = TexAddress::kMirror;
    d.address[1] = TexAddress::kClamp;
    d.address[2] = TexAddress::kBorder;
    d.border[0] = 7;
    HostTexture t = MakeFloat(d);
    std::vector<float> x = Coords(n, -1, 2), y = Coords(n, -1, 2), z = Coords(n, -1, 2);
    uint64_t out = Output<uint32_t>(4 * n);
    Launch(Kernel("texture", "tex3d_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc), Upload(x), Upload(y), Upload(z),
           out, int(n));
    std::vector<uint32_t> got = Download<uint32_t>(out, 4 * n);
    for (size_t i = 0; i < n; ++i) {
      const float c[3] = {x[i], y[i], z[i]};
      auto want = t.Fetch(c, 0);
      for (int k = 0; k < 4; ++k) {
        ASSERT_EQ(got[4 * i + k], want[k]) << "3D at " << x[i] << "," << y[i] << "," << z[i];
      }
    }
  }
  std::vector<int> layer(n);
  for (int& l : layer) l = Int(-1, 4);  // Outside [0, 3] too: the layer index is clamped.
  {  // 1D layered, point.
    TextureDesc d;
    d.width = 9;
    d.layers = 4;
    d.channels = 4;
    d.address[0] = TexAddress::kBorder;
    d.border[2] = 1.5f;
    HostTexture t = MakeFloat(d);
    std::vector<float> x = Coords(n, -2, 11);
    uint64_t out = Output<uint32_t>(4 * n);
    Launch(Kernel("texture", "tex1d_layered_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc), Upload(x),
           Upload(layer), out, int(n));
    std::vector<uint32_t> got = Download<uint32_t>(out, 4 * n);
    for (size_t i = 0; i < n; ++i) {
      auto want = t.Fetch(&x[i], layer[i]);
      for (int k = 0; k < 4; ++k) ASSERT_EQ(got[4 * i + k], want[k]) << "1D layered at " << x[i] << " layer " << layer[i];
    }
  }
  {  // 2D layered, linear.
    TextureDesc d;
    d.dims = 2;
    d.width = 5;
    d.height = 6;
    d.layers = 4;
    d.channels = 2;
    d.linear_filter = true;
    d.address[0] = d.address[1] = TexAddress::kClamp;
    HostTexture t = MakeFloat(d);
    std::vector<float> x = Coords(n, -1, 6), y = Coords(n, -1, 7);
    uint64_t out = Output<uint32_t>(4 * n);
    Launch(Kernel("texture", "tex2d_layered_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc), Upload(x), Upload(y),
           Upload(layer), out, int(n));
    std::vector<uint32_t> got = Download<uint32_t>(out, 4 * n);
    for (size_t i = 0; i < n; ++i) {
      const float c[2] = {x[i], y[i]};
      auto want = t.Fetch(c, layer[i]);
      for (int k = 0; k < 4; ++k) ASSERT_EQ(got[4 * i + k], want[k]) << "2D layered at " << x[i] << "," << y[i];
    }
  }
}

TEST_P(TextureTest, FetchFromLinearMemoryReadsZeroOutside) {
  TRACE_SEED();
  const size_t n = 120;
  std::vector<int> index(n);
  for (int& i : index) i = Int(-20, 60);
  for (bool integer : {false, true}) {
    TextureDesc d;
    d.width = 40;
    d.channels = 4;
    d.linear_resource = true;
    d.format = integer ? TexFormat::kS32 : TexFormat::kF32;
    d.address[0] = TexAddress::kClamp;  // Ignored for linear memory: outside reads zero.
    HostTexture t = integer ? Make(d, [&](size_t) { return static_cast<uint8_t>(U32()); }) : MakeFloat(d);
    uint64_t out = Output<uint32_t>(4 * n);
    Launch(Kernel("texture", integer ? "fetch_i4" : "fetch_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc),
           Upload(index), out, int(n));
    std::vector<uint32_t> got = Download<uint32_t>(out, 4 * n);
    for (size_t i = 0; i < n; ++i) {
      const float c = static_cast<float>(index[i]);
      auto want = t.Fetch(&c, 0, true);
      for (int k = 0; k < 4; ++k) ASSERT_EQ(got[4 * i + k], want[k]) << "tex1Dfetch(" << index[i] << ")";
      if (index[i] < 0 || index[i] >= 40) EXPECT_EQ(want[0], 0u);
    }
  }
}

TEST_P(TextureTest, GatherReturnsOneChannelOfTheFootprint) {
  TRACE_SEED();
  const size_t n = 80;
  for (bool integer : {false, true}) {
    TextureDesc d;
    d.dims = 2;
    d.width = 6;
    d.height = 5;
    d.channels = 4;
    d.format = integer ? TexFormat::kS16 : TexFormat::kF32;
    d.read_as_integer = integer;
    d.address[0] = TexAddress::kWrap;
    d.address[1] = TexAddress::kBorder;
    d.normalized_coords = true;
    d.border[0] = d.border[1] = d.border[2] = d.border[3] = 0;
    HostTexture t = integer ? Make(d, [&](size_t) { return static_cast<uint8_t>(U32()); }) : MakeFloat(d);
    std::vector<float> x = Coords(n, -1, 2), y = Coords(n, -0.5f, 1.5f);
    uint64_t out = Output<uint32_t>(16 * n);
    Launch(Kernel("texture", integer ? "gather_i4" : "gather_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc),
           Upload(x), Upload(y), out, int(n));
    std::vector<uint32_t> got = Download<uint32_t>(out, 16 * n);
    for (size_t i = 0; i < n; ++i) {
      for (int comp = 0; comp < 4; ++comp) {
        auto want = t.Gather(x[i], y[i], comp);
        for (int k = 0; k < 4; ++k) {
          ASSERT_EQ(got[16 * i + 4 * comp + k], want[k]) << "gather " << comp << " at " << x[i] << "," << y[i];
        }
      }
    }
  }
}

TEST_P(TextureTest, LevelOfDetailSelectsTheOnlyLevel) {
  TRACE_SEED();
  TextureDesc d;
  d.dims = 2;
  d.width = 8;
  d.height = 8;
  d.channels = 1;
  d.linear_filter = true;
  d.normalized_coords = true;
  HostTexture t = MakeFloat(d);
  const size_t n = 50;
  std::vector<float> x = Coords(n, 0, 1), y = Coords(n, 0, 1);
  uint64_t out = Output<uint32_t>(4 * n);
  Launch(Kernel("texture", "tex2d_lod_f4"), {Blocks(n)}, {kBlock}, 0, Object(t.desc), Upload(x), Upload(y), 2.5f, out,
         int(n));
  std::vector<uint32_t> got = Download<uint32_t>(out, 4 * n);
  for (size_t i = 0; i < n; ++i) {
    const float c[2] = {x[i], y[i]};
    EXPECT_EQ(got[4 * i], t.Fetch(c, 0)[0]);
  }
}

// Surfaces: a 2D surface of 32-bit texels, read and written in and out of range in each mode.
TEST_P(TextureTest, Surface2DOutOfRangeModes) {
  TRACE_SEED();
  TextureDesc d;
  d.surface = true;
  d.dims = 2;
  d.width = 10;
  d.height = 7;
  d.format = TexFormat::kU32;
  HostTexture t = Make(d, [&](size_t) { return static_cast<uint8_t>(U32()); });
  const uint64_t surface = Object(t.desc);
  auto texel = [&](int64_t x, int64_t y) {
    uint32_t v;
    std::memcpy(&v, &t.bytes[y * t.desc.pitch + x * 4], 4);
    return v;
  };
  const size_t n = 100;
  std::vector<int> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = Int(-3, 12) * 4;
    y[i] = Int(-2, 8);
  }
  const auto inside = [&](size_t i) { return x[i] >= 0 && x[i] < 40 && y[i] >= 0 && y[i] < 7; };
  for (const char* mode : {"clamp", "zero"}) {
    uint64_t out = Output<uint32_t>(n);
    Launch(Kernel("texture", std::string("surf2d_read_") + mode), {Blocks(n)}, {kBlock}, 0, surface, Upload(x),
           Upload(y), out, int(n));
    std::vector<uint32_t> got = Download<uint32_t>(out, n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t want = std::string(mode) == "zero" && !inside(i)
                          ? 0
                          : texel(std::clamp(x[i] / 4, 0, 9), std::clamp(y[i], 0, 6));
      ASSERT_EQ(got[i], want) << mode << " read at x = " << x[i] << " bytes, y = " << y[i];
    }
  }
  // Writes: .zero drops those outside; .clamp moves them to the edge (the last write to a texel wins, so each
  // texel gets at most one writer here: one point per row, in order).
  for (const char* mode : {"zero", "clamp"}) {
    std::vector<int> wx, wy;
    std::vector<uint32_t> values;
    for (int row = -2; row < 9; ++row) {
      wx.push_back(Int(-3, 12) * 4);
      wy.push_back(row);
      values.push_back(U32());
    }
    std::vector<uint8_t> expected = t.bytes;
    std::vector<bool> written(70, false);
    for (size_t i = 0; i < wx.size(); ++i) {
      const bool in = wx[i] >= 0 && wx[i] < 40 && wy[i] >= 0 && wy[i] < 7;
      if (!in && std::string(mode) == "zero") continue;
      const int cx = std::clamp(wx[i] / 4, 0, 9), cy = std::clamp(wy[i], 0, 6);
      if (written[cy * 10 + cx]) {  // Two writers (rows clamped together): keep this point inside instead.
        wx[i] = -400;
        if (std::string(mode) == "clamp") wy[i] = -400;
        continue;
      }
      written[cy * 10 + cx] = true;
      std::memcpy(&expected[cy * t.desc.pitch + cx * 4], &values[i], 4);
    }
    // Points demoted above must neither write (zero) nor collide (clamp): drop them.
    std::vector<int> fx, fy;
    std::vector<uint32_t> fv;
    for (size_t i = 0; i < wx.size(); ++i) {
      if (wx[i] == -400) continue;
      fx.push_back(wx[i]);
      fy.push_back(wy[i]);
      fv.push_back(values[i]);
    }
    Launch(Kernel("texture", std::string("surf2d_write_") + mode), {1}, {kBlock}, 0, surface, Upload(fx), Upload(fy),
           Upload(fv), int(fx.size()));
    std::vector<uint8_t> got = Download<uint8_t>(t.desc.base, t.bytes.size());
    for (int row = 0; row < 7; ++row) {
      ASSERT_EQ(0, std::memcmp(&got[row * t.desc.pitch], &expected[row * t.desc.pitch], 40))
          << mode << " write, row " << row;
    }
    t.bytes = got;
  }
  // .trap: the launch fails with an illegal address that names the surface access.
  std::vector<int> bad_x = {0, 40}, bad_y = {0, 0};
  CallStatus s = TryLaunch(Kernel("texture", "surf2d_read_trap"), {1}, {2}, 0, surface, Upload(bad_x), Upload(bad_y),
                          Output<uint32_t>(2), 2);
  EXPECT_EQ(s.code(), cu::kIllegalAddress) << Describe(s);
  EXPECT_NE(s.message().find("outside the surface"), std::string::npos) << s.message();
}

TEST_P(TextureTest, SurfaceWidthsAndLayers) {
  TRACE_SEED();
  {  // float4 in 1D: elements [0, n) bumped into [n, 2n).
    const int n = 20;
    TextureDesc d;
    d.surface = true;
    d.width = 2 * n;
    d.channels = 4;
    d.format = TexFormat::kF32;
    HostTexture t = MakeFloat(d);
    Launch(Kernel("texture", "surf1d_float4_bump"), {1}, {kBlock}, 0, Object(t.desc), n);
    std::vector<float> got = Download<float>(t.desc.base, 8 * n);
    for (int i = 0; i < 4 * n; ++i) {
      float v;
      std::memcpy(&v, &t.bytes[4 * i], 4);
      ASSERT_EQ(got[4 * n + i], v + 1) << "float4 element " << i / 4;
    }
  }
  {  // uchar4 in 3D.
    const int w = 5, h = 3, depth = 4;
    TextureDesc d;
    d.surface = true;
    d.dims = 3;
    d.width = 2 * w;
    d.height = h;
    d.depth = depth;
    d.channels = 4;
    d.format = TexFormat::kU8;
    HostTexture t = Make(d, [&](size_t) { return static_cast<uint8_t>(U32()); });
    Launch(Kernel("texture", "surf3d_uchar4_bump"), {depth}, {w, h}, 0, Object(t.desc), w, h, depth);
    std::vector<uint8_t> got = Download<uint8_t>(t.desc.base, t.bytes.size());
    for (int z = 0; z < depth; ++z) {
      for (int y = 0; y < h; ++y) {
        for (int b = 0; b < 4 * w; ++b) {
          const size_t row = z * t.desc.slice_pitch + y * t.desc.pitch;
          ASSERT_EQ(got[row + 4 * w + b], static_cast<uint8_t>(t.bytes[row + b] + 1)) << z << "," << y << "," << b;
        }
      }
    }
  }
  {  // short in 1D and 2D layered arrays.
    const int w = 6, h = 4, layers = 3;
    for (bool two_d : {false, true}) {
      TextureDesc d;
      d.surface = true;
      d.dims = two_d ? 2 : 1;
      d.width = 2 * w;
      d.height = two_d ? h : 1;
      d.layers = layers;
      d.format = TexFormat::kS16;
      HostTexture t = Make(d, [&](size_t) { return static_cast<uint8_t>(U32()); });
      if (two_d) {
        Launch(Kernel("texture", "surf2d_layered_short_bump"), {layers}, {w, h}, 0, Object(t.desc), w, h, layers);
      } else {
        Launch(Kernel("texture", "surf1d_layered_short_bump"), {layers}, {w}, 0, Object(t.desc), w, layers);
      }
      std::vector<uint8_t> got = Download<uint8_t>(t.desc.base, t.bytes.size());
      for (int l = 0; l < layers; ++l) {
        for (int y = 0; y < (two_d ? h : 1); ++y) {
          for (int x = 0; x < w; ++x) {
            const size_t row = l * t.desc.slice_pitch + y * t.desc.pitch;
            int16_t in, out;
            std::memcpy(&in, &t.bytes[row + 2 * x], 2);
            std::memcpy(&out, &got[row + 2 * (x + w)], 2);
            ASSERT_EQ(out, static_cast<int16_t>(in + 1)) << (two_d ? "2D" : "1D") << " layer " << l;
          }
        }
      }
    }
  }
  {  // 64-bit texels in 2D (two 32-bit channels).
    const int w = 4, h = 3;
    TextureDesc d;
    d.surface = true;
    d.dims = 2;
    d.width = 2 * w;
    d.height = h;
    d.channels = 2;
    d.format = TexFormat::kU32;
    HostTexture t = Make(d, [&](size_t) { return static_cast<uint8_t>(U32()); });
    Launch(Kernel("texture", "surf2d_int64_bump"), {1}, {w, h}, 0, Object(t.desc), w, h);
    std::vector<uint8_t> got = Download<uint8_t>(t.desc.base, t.bytes.size());
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        int64_t in, out;
        std::memcpy(&in, &t.bytes[y * t.desc.pitch + 8 * x], 8);
        std::memcpy(&out, &got[y * t.desc.pitch + 8 * (x + w)], 8);
        ASSERT_EQ(out, in + 1);
      }
    }
  }
}

TEST_P(TextureTest, WrongGeometryOrHandleFaults) {
  TextureDesc d;
  d.width = 8;
  HostTexture t = MakeFloat(d);
  const uint64_t one_d = Object(t.desc);
  std::vector<float> c = {1.0f};
  CallStatus s = TryLaunch(Kernel("texture", "tex2d_f4"), {1}, {1}, 0, one_d, Upload(c), Upload(c),
                          Output<float>(4), 1);
  EXPECT_EQ(s.code(), cu::kIllegalInstruction) << Describe(s);
  EXPECT_NE(s.message().find("2D texture instruction on a 1D texture object"), std::string::npos) << s.message();
}

TEST_P(TextureTest, PlainMemoryIsNoTextureObject) {
  // A buffer of the program's own is not a texture object, nor is a surface object.
  std::vector<float> c = {1.0f};
  uint64_t buffer = Output<float>(64, 0);
  CallStatus s = TryLaunch(Kernel("texture", "tex1d_f4"), {1}, {1}, 0, buffer, Upload(c), Output<float>(4), 1);
  EXPECT_EQ(s.code(), cu::kIllegalAddress) << Describe(s);
  EXPECT_NE(s.message().find("is not a texture object"), std::string::npos) << s.message();
}

TEST_P(TextureTest, SurfaceIsNoTextureObject) {
  TextureDesc d;
  d.surface = true;
  d.width = 8;
  HostTexture t = MakeFloat(d);
  std::vector<float> c = {1.0f};
  CallStatus s = TryLaunch(Kernel("texture", "tex1d_f4"), {1}, {1}, 0, Object(t.desc), Upload(c), Output<float>(4), 1);
  EXPECT_EQ(s.code(), cu::kIllegalAddress) << Describe(s);
}

// Issue "Tenant isolation, hardened", item 1. Handles were once the addresses of descriptors in device memory,
// trusted after a magic word: a kernel handed the address of a record it wrote itself, in that layout, with 200
// channels made the interpreter write ~800 bytes past a stack object (SIGSEGV), with a zero width divide by zero
// (SIGFPE). Memory a tenant writes is never an object now, whatever it holds; the device works on after a reset.
TEST_P(TextureTest, ForgedDescriptorInTenantMemoryIsNoObject) {
  struct OldRecord {  // The descriptor's layout when handles were addresses: a magic word, then the description.
    uint64_t magic;
    TextureDesc desc;
  };
  constexpr uint64_t kOldTextureMagic = 0x4f58455450475047ull, kOldSurfaceMagic = 0x4f46525350475047ull;
  std::vector<std::function<void(TextureDesc&)>> forgeries = {
      [](TextureDesc& d) { d.channels = 200; },
      // A zero width with normalised coordinates and wrap: the wrap's i % 0 was a SIGFPE.
      [](TextureDesc& d) { d.width = 0; d.normalized_coords = true; d.address[0] = TexAddress::kWrap; },
      [](TextureDesc& d) { d.dims = 9; },
      [](TextureDesc& d) { d.format = static_cast<TexFormat>(77); },
      [](TextureDesc& d) { d.address[0] = static_cast<TexAddress>(200); },
      [](TextureDesc& d) { d.layers = 0xffffffffu; d.base = 0x1000; },
  };
  for (size_t k = 0; k < forgeries.size(); ++k) {
    for (bool surface : {false, true}) {
      SCOPED_TRACE("forgery " + std::to_string(k) + (surface ? " (surface)" : " (texture)"));
      OldRecord record{};
      record.magic = surface ? kOldSurfaceMagic : kOldTextureMagic;
      record.desc.surface = surface;
      record.desc.dims = surface ? 2 : 1;  // The geometry of the kernel below: the fetch reaches the fields.
      record.desc.width = 8;
      record.desc.base = Output<float>(8, 0);
      forgeries[k](record.desc);
      std::vector<uint8_t> bytes(sizeof(record));
      std::memcpy(bytes.data(), &record, sizeof(record));
      const uint64_t forged = Upload(bytes);
      std::vector<int> c = {1};
      CallStatus s = surface ? TryLaunch(Kernel("texture", "surf2d_read_trap"), {1}, {1}, 0, forged, Upload(c),
                                        Upload(c), Output<uint32_t>(1), 1)
                            : TryLaunch(Kernel("texture", "tex1d_f4"), {1}, {1}, 0, forged,
                                        Upload(std::vector<float>{1.0f}), Output<float>(4), 1);
      EXPECT_EQ(s.code(), cu::kIllegalAddress) << Describe(s);
      EXPECT_NE(s.message().find(surface ? "is not a surface object" : "is not a texture object"), std::string::npos)
          << s.message();
      device().ResetContext();
    }
  }
  // The device still samples a real object.
  TextureDesc d;
  d.width = 8;
  HostTexture t = MakeFloat(d);
  std::vector<float> x = {2.5f};
  uint64_t out = Output<float>(4);
  Launch(Kernel("texture", "tex1d_f4"), {1}, {1}, 0, Object(t.desc), Upload(x), out, 1);
  EXPECT_EQ(U(Download<float>(out, 4)[0]), t.Fetch(x.data(), 0)[0]);
}

// Values near a live handle (every bit flipped, neighbours) and random values name no object: each launch fails
// with an illegal address, never reaches undefined behaviour, and the next launch after a reset works.
TEST_P(TextureTest, RandomAndNeighbouringHandlesAreRefused) {
  TRACE_SEED();
  TextureDesc d;
  d.width = 8;
  std::vector<std::function<uint64_t(uint64_t)>> candidates;
  for (int bit = 0; bit < 64; ++bit) candidates.push_back([bit](uint64_t h) { return h ^ (uint64_t{1} << bit); });
  candidates.push_back([](uint64_t h) { return h + 1; });
  candidates.push_back([](uint64_t h) { return h - 1; });
  candidates.push_back([](uint64_t) { return uint64_t{0}; });
  candidates.push_back([](uint64_t) { return ~uint64_t{0}; });
  for (int i = 0; i < 16; ++i) candidates.push_back([this](uint64_t) { return U64(); });
  Function* fetch = Kernel("texture", "tex1d_f4");
  for (size_t k = 0; k < candidates.size(); ++k) {
    HostTexture t = MakeFloat(d);
    const uint64_t live = Object(t.desc);
    const uint64_t handle = candidates[k](live);
    if (handle == live) continue;
    SCOPED_TRACE("candidate " + std::to_string(k) + ": handle " + std::to_string(handle) + " next to " +
                 std::to_string(live));
    CallStatus s = TryLaunch(fetch, {1}, {1}, 0, handle, Upload(std::vector<float>{1.0f}), Output<float>(4), 1);
    EXPECT_EQ(s.code(), cu::kIllegalAddress) << Describe(s);
    device().ResetContext();
    fetch = Kernel("texture", "tex1d_f4");
  }
}

// A kernel queued before an object's destruction still samples it; one queued after a creation sees the new
// object; a destroyed object's handle names nothing once its kernels ran. The queue is held by a host function
// until everything is queued, so the order is the queue's, not the timing's.
TEST_P(TextureTest, ObjectsFollowStreamOrder) {
  TextureDesc d;
  d.width = 8;
  HostTexture first = MakeFloat(d), second = MakeFloat(d);
  Function* fetch = Kernel("texture", "tex1d_f4");
  std::vector<float> x = {3.5f};
  const uint64_t coords = Upload(x);
  const uint64_t out_first = Output<float>(4), out_second = Output<float>(4);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Check(device().LaunchHostFunc(nullptr, [released] { released.wait(); }), "hold the queue");
  auto launch = [&](uint64_t handle, uint64_t out) {
    int n = 1;
    void* params[] = {&handle, const_cast<uint64_t*>(&coords), &out, &n};
    LaunchConfig config{{1}, {1}, 0, nullptr};
    Check(device().Launch(fetch, config, params), "launch");
  };
  const uint64_t a = Object(first.desc);
  launch(a, out_first);
  Check(device().DestroyTextureObject(a), "destroy while a kernel that samples it is queued");
  const uint64_t b = Object(second.desc);
  launch(b, out_second);
  release.set_value();
  Check(device().Synchronize(), "sync");
  EXPECT_EQ(U(Download<float>(out_first, 4)[0]), first.Fetch(x.data(), 0)[0]);
  EXPECT_EQ(U(Download<float>(out_second, 4)[0]), second.Fetch(x.data(), 0)[0]);
  CallStatus s = TryLaunch(fetch, {1}, {1}, 0, a, coords, Output<float>(4), 1);
  EXPECT_EQ(s.code(), cu::kIllegalAddress) << "a destroyed object: " << Describe(s);
}

GPUPOOL_INSTANTIATE_VARIANTS(TextureTest);

// The device API's own checks (no kernel).
using TextureObjectTest = EmuTest;

TEST_F(TextureObjectTest, TexelsMustLieInsideOneAllocation) {
  uint64_t memory = Alloc(1024);
  TextureDesc d;
  d.dims = 2;
  d.width = 16;
  d.height = 16;
  d.pitch = 64;
  d.base = memory;
  uint64_t handle = 0;
  EXPECT_TRUE(device().CreateTextureObject(d, &handle).ok());  // 16 rows of 64 bytes: exactly the allocation.
  d.height = 17;
  EXPECT_EQ(device().CreateTextureObject(d, &handle).code(), cu::kInvalidValue);
  d.height = 16;
  d.pitch = 32;  // Shorter than a row of 16 floats.
  EXPECT_EQ(device().CreateTextureObject(d, &handle).code(), cu::kInvalidValue);
  d.pitch = 64;
  d.channels = 3;
  EXPECT_EQ(device().CreateTextureObject(d, &handle).code(), cu::kInvalidValue);
  d.channels = 1;
  d.base = 0x1000;
  EXPECT_EQ(device().CreateTextureObject(d, &handle).code(), cu::kInvalidValue);
}

TEST_F(TextureObjectTest, DestroyOnceAndTakesNoDeviceMemory) {
  uint64_t free_before = 0, free_after = 0;
  uint64_t memory = Alloc(256);
  device().MemInfo(&free_before, nullptr);
  TextureDesc d;
  d.width = 64;
  d.base = memory;
  uint64_t handle = 0;
  Check(device().CreateTextureObject(d, &handle), "create");
  device().MemInfo(&free_after, nullptr);
  EXPECT_EQ(free_before, free_after) << "the description lives in the device's table, not in its memory";
  EXPECT_EQ(handle >> 56, TextureTable::kHandleTag) << "a handle is never an address";
  Check(device().DestroyTextureObject(handle), "destroy");
  EXPECT_EQ(device().DestroyTextureObject(handle).code(), cu::kInvalidValue) << "destroyed twice";
  EXPECT_EQ(device().DestroyTextureObject(memory).code(), cu::kInvalidValue) << "not an object";
  EXPECT_EQ(device().DestroyTextureObject(0).code(), cu::kInvalidValue) << "not an object";
}

// The table holds TextureTable::kCapacity objects at once, and refuses one more naming the limit. Slots are reused
// once every one was handed out, under a new generation: the old handle of a reused slot stays refused.
TEST_F(TextureObjectTest, AtMostCapacityObjectsAndReusedSlotsRefuseOldHandles) {
  TextureDesc d;
  d.width = 64;
  d.base = Alloc(256);
  std::vector<uint64_t> handles(TextureTable::kCapacity);
  for (uint64_t& h : handles) Check(device().CreateTextureObject(d, &h), "create");
  uint64_t extra = 0;
  CallStatus s = device().CreateTextureObject(d, &extra);
  EXPECT_EQ(s.code(), cu::kOutOfMemory) << Describe(s);
  EXPECT_NE(s.message().find(std::to_string(TextureTable::kCapacity)), std::string::npos) << s.message();
  Check(device().DestroyTextureObject(handles[5]), "destroy");
  Check(device().CreateTextureObject(d, &extra), "create in the freed slot");
  EXPECT_NE(extra, handles[5]) << "a reused slot gets a new generation";
  EXPECT_EQ(device().DestroyTextureObject(handles[5]).code(), cu::kInvalidValue) << "the old handle";
  Check(device().DestroyTextureObject(extra), "destroy the new one");
  for (size_t i = 0; i < handles.size(); ++i) {
    if (i != 5) Check(device().DestroyTextureObject(handles[i]), "destroy");
  }
  Check(device().Synchronize(), "sync");
}

}  // namespace
}  // namespace gpupool::emu::test
