// The PTX module as parsed: a faithful, unresolved tree of the text. The interpreter (interp.cc) resolves names
// and types and compiles it into bytecode; the parser (ptx_parser.cc) only checks syntax.
#ifndef GPUPOOL_EMU_PTX_AST_H_
#define GPUPOOL_EMU_PTX_AST_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gpupool::emu::ptx {

enum class Space { kNone, kReg, kSreg, kConst, kGlobal, kLocal, kParam, kShared, kGeneric, kTex };

// Scalar types as spelled in PTX (".b32" -> kB32). kPred is ".pred".
enum class Type {
  kNone, kB8, kB16, kB32, kB64, kB128, kU8, kU16, kU32, kU64, kS8, kS16, kS32, kS64,
  kF16, kF16x2, kBF16, kBF16x2, kF32, kF64, kPred,
};

// ".u32" -> kU32 (with or without the dot); kNone when not a type name.
Type ParseType(const std::string& name);
// Size in bytes (kPred: 1; kNone: 0).
int TypeSize(Type type);

struct Operand {
  enum class Kind {
    kRegister,  // name: "%r1", "%rd4", "%p2", a special register with its component such as "%tid.x" or
                // "%ctaid.y", or a plain identifier naming a register/variable/function/label (resolved later).
    kImmInt,    // int_value (decimal, hex 0x.., octal 0.., binary 0b..; a trailing U is accepted).
    kImmFloat,  // PTX "0fXXXXXXXX": float_bits holds the 32 bits; double_value the same value widened.
    kImmDouble, // PTX "0dXXXXXXXXXXXXXXXX" or a decimal literal with '.'/exponent: double_value.
    kAddress,   // "[base+offset]", "[base]", "[offset]", "[base+-4]": name = base (register or symbol, may be
                // empty for an absolute address), int_value = byte offset.
    kVector,    // "{a, b, c, d}" (vector loads/stores, mov packing): elements.
    kPipe,      // "p|q" (setp with two predicate destinations): elements = {p, q}.
    kSink,      // "_".
    kList,      // "(a, b)" argument/return lists of call: elements.
  };
  Kind kind = Kind::kRegister;
  std::string name;
  int64_t int_value = 0;
  uint32_t float_bits = 0;
  double double_value = 0;
  bool negated = false;   // "!%p1" as a source predicate operand.
  bool has_offset = false;
  std::vector<Operand> elements;
};

struct Instruction {
  std::string guard;          // "%p1" for "@%p1 ...", "" when unguarded.
  bool guard_negated = false; // "@!%p1".
  std::string opcode;         // "ld" for "ld.global.nc.v4.f32".
  std::vector<std::string> modifiers;  // {"global", "nc", "v4", "f32"}, in the order written, without dots.
  std::vector<Operand> operands;       // As written; for call: {ret list or absent, callee, arg list}.
  int line = 0;               // 1-based line in the PTX text.
};

struct Initializer {
  // The initial value's bytes (little-endian, as the variable's storage) in runs, at increasing offsets, not
  // overlapping: the variable is zero between and after them. A brace initializer that skips elements starts a
  // new run, so the bytes held grow with the initializer's text, never with the variable's size. Addresses of
  // symbols to patch in at load time: {byte offset, symbol name, addend}. "generic(sym)" and "sym" both land here.
  struct Run {
    uint64_t offset = 0;
    std::vector<uint8_t> bytes;
  };
  std::vector<Run> runs;
  struct SymbolRef {
    uint64_t offset;
    std::string symbol;
    int64_t addend;
  };
  std::vector<SymbolRef> symbols;
};

struct Variable {
  Space space = Space::kNone;
  Type type = Type::kNone;
  std::string name;
  int vector_width = 1;       // .v2/.v4 -> 2/4.
  // Array dimensions flattened: 0 = scalar; -1 = unsized ("[]", extern shared); else element count (product of
  // all dimensions).
  int64_t array_size = 0;
  int align = 0;              // .align N; 0 = natural alignment.
  bool is_extern = false;
  bool is_visible = false;
  bool is_common = false;     // ".common": merged across modules.
  bool has_initializer = false;
  Initializer init;
  int line = 0;

  // Bytes of storage (element size * vector width * max(array_size, 1)); 0 for unsized arrays.
  uint64_t ByteSize() const;
};

// Register declarations: ".reg .b32 %r<12>;" -> {kB32, "%r", 12, true}; ".reg .pred p;" -> {kPred, "p", 1, false}.
struct RegisterDecl {
  Type type = Type::kNone;
  std::string name;
  int count = 1;
  bool is_range = false;  // "%r<12>" declares %r0..%r11.
  int vector_width = 1;
};

struct Function {
  std::string name;
  bool is_entry = false;      // .entry (kernel) vs .func.
  bool is_extern = false;     // Declaration only (e.g. ".extern .func vprintf"); body empty.
  bool is_visible = false;
  bool is_weak = false;
  std::vector<Variable> params;   // .param (space kParam) for entries and funcs; .reg params also allowed.
  std::vector<Variable> returns;  // .func return parameters.
  std::vector<RegisterDecl> registers;
  std::vector<Variable> locals;   // .local/.shared/.param variables declared in the body (incl. nested blocks).
  std::vector<Instruction> body;
  std::map<std::string, int> labels;  // Label -> index of the next instruction in body.
  // "ts: .branchtargets L0, L1, ...;" -> {"ts", {"L0", "L1", ...}}: the jump tables of brx.idx.
  std::map<std::string, std::vector<std::string>> branch_targets;
  // Performance directives (.maxntid, .reqntid, .minnctapersm, .maxnreg): name -> values.
  std::map<std::string, std::vector<int64_t>> directives;
  int line = 0;
};

struct Module {
  int version_major = 0, version_minor = 0;  // .version 9.0
  std::string target;                        // "sm_75" (first name in .target)
  std::vector<std::string> target_options;   // e.g. "debug", "texmode_independent"
  int address_size = 64;
  std::vector<Variable> globals;             // Module-scope .global/.const/.shared variables.
  std::vector<Function> functions;           // In order of appearance, declarations included.
};

}  // namespace gpupool::emu::ptx

#endif  // GPUPOOL_EMU_PTX_AST_H_
