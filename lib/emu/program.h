// The interpreter's compiled form of a PTX module: per-function bytecode with registers resolved to slots, symbols
// to addresses, and every instruction checked and specialised at load time, so execution does no name lookups.
// Internal to lib/emu.
#ifndef GPUPOOL_EMU_PROGRAM_H_
#define GPUPOOL_EMU_PROGRAM_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/call_status.h"
#include "emu/device.h"
#include "emu/matrix_op.h"
#include "emu/ptx_ast.h"

namespace gpupool::emu::internal {

using ptx::Type;

// Inst::mode of kCvtToFp8x2 and kCvtFromFp8x2.
constexpr uint8_t kFp8E5M2 = 1, kFp8Relu = 2;

enum class Op : uint8_t {
  kNop, kMov, kMovPack, kMovUnpack,
  kAdd, kSub, kMul, kMad, kFma, kDiv, kRem, kAbs, kNeg, kMin, kMax, kSad,
  kAddC, kSubC, kMadC,  // Carry-in forms (addc/subc/madc); .cc on any of them writes the carry flag.
  kAnd, kOr, kXor, kNot, kCnot, kShl, kShr, kShf, kLop3,
  kPopc, kClz, kBfind, kBrev, kBfe, kBfi, kPrmt,
  kRcp, kSqrt, kRsqrt, kSin, kCos, kLg2, kEx2, kTanh, kCopysign, kTestp,
  kSetp, kSet, kSelp, kSlct,
  kCvt, kCvta, kCvtaTo, kIsspacep,
  kLd, kSt, kAtom, kRed,
  kBra, kCall, kRet, kExit, kTrap,
  kBar, kBarArrive, kBarRed, kWarpSync,
  kShfl, kVote, kMatch, kRedux, kActivemask,
  kFence, kNanosleep, kDp4a, kDp2a,
  kBrxIdx,  // brx.idx: target = index into Function::jump_tables, s[0] the index.
  kHalves,  // f16x2 / bf16x2 / bf16 arithmetic (and f16 ex2/tanh): mode = the scalar Op, done per 16-bit half.
  kBmsk,    // bmsk.{clamp,wrap}.b32: mode 1 = wrap.
  // cp.async global -> shared: base/offset the shared destination, s[0] + s[1].imm the global source, s[2] the
  // size, s[3] (if any) the source size (mode 0) or the ignore-source predicate (mode 1).
  kCpAsync,
  // mbarrier.* (mode: MbarrierOp) and cp.async.mbarrier.arrive: base/offset the barrier's address; see
  // exec_ops.inc for the operands of each.
  kMbarrier,
  // cp.async.bulk: mode 0 global -> shared completing bytes on an mbarrier (s[3] + s[4].imm its address),
  // mode 1 shared -> global. base/offset the destination, s[0] + s[1].imm the source, s[2] the size.
  kCpAsyncBulk,
  // Specialised forms chosen at load time for the hottest shapes: register/immediate operands only, no rounding
  // modifier other than .rn, no ftz/sat/cc. Semantics are exactly those of the general forms.
  kFastAddF32, kFastSubF32, kFastMulF32, kFastFmaF32, kFastAddF64, kFastSubF64, kFastMulF64, kFastFmaF64,
  kFastAdd32, kFastSub32, kFastAdd64, kFastSub64, kFastMulLo32, kFastMadLo32, kFastMulWideS32, kFastMulWideU32,
  kFastMov, kFastSetpS32, kFastSetpU32, kFastAnd32, kFastOr32, kFastXor32, kFastShl32, kFastShrU32, kFastShlB64,
  // Tensor cores (described by Function::matrix_ops[Inst::target]): wmma.load/store run per thread, the others
  // are warp collectives.
  kWmmaLoad, kWmmaStore, kWmmaMma, kMma, kLdmatrix, kMovmatrix,
  kCvtTf32,  // cvt.{rna,rn,rz}.tf32.f32: the operand format of tf32 mma.
  // cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32 d, a, b and cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2} d, a: the operands
  // of fp8 mma. mode: kFp8E5M2 for e5m2 (else e4m3) | kFp8Relu.
  kCvtToFp8x2, kCvtFromFp8x2,
  // cvt.pack.sat.{u16,s16}.s32 d, a, b and cvt.pack.sat.{u8,s8,u4,s4,u2,s2}.s32.b32 d, a, b, c: a and b saturated
  // to `mode` bits (mode2: signed), b in the lowest bits, a above it, and c's low bits above both (not for 16).
  kCvtPack,
  // Texture and surface instructions (compile_tex.inc, exec_tex.inc). mode: the geometry (TexGeom).
  kTex, kTld4, kSuld, kSust,
};

// Geometry of a tex/tld4/suld/sust instruction (Inst::mode).
enum class TexGeom : uint8_t { k1d, k2d, k3d, kA1d, kA2d };

// Operand kinds after resolution.
enum class Src : uint8_t {
  kNone,
  kReg,       // reg: slot in the frame's register file.
  kImm,       // imm: bits, already in the instruction's type (absolute addresses of globals land here too).
  kSpecial,   // reg: a Special id.
  kLocalSym,  // imm: offset of a .local variable in the frame's local area (a local-space address).
  kParamSym,  // imm: offset of a .param variable in the frame's param area (a host address at run time).
};

enum class Special : uint8_t {
  kTidX, kTidY, kTidZ, kNtidX, kNtidY, kNtidZ, kCtaidX, kCtaidY, kCtaidZ, kNctaidX, kNctaidY, kNctaidZ,
  kLaneid, kWarpid, kNwarpid, kSmid, kNsmid, kGridid, kClock, kClock64, kGlobaltimer,
  kLanemaskEq, kLanemaskLe, kLanemaskLt, kLanemaskGe, kLanemaskGt, kDynamicSmemSize, kTotalSmemSize, kWarpSize,
  kZero,
  kEnvreg1, kEnvreg2,  // The grid-sync workspace of a cooperative launch: high and low 32 bits (0 otherwise).
  // Shared memory reserved for NVIDIA's own code (cooperative groups keeps barriers at %reserved_smem_offset_1):
  // kReservedSharedBytes after the kernel's shared window, in kernels that name these registers.
  kReservedSmemBegin, kReservedSmemEnd, kReservedSmemCap, kReservedSmemOffset0, kReservedSmemOffset1,
  kGlobaltimerLo, kGlobaltimerHi,
};

struct Operand {
  Src kind = Src::kNone;
  bool negated = false;  // Predicate source "!p".
  uint32_t reg = 0;
  uint64_t imm = 0;
};

enum class Space : uint8_t { kGeneric, kGlobal, kShared, kLocal, kParam, kConst };

// Instruction flags.
enum : uint16_t {
  kFtz = 1, kSat = 2, kApprox = 4, kCarryOut = 8, kHi = 16, kWide = 32, kNan = 64, kFull = 128, kRelu = 256,
  kShiftAmt = 512, kClamp = 1024, kLeft = 2048, kVolatile = 4096, kHasRound = 8192, kBits24 = 16384,
  kXorSignAbs = 32768,  // min/max.xorsign.abs.
};

enum class Round : uint8_t { kNone, kRn, kRz, kRm, kRp, kRni, kRzi, kRmi, kRpi, kRna };

struct Inst {
  Op op = Op::kNop;
  Type type = Type::kNone;   // Operation type (destination type for cvt).
  Type type2 = Type::kNone;  // Source type for cvt/set/slct.
  Round round = Round::kNone;
  Space space = Space::kGeneric;
  Space space2 = Space::kGeneric;  // cvta / cvta.to / isspacep: the named space.
  uint8_t mode = 0;   // Comparison, atomic op, shuffle/vote/prmt/bool mode... (per op).
  uint8_t mode2 = 0;  // Second mode (setp/set boolean combiner; testp kind...).
  uint8_t vec = 1;    // .v2/.v4 width for ld/st; number of destinations for mov unpack.
  uint16_t flags = 0;
  int32_t guard = -1;  // Predicate register slot guarding the instruction, -1 if none.
  bool guard_negated = false;
  Operand d[4];        // Destinations (ld.v4 uses 4; setp with '|' uses 2).
  Operand s[5];        // Sources.
  Operand base;        // Address base for ld/st/atom/red (kNone: absolute offset).
  int64_t offset = 0;  // Address offset.
  int32_t target = -1; // Branch: pc. Call: function index (or -1 with s[0] a register for indirect calls).
                       // Tensor-core ops: index into Function::matrix_ops.
  uint16_t nargs = 0, nrets = 0;  // Call: argument/return counts; their operands live in call_args.
  uint32_t call_args = 0;         // Call: index into Function::call_operands.
  int line = 0;
};

// kUndefined: declared, never defined (a device-side CUDA runtime function from libcudadevrt, such as
// cudaGraphSetConditional): the module loads, and a call of it fails the launch naming the function.
enum class Native : uint8_t { kNone, kVprintf, kMalloc, kFree, kAssertFail, kUndefined };

struct ParamSlot {
  uint32_t offset = 0, size = 0;
  int32_t reg = -1;  // .reg parameters: the register slot instead of param memory.
};

struct Function {
  std::string name;
  bool is_entry = false;
  bool defined = false;
  Native native = Native::kNone;
  std::vector<Inst> code;
  uint32_t num_regs = 0;
  std::vector<uint8_t> reg_bytes;   // Width of each register slot's declared type.
  std::vector<ParamSlot> params;    // In declaration order, within the param area.
  std::vector<ParamSlot> returns;
  uint32_t param_area = 0;          // Bytes: params, returns, then .param variables declared in the body.
  uint32_t local_area = 0;          // Bytes of .local variables (frame size on the thread's stack).
  std::vector<ParamInfo> kernel_params;  // Entries: the launch's parameter buffer layout (same as params).
  uint32_t kernel_param_bytes = 0;
  std::vector<Operand> call_operands;    // Argument/return operands of call instructions.
  std::vector<std::vector<uint32_t>> jump_tables;  // brx.idx targets (pcs), one table per .branchtargets list.
  std::vector<MatrixOp> matrix_ops;      // Tensor-core instructions' shapes, types and registers.
  bool uses_local = false;          // Needs a local stack.
  // Launch bounds that a GPU's compiler fits the kernel's registers to (0: not given): the threads of the largest
  // block (.maxntid or .reqntid, all dimensions multiplied), the blocks a multiprocessor must hold at once
  // (.minnctapersm) and registers per thread (.maxnreg).
  uint32_t bound_threads = 0, bound_blocks_per_sm = 0, bound_registers = 0;
  // Entries: the static shared memory this kernel and the functions it calls use (what ptxas reports for it and a
  // GPU gives each of its blocks). Variables of kernels that never run together share offsets.
  uint32_t static_shared_bytes = 0;
};

struct GlobalVar {
  uint64_t address = 0;  // Device (host) address.
  uint64_t size = 0;
  ptx::Space space = ptx::Space::kGlobal;
};

struct Program {
  int target = 0;  // `.target sm_XX[a|f]`: XX (major * 10 + minor); 0 when the module names none.
  std::vector<Function> functions;
  std::map<std::string, int> function_index;
  std::map<std::string, GlobalVar> globals;
  // Where dynamic shared memory starts: past every kernel's static shared variables (the largest kernel's, as
  // their variables overlap). A block's shared memory is this plus its dynamic bytes.
  uint32_t static_shared_bytes = 0;
  bool has_calls = false;            // Any call instruction: threads then need call-frame stacks.
  bool needs_local = false;          // Calls, or .local variables in any function: threads need local stacks.
  bool uses_reserved_shared = false;  // Reads a %reserved_smem_* register: CTAs get the reserved region.
  int version_major = 0, version_minor = 0;
};

// What a kMbarrier instruction does (Inst::mode); Inst::mode2 holds kMbarrierParity / kMbarrierExpectTx /
// kMbarrierNoInc.
enum MbarrierOp : uint8_t {
  kMbarInit, kMbarInval, kMbarArrive, kMbarArriveDrop, kMbarExpectTx, kMbarCompleteTx, kMbarTestWait, kMbarTryWait,
  kMbarPendingCount, kMbarAsyncArrive,
};
enum : uint8_t { kMbarrierParity = 1, kMbarrierExpectTx = 2, kMbarrierNoInc = 4 };
inline constexpr uint64_t kMbarCountMask = (1u << 21) - 1;  // Counts are 21-bit fields of the object.

// The reserved shared memory a CTA gets after its own window when its kernel uses it (cooperative groups needs
// 288 bytes at %reserved_smem_offset_1; GPUs of compute capability 8.0 and later reserve 1 KiB).
inline constexpr uint32_t kReservedSharedBytes = 1024;

// What a module may ask for, refused at load (compile.cc, ptx_parser.cc) with the limit named, as ptxas refuses
// it for a GPU of compute capability 7.x-9.x, and what the emulator adds where a GPU's limit is not the
// interpreter's (issue "Tenant isolation, hardened", item 5: nothing a few bytes of PTX declare may make a worker
// allocate without bound). A launch is bounded too: see kMaxBlockFootprintBytes (exec.h).
inline constexpr uint64_t kMaxLocalBytesPerThread = 512 * 1024;  // A GPU's local memory per thread.
// A GPU's static shared memory per block: more comes only as dynamic shared memory, up to the device's opt-in
// maximum. The emulator lays out every .shared variable of a module in one window (all of them count against a
// launch's opt-in maximum), so it checks each variable, and each function's own, against this, and the module's
// sum against kMaxModuleSharedBytes.
inline constexpr uint64_t kMaxStaticSharedBytes = 48 * 1024;
inline constexpr uint64_t kMaxModuleSharedBytes = 64ull << 20;
inline constexpr uint64_t kMaxKernelParamBytes = 32764;       // A GPU's kernel parameters (CUDA 12.1, Volta+).
inline constexpr uint64_t kMaxParamAreaBytes = 64 * 1024;     // Parameters and .param variables of one function.
// PTX registers are virtual (ptxas maps them onto at most 255 per thread): the interpreter gives each a 64-bit
// slot per thread. nvcc declares a few hundred per function, a few thousand in the largest kernels.
inline constexpr uint64_t kMaxRegistersPerFunction = 1u << 16;

// Address of function `index` when taken as a value (function pointers): far from any real address.
inline constexpr uint64_t kFunctionAddressBase = 0xF00D000000000000ull;

// Lays out and compiles `module`. `allocate` places module-scope .global/.const variables in device memory
// (returns the address or 0 when out of memory); the compiler zeroes them (`Zero`) and writes their initialisers
// (`Write`).
struct GlobalAllocator {
  virtual ~GlobalAllocator() = default;
  virtual uint64_t Allocate(uint64_t bytes, uint64_t align) = 0;
  virtual void Write(uint64_t address, const void* data, uint64_t bytes) = 0;
  virtual void Zero(uint64_t address, uint64_t bytes) = 0;
};
CallResult<Program> Compile(const ptx::Module& module, GlobalAllocator& allocator);

}  // namespace gpupool::emu::internal

#endif  // GPUPOOL_EMU_PROGRAM_H_
