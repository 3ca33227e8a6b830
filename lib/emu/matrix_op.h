// Tensor-core instructions as compiled: wmma.load/store/mma, mma.sync, ldmatrix and movmatrix name more registers
// than an Inst holds and need a shape and an element type per matrix, so each one's description lives in
// Function::matrix_ops, indexed by Inst::target. Internal to lib/emu.
#ifndef GPUPOOL_EMU_MATRIX_OP_H_
#define GPUPOOL_EMU_MATRIX_OP_H_

#include <cstdint>
#include <vector>

namespace gpupool::emu::internal {

// Element types of matrix fragments. tf32 sits in a 32-bit register like f32; b16 is ldmatrix/movmatrix's untyped
// 16-bit element.
// kE4M3 and kE5M2: the 8-bit floating-point formats of fp8 mma (sm_89+).
enum class MatrixType : uint8_t { kNone, kF16, kBF16, kTF32, kF32, kF64, kS8, kU8, kS32, kB16, kE4M3, kE5M2 };

// Elements of type `t` in one register (f64 fills a 64-bit register).
inline int ElementsPerRegister(MatrixType t) {
  switch (t) {
    case MatrixType::kF16: case MatrixType::kBF16: case MatrixType::kB16: return 2;
    case MatrixType::kS8: case MatrixType::kU8: case MatrixType::kE4M3: case MatrixType::kE5M2: return 4;
    default: return 1;
  }
}

// Which matrix of D = A * B + C a fragment holds.
enum class MatrixRole : uint8_t { kA, kB, kC, kD };

struct MatrixOp {
  uint8_t m = 0, n = 0, k = 0;  // Shape; ldmatrix/movmatrix: 8x8.
  MatrixType type[4] = {};      // Per MatrixRole.
  bool a_row = true, b_row = true;  // mma layouts of A and B (.row / .col).
  // wmma.load/store: the matrix moved (kA, kB, kC for loads, kD for stores) and its layout in memory.
  MatrixRole role = MatrixRole::kA;
  bool memory_row = true;
  bool satfinite = false;  // Integer mma: clamp to the s32 range instead of wrapping.
  bool trans = false;      // ldmatrix.trans.
  uint8_t matrices = 1;    // ldmatrix: .x1, .x2 or .x4.
  // Register slots per MatrixRole (fragments are registers only): the destination fragment is regs[kD] (wmma.load
  // and ldmatrix included), the fragment wmma.store writes is regs[kD] too, movmatrix's source is regs[kA].
  std::vector<uint32_t> regs[4];
};

}  // namespace gpupool::emu::internal

#endif  // GPUPOOL_EMU_MATRIX_OP_H_
