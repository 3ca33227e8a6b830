// Tests of the PTX parser on hand-written snippets (exact trees) and on real compiler output: nvcc 13 PTX built
// from tests/emu/ptx/*.cu at build time (with and without -G) and numba-cuda PTX committed in tests/emu/ptx/numba.
#include "emu/ptx_parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gpupool::emu {
namespace {

using ptx::Function;
using ptx::Instruction;
using ptx::Module;
using ptx::Operand;
using ptx::Space;
using ptx::Type;
using ptx::Variable;
using Kind = ptx::Operand::Kind;

// What a variable holds at load: zeros to its size, with its initialiser's runs of bytes over them (ptx_ast.h).
std::vector<uint8_t> InitialImage(const ptx::Variable& v) {
  std::vector<uint8_t> image(v.ByteSize(), 0);
  for (const auto& run : v.init.runs) {
    if (image.size() < run.offset + run.bytes.size()) image.resize(run.offset + run.bytes.size(), 0);
    std::copy(run.bytes.begin(), run.bytes.end(), image.begin() + static_cast<ptrdiff_t>(run.offset));
  }
  return image;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string NvccPtx(const std::string& name) { return std::string(GPUPOOL_PARSER_PTX_DIR) + "/" + name; }
std::string NumbaPtx(const std::string& name) { return std::string(GPUPOOL_NUMBA_PTX_DIR) + "/" + name; }

#define REQUIRE_NVCC()                                                      \
  do {                                                                      \
    if (!GPUPOOL_HAVE_NVCC) GTEST_SKIP() << "nvcc not found at build time"; \
  } while (0)

Module Parse(std::string_view text) {
  CallResult<Module> r = ParsePtx(text);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return Module{};
  return std::move(r).value();
}

Module ParseFile(const std::string& path) {
  std::string text = ReadFile(path);
  EXPECT_FALSE(text.empty()) << path;
  CallResult<Module> r = ParsePtx(text);
  EXPECT_TRUE(r.ok()) << path << ": " << r.status().message();
  if (!r.ok()) return Module{};
  return std::move(r).value();
}

std::string ParseError(std::string_view text) {
  CallResult<Module> r = ParsePtx(text);
  EXPECT_FALSE(r.ok()) << "parsed unexpectedly:\n" << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), cu::kInvalidPtx);
  return r.status().message();
}

const Function* FindFunction(const Module& m, const std::string& name, bool want_definition = true) {
  for (const Function& f : m.functions) {
    if (f.name == name && (!want_definition || !f.is_extern)) return &f;
  }
  return nullptr;
}

const Function* FindFunctionContaining(const Module& m, const std::string& part) {
  for (const Function& f : m.functions) {
    if (!f.is_extern && f.name.find(part) != std::string::npos) return &f;
  }
  return nullptr;
}

const Variable* FindVariable(const std::vector<Variable>& vars, const std::string& name) {
  for (const Variable& v : vars) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

const ptx::RegisterDecl* FindRegister(const Function& f, const std::string& name) {
  for (const ptx::RegisterDecl& r : f.registers) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string Dotted(const Instruction& ins) {
  std::string s = ins.opcode;
  for (const std::string& m : ins.modifiers) s += "." + m;
  return s;
}

// All instructions spelled `dotted` ("ld.param.u64").
std::vector<const Instruction*> FindAll(const Function& f, const std::string& dotted) {
  std::vector<const Instruction*> out;
  for (const Instruction& ins : f.body) {
    if (Dotted(ins) == dotted) out.push_back(&ins);
  }
  return out;
}

const Instruction* FindFirst(const Function& f, const std::string& dotted) {
  auto all = FindAll(f, dotted);
  return all.empty() ? nullptr : all.front();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

bool IsReg(const Operand& op, const std::string& name) { return op.kind == Kind::kRegister && op.name == name; }

// Checks that hold for every parse of real compiler output: each instruction's line holds its opcode, each
// variable's line its name, each label index is within the body.
void CheckLinesAgainstText(const Module& m, const std::string& text) {
  std::vector<std::string> lines = Lines(text);
  for (const Function& f : m.functions) {
    ASSERT_GE(f.line, 1);
    ASSERT_LE(f.line, static_cast<int>(lines.size()));
    for (const Instruction& ins : f.body) {
      ASSERT_GE(ins.line, 1);
      ASSERT_LE(ins.line, static_cast<int>(lines.size()));
      EXPECT_NE(lines[ins.line - 1].find(Dotted(ins)), std::string::npos)
          << f.name << ": line " << ins.line << " '" << lines[ins.line - 1] << "' lacks " << Dotted(ins);
    }
    for (const auto& [label, index] : f.labels) {
      EXPECT_GE(index, 0);
      EXPECT_LE(index, static_cast<int>(f.body.size())) << label;
    }
    for (const Variable& v : f.locals) {
      std::string base = v.name.substr(0, v.name.find('$', 1));
      EXPECT_NE(lines[v.line - 1].find(base), std::string::npos) << v.name << " line " << v.line;
    }
  }
  for (const Variable& v : m.globals) {
    EXPECT_NE(lines[v.line - 1].find(v.name), std::string::npos) << v.name << " line " << v.line;
  }
}

// Every cut of `text` parses or fails cleanly with "line N: ..." for a line that exists.
void CheckTruncations(const std::string& text, size_t step) {
  int total_lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
  int failures = 0;
  for (size_t cut = 0; cut < text.size(); cut += step) {
    CallResult<Module> r = ParsePtx(std::string_view(text).substr(0, cut));
    if (r.ok()) continue;
    ++failures;
    ASSERT_EQ(r.status().code(), cu::kInvalidPtx) << "cut " << cut;
    const std::string& msg = r.status().message();
    ASSERT_EQ(msg.rfind("line ", 0), 0u) << "cut " << cut << ": " << msg;
    int line = std::atoi(msg.c_str() + 5);
    EXPECT_GE(line, 1) << msg;
    EXPECT_LE(line, total_lines) << msg;
  }
  EXPECT_GT(failures, 0);
}

// --- Hand-written PTX: exact trees -------------------------------------------------------------------------------

TEST(PtxParser, ModuleHeader) {
  Module m = Parse(R"(
// comment
/* block
   comment */
.version 9.0
.target sm_90a, texmode_independent, debug
.address_size 64
)");
  EXPECT_EQ(m.version_major, 9);
  EXPECT_EQ(m.version_minor, 0);
  EXPECT_EQ(m.target, "sm_90a");
  EXPECT_EQ(m.target_options, (std::vector<std::string>{"texmode_independent", "debug"}));
  EXPECT_EQ(m.address_size, 64);
  EXPECT_TRUE(m.functions.empty());

  Module m32 = Parse(".version 7.8\n.target sm_52\n.address_size 32\n");
  EXPECT_EQ(m32.version_minor, 8);
  EXPECT_EQ(m32.address_size, 32);
  EXPECT_TRUE(m32.target_options.empty());
}

TEST(PtxParser, EmptyInputIsAnEmptyModule) {
  Module m = Parse("");
  EXPECT_TRUE(m.functions.empty());
  EXPECT_TRUE(m.globals.empty());
}

constexpr const char* kKernel = R"(.version 9.0
.target sm_75
.address_size 64

.visible .entry k(
	.param .u64 .ptr .global .align 16 k_param_0,
	.param .align 8 .b8 k_param_1[16],
	.param .u32 k_param_2
)
.maxntid 256, 1, 1
.minnctapersm 2
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<5>;
	.reg .f32 a, b, c;
	.reg .v4 .f32 %v<2>;
	.shared .align 4 .b8 tile[128];
	.local .align 8 .b8 depot[16];

	ld.param.u64 	%rd1, [k_param_0];
	mov.u32 	%r1, %tid.x;      // special register with its component
	setp.ne.s32 	%p1|%p2, %r1, 0;
	@%p1 bra 	$L__BB0_2;
	@!%p2 bra.uni $L__BB0_2;
	shfl.sync.down.b32 	%r2|%p1, %r1, 16, 31, -1;
	ld.global.nc.v4.f32 	{%f1, %f2, _, %f4}, [%rd1+-4];
	st.shared.u32 	[tile+8], %r1;
	ld.u32 %r3, [%r1];
	ld.global.u32 %r3, [0x1000];
$L__BB0_2:
$L__BB0_2b:
	mov.u32 	%r4, WARP_SZ;
	mov.u64 	%rd2, tile;
	mov.u64 	%rd2, tile+16;
	mov.b64 	%rd3, {%r1, %r2};
	prmt.b32 	%r5, %r1, %r2, 0x3210;
	selp.b32 	%r6, 1, 0, !%p1;
	cvt.rn.f32.s32 	%f1, %r1;
	mad.lo.cc.u32 	%r7, %r1, %r2, %r3;
	atom.global.add.f32 	%f2, [%rd1], %f1;
	ld.global.L1::no_allocate.L2::256B.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1];
	bar.sync 	0;
	barrier.sync.aligned 1, 64;
	vote.sync.ballot.b32 	%r8, %p1, -1;
	membar.gl;
	fence.acq_rel.gpu;
	exit;
	trap;
	brkpt;
	ret;
}
)";

TEST(PtxParser, KernelSignatureAndDeclarations) {
  Module m = Parse(kKernel);
  ASSERT_EQ(m.functions.size(), 1u);
  const Function& f = m.functions[0];
  EXPECT_EQ(f.name, "k");
  EXPECT_TRUE(f.is_entry);
  EXPECT_TRUE(f.is_visible);
  EXPECT_FALSE(f.is_extern);
  EXPECT_EQ(f.line, 5);

  ASSERT_EQ(f.params.size(), 3u);
  EXPECT_EQ(f.params[0].name, "k_param_0");
  EXPECT_EQ(f.params[0].space, Space::kParam);
  EXPECT_EQ(f.params[0].type, Type::kU64);
  EXPECT_EQ(f.params[0].align, 0);  // .align after .ptr is the pointee's, not the parameter's.
  EXPECT_EQ(f.params[0].ByteSize(), 8u);
  EXPECT_EQ(f.params[0].line, 6);
  EXPECT_EQ(f.params[1].type, Type::kB8);
  EXPECT_EQ(f.params[1].align, 8);
  EXPECT_EQ(f.params[1].array_size, 16);
  EXPECT_EQ(f.params[1].ByteSize(), 16u);
  EXPECT_EQ(f.params[2].type, Type::kU32);
  EXPECT_EQ(f.params[2].ByteSize(), 4u);

  EXPECT_EQ(f.directives.at("maxntid"), (std::vector<int64_t>{256, 1, 1}));
  EXPECT_EQ(f.directives.at("minnctapersm"), (std::vector<int64_t>{2}));

  ASSERT_EQ(f.registers.size(), 7u);
  EXPECT_EQ(f.registers[0].type, Type::kPred);
  EXPECT_EQ(f.registers[0].name, "%p");
  EXPECT_EQ(f.registers[0].count, 3);
  EXPECT_TRUE(f.registers[0].is_range);
  EXPECT_EQ(f.registers[1].name, "%r");
  EXPECT_EQ(f.registers[1].count, 12);
  EXPECT_EQ(f.registers[3].name, "a");
  EXPECT_EQ(f.registers[3].type, Type::kF32);
  EXPECT_FALSE(f.registers[3].is_range);
  EXPECT_EQ(f.registers[3].count, 1);
  EXPECT_EQ(f.registers[5].name, "c");
  EXPECT_EQ(f.registers[6].name, "%v");
  EXPECT_EQ(f.registers[6].vector_width, 4);
  EXPECT_EQ(f.registers[6].count, 2);

  ASSERT_EQ(f.locals.size(), 2u);
  EXPECT_EQ(f.locals[0].name, "tile");
  EXPECT_EQ(f.locals[0].space, Space::kShared);
  EXPECT_EQ(f.locals[0].align, 4);
  EXPECT_EQ(f.locals[0].ByteSize(), 128u);
  EXPECT_EQ(f.locals[0].line, 18);
  EXPECT_EQ(f.locals[1].space, Space::kLocal);
  EXPECT_EQ(f.locals[1].ByteSize(), 16u);
}

TEST(PtxParser, KernelInstructions) {
  Module m = Parse(kKernel);
  ASSERT_EQ(m.functions.size(), 1u);
  const Function& f = m.functions[0];
  ASSERT_EQ(f.body.size(), 29u);

  const Instruction& ld = f.body[0];
  EXPECT_EQ(ld.opcode, "ld");
  EXPECT_EQ(ld.modifiers, (std::vector<std::string>{"param", "u64"}));
  EXPECT_EQ(ld.line, 21);
  ASSERT_EQ(ld.operands.size(), 2u);
  EXPECT_TRUE(IsReg(ld.operands[0], "%rd1"));
  EXPECT_EQ(ld.operands[1].kind, Kind::kAddress);
  EXPECT_EQ(ld.operands[1].name, "k_param_0");
  EXPECT_EQ(ld.operands[1].int_value, 0);
  EXPECT_FALSE(ld.operands[1].has_offset);

  EXPECT_TRUE(IsReg(f.body[1].operands[1], "%tid.x"));

  const Instruction& setp = f.body[2];
  EXPECT_EQ(setp.modifiers, (std::vector<std::string>{"ne", "s32"}));
  ASSERT_EQ(setp.operands.size(), 3u);
  EXPECT_EQ(setp.operands[0].kind, Kind::kPipe);
  ASSERT_EQ(setp.operands[0].elements.size(), 2u);
  EXPECT_TRUE(IsReg(setp.operands[0].elements[0], "%p1"));
  EXPECT_TRUE(IsReg(setp.operands[0].elements[1], "%p2"));
  EXPECT_EQ(setp.operands[2].kind, Kind::kImmInt);

  EXPECT_EQ(f.body[3].guard, "%p1");
  EXPECT_FALSE(f.body[3].guard_negated);
  EXPECT_EQ(f.body[3].opcode, "bra");
  EXPECT_TRUE(IsReg(f.body[3].operands[0], "$L__BB0_2"));
  EXPECT_EQ(f.body[4].guard, "%p2");
  EXPECT_TRUE(f.body[4].guard_negated);
  EXPECT_EQ(f.body[4].modifiers, (std::vector<std::string>{"uni"}));

  const Instruction& shfl = f.body[5];
  EXPECT_EQ(shfl.opcode, "shfl");
  EXPECT_EQ(shfl.modifiers, (std::vector<std::string>{"sync", "down", "b32"}));
  ASSERT_EQ(shfl.operands.size(), 5u);
  EXPECT_EQ(shfl.operands[0].kind, Kind::kPipe);
  EXPECT_EQ(shfl.operands[4].kind, Kind::kImmInt);
  EXPECT_EQ(shfl.operands[4].int_value, -1);

  const Instruction& ldv = f.body[6];
  EXPECT_EQ(ldv.modifiers, (std::vector<std::string>{"global", "nc", "v4", "f32"}));
  ASSERT_EQ(ldv.operands[0].kind, Kind::kVector);
  ASSERT_EQ(ldv.operands[0].elements.size(), 4u);
  EXPECT_EQ(ldv.operands[0].elements[2].kind, Kind::kSink);
  EXPECT_TRUE(IsReg(ldv.operands[0].elements[3], "%f4"));
  EXPECT_EQ(ldv.operands[1].kind, Kind::kAddress);
  EXPECT_EQ(ldv.operands[1].name, "%rd1");
  EXPECT_EQ(ldv.operands[1].int_value, -4);
  EXPECT_TRUE(ldv.operands[1].has_offset);

  EXPECT_EQ(f.body[7].operands[0].name, "tile");
  EXPECT_EQ(f.body[7].operands[0].int_value, 8);
  EXPECT_EQ(f.body[8].operands[1].name, "%r1");
  EXPECT_EQ(f.body[9].operands[1].kind, Kind::kAddress);
  EXPECT_EQ(f.body[9].operands[1].name, "");
  EXPECT_EQ(f.body[9].operands[1].int_value, 0x1000);

  // Both labels point at the next instruction (index 10).
  EXPECT_EQ(f.labels.at("$L__BB0_2"), 10);
  EXPECT_EQ(f.labels.at("$L__BB0_2b"), 10);
  EXPECT_TRUE(IsReg(f.body[10].operands[1], "WARP_SZ"));
  EXPECT_TRUE(IsReg(f.body[11].operands[1], "tile"));
  EXPECT_FALSE(f.body[11].operands[1].has_offset);
  EXPECT_TRUE(IsReg(f.body[12].operands[1], "tile"));
  EXPECT_TRUE(f.body[12].operands[1].has_offset);
  EXPECT_EQ(f.body[12].operands[1].int_value, 16);

  const Instruction& pack = f.body[13];
  ASSERT_EQ(pack.operands[1].kind, Kind::kVector);
  EXPECT_EQ(pack.operands[1].elements.size(), 2u);
  EXPECT_EQ(f.body[14].operands[3].int_value, 0x3210);
  EXPECT_TRUE(f.body[15].operands[3].negated);
  EXPECT_TRUE(IsReg(f.body[15].operands[3], "%p1"));
  EXPECT_EQ(f.body[16].modifiers, (std::vector<std::string>{"rn", "f32", "s32"}));
  EXPECT_EQ(f.body[17].modifiers, (std::vector<std::string>{"lo", "cc", "u32"}));
  EXPECT_EQ(f.body[18].modifiers, (std::vector<std::string>{"global", "add", "f32"}));
  EXPECT_EQ(f.body[19].modifiers, (std::vector<std::string>{"global", "L1::no_allocate", "L2::256B", "v4", "u32"}));
  EXPECT_EQ(Dotted(f.body[20]), "bar.sync");
  EXPECT_EQ(f.body[20].operands[0].int_value, 0);
  EXPECT_EQ(Dotted(f.body[21]), "barrier.sync.aligned");
  EXPECT_EQ(f.body[21].operands.size(), 2u);
  EXPECT_EQ(Dotted(f.body[22]), "vote.sync.ballot.b32");
  EXPECT_EQ(Dotted(f.body[23]), "membar.gl");
  EXPECT_EQ(Dotted(f.body[24]), "fence.acq_rel.gpu");
  for (int i = 25; i < 29; ++i) EXPECT_TRUE(f.body[i].operands.empty());
  EXPECT_EQ(f.body[25].opcode, "exit");
  EXPECT_EQ(f.body[26].opcode, "trap");
  EXPECT_EQ(f.body[27].opcode, "brkpt");
  EXPECT_EQ(f.body[28].opcode, "ret");
  EXPECT_EQ(f.body[28].line, 51);
}

TEST(PtxParser, Immediates) {
  Module m = Parse(R"(.version 9.0
.target sm_75
.address_size 64
.entry imm()
{
	mov.u32 %r1, 42, -42, 0x1F, 0X1fU, 017, 0b101, 7U, 0;
	mov.u64 %rd1, -9223372036854775808, 18446744073709551615, 0xFFFFFFFFFFFFFFFF;
	mov.f32 %f1, 0f3F800000, 0fBF800000, -0f3F800000;
	mov.f64 %fd1, 0d3FF0000000000000, 0D4000000000000000, 1.5, -2.5e-3, 1e3, 0.0;
}
)");
  ASSERT_EQ(m.functions.size(), 1u);
  const auto& b = m.functions[0].body;
  ASSERT_EQ(b.size(), 4u);
  std::vector<int64_t> ints;
  for (size_t i = 1; i < b[0].operands.size(); ++i) {
    EXPECT_EQ(b[0].operands[i].kind, Kind::kImmInt);
    ints.push_back(b[0].operands[i].int_value);
  }
  EXPECT_EQ(ints, (std::vector<int64_t>{42, -42, 31, 31, 15, 5, 7, 0}));
  EXPECT_EQ(b[1].operands[1].int_value, INT64_MIN);
  EXPECT_EQ(b[1].operands[2].int_value, -1);
  EXPECT_EQ(b[1].operands[3].int_value, -1);

  EXPECT_EQ(b[2].operands[1].kind, Kind::kImmFloat);
  EXPECT_EQ(b[2].operands[1].float_bits, 0x3F800000u);
  EXPECT_EQ(b[2].operands[1].double_value, 1.0);
  EXPECT_EQ(b[2].operands[2].float_bits, 0xBF800000u);
  EXPECT_EQ(b[2].operands[2].double_value, -1.0);
  EXPECT_EQ(b[2].operands[3].float_bits, 0xBF800000u);

  EXPECT_EQ(b[3].operands[1].kind, Kind::kImmDouble);
  EXPECT_EQ(b[3].operands[1].double_value, 1.0);
  EXPECT_EQ(b[3].operands[2].double_value, 2.0);
  EXPECT_EQ(b[3].operands[3].double_value, 1.5);
  EXPECT_EQ(b[3].operands[4].double_value, -2.5e-3);
  EXPECT_EQ(b[3].operands[5].double_value, 1000.0);
  EXPECT_EQ(b[3].operands[6].kind, Kind::kImmDouble);
}

TEST(PtxParser, CallsPrototypesAndReturnParameters) {
  Module m = Parse(R"(.version 9.0
.target sm_75
.address_size 64
.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.func (.param .b32 func_retval0) add1(.reg .b32 x) .noreturn;
.weak .func nothing;
.func (.param .b32 func_retval0) add1(.reg .b32 x)
{
	.reg .b32 %r<3>;
	add.s32 %r1, x, 1;
	st.param.b32 [func_retval0+0], %r1;
	ret;
}
.visible .entry caller()
{
	.reg .b32 %r<3>;
	call.uni (retval0), vprintf, (param0, param1);
	call (%r1), add1, (%r2);
	call nothing;
	call.uni nothing, ();
	ret;
}
)");
  ASSERT_EQ(m.functions.size(), 5u);
  const Function& vprintf = m.functions[0];
  EXPECT_EQ(vprintf.name, "vprintf");
  EXPECT_TRUE(vprintf.is_extern);
  EXPECT_FALSE(vprintf.is_entry);
  EXPECT_EQ(vprintf.line, 4);
  ASSERT_EQ(vprintf.returns.size(), 1u);
  EXPECT_EQ(vprintf.returns[0].name, "func_retval0");
  EXPECT_EQ(vprintf.returns[0].type, Type::kB32);
  ASSERT_EQ(vprintf.params.size(), 2u);
  EXPECT_EQ(vprintf.params[1].name, "vprintf_param_1");
  EXPECT_TRUE(vprintf.body.empty());

  EXPECT_TRUE(m.functions[1].is_extern);  // Prototype of a function defined later.
  EXPECT_EQ(m.functions[1].params[0].space, Space::kReg);
  EXPECT_TRUE(m.functions[2].is_weak);
  EXPECT_TRUE(m.functions[2].params.empty());
  const Function* add1 = FindFunction(m, "add1");
  ASSERT_NE(add1, nullptr);
  EXPECT_EQ(add1->line, 12);
  EXPECT_EQ(add1->body.size(), 3u);

  const Function& caller = m.functions[4];
  ASSERT_EQ(caller.body.size(), 5u);
  const Instruction& c0 = caller.body[0];
  EXPECT_EQ(Dotted(c0), "call.uni");
  ASSERT_EQ(c0.operands.size(), 3u);
  EXPECT_EQ(c0.operands[0].kind, Kind::kList);
  ASSERT_EQ(c0.operands[0].elements.size(), 1u);
  EXPECT_TRUE(IsReg(c0.operands[0].elements[0], "retval0"));
  EXPECT_TRUE(IsReg(c0.operands[1], "vprintf"));
  EXPECT_EQ(c0.operands[2].kind, Kind::kList);
  EXPECT_EQ(c0.operands[2].elements.size(), 2u);
  EXPECT_EQ(caller.body[1].operands.size(), 3u);
  ASSERT_EQ(caller.body[2].operands.size(), 1u);
  EXPECT_TRUE(IsReg(caller.body[2].operands[0], "nothing"));
  ASSERT_EQ(caller.body[3].operands.size(), 2u);
  EXPECT_TRUE(caller.body[3].operands[1].elements.empty());
}

TEST(PtxParser, NestedBlocksAreHoistedAndRenamed) {
  Module m = Parse(R"(.version 9.0
.target sm_75
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);
.entry k()
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<4>;
	{ // callseq 0, 0
	.reg .b32 temp_param_reg;
	.param .b64 param0;
	st.param.b64 	[param0+0], %rd1;
	.param .b64 param1;
	st.param.b64 	[param1+0], %rd2;
	.param .b32 retval0;
	call.uni (retval0),
	vprintf,
	(
	param0,
	param1
	);
	ld.param.b32 	%r3, [retval0+0];
	} // callseq 0
	{ .reg .b64 %tmp;
	  cvt.u64.u32 	%tmp, %r1;
	  { .reg .pred %q<2>; .reg .b64 %tmp;
	    setp.eq.u64 %q1, %tmp, 0;
	    @%q1 mov.b64 %tmp, {%r1, %r2};
$L__inner:
	  }
	  cvta.shared.u64 	%rd3, %tmp; }
	{
	.param .b64 param0;
	st.param.b64 	[param0], %rd1;
	}
	st.param.b64 	[param0], %rd1;
	ret;
}
)");
  const Function* k = FindFunction(m, "k");
  ASSERT_NE(k, nullptr);
  // Block 1: the call sequence.
  ASSERT_NE(FindRegister(*k, "temp_param_reg$1"), nullptr);
  ASSERT_NE(FindVariable(k->locals, "param0$1"), nullptr);
  EXPECT_EQ(FindVariable(k->locals, "param0$1")->space, Space::kParam);
  EXPECT_EQ(FindVariable(k->locals, "param0$1")->type, Type::kB64);
  EXPECT_EQ(FindVariable(k->locals, "param0$1")->line, 11);
  ASSERT_NE(FindVariable(k->locals, "retval0$1"), nullptr);
  const Instruction& st0 = k->body[0];
  EXPECT_EQ(st0.operands[0].name, "param0$1");
  EXPECT_TRUE(st0.operands[0].has_offset);
  EXPECT_EQ(st0.operands[1].name, "%rd1");  // Declared outside the block: unchanged.
  EXPECT_EQ(k->body[1].operands[0].name, "param1$1");
  const Instruction& call = k->body[2];
  EXPECT_EQ(call.line, 16);
  EXPECT_EQ(call.operands[0].elements[0].name, "retval0$1");
  EXPECT_EQ(call.operands[1].name, "vprintf");
  EXPECT_EQ(call.operands[2].elements[0].name, "param0$1");
  EXPECT_EQ(call.operands[2].elements[1].name, "param1$1");
  EXPECT_EQ(k->body[3].operands[1].name, "retval0$1");

  // Block 2 with block 3 nested inside: the inner %tmp shadows the outer one; ranges in blocks expand.
  EXPECT_NE(FindRegister(*k, "%tmp$2"), nullptr);
  EXPECT_NE(FindRegister(*k, "%tmp$3"), nullptr);
  EXPECT_NE(FindRegister(*k, "%q0$3"), nullptr);
  EXPECT_NE(FindRegister(*k, "%q1$3"), nullptr);
  EXPECT_EQ(FindRegister(*k, "%q1$3")->type, Type::kPred);
  EXPECT_EQ(k->body[4].operands[0].name, "%tmp$2");
  EXPECT_EQ(k->body[5].operands[0].name, "%q1$3");
  EXPECT_EQ(k->body[5].operands[1].name, "%tmp$3");
  EXPECT_EQ(k->body[6].guard, "%q1$3");
  EXPECT_EQ(k->body[6].operands[0].name, "%tmp$3");
  EXPECT_EQ(k->body[6].operands[1].elements[0].name, "%r1");
  EXPECT_EQ(k->labels.at("$L__inner"), 7);  // Labels in blocks are function-level and keep their names.
  EXPECT_EQ(k->body[7].operands[1].name, "%tmp$2");
  // Block 4 reuses the name param0; after it closes the name is no longer renamed.
  EXPECT_NE(FindVariable(k->locals, "param0$4"), nullptr);
  EXPECT_EQ(k->body[8].operands[0].name, "param0$4");
  EXPECT_EQ(k->body[9].operands[0].name, "param0");
}

TEST(PtxParser, ModuleVariablesAndInitializers) {
  Module m = Parse(R"(.version 9.0
.target sm_75
.address_size 64
.const .align 4 .b8 coeffs[16] = {0, 0, 128, 63, 0, 0, 0, 63, 0, 0, 0, 192, 0, 0, 80, 64};
.global .align 4 .u32 counter = 42;
.global .align 8 .u64 big = -5;
.global .align 8 .f64 pi = 0d400921F9F01B866E;
.global .f32 fl[3] = {1.0, 0f40000000, -3};
.global .align 8 .u64 counter_ptr = generic(counter);
.global .align 8 .u64 table[3] = {generic(counter)+8, 0, fl-4};
.global .u32 grid[2][3] = {{1, 2, 3}, {4}};
.global .u16 partial[4] = {7};
.global .b8 unsized[] = {1, 2, 3};
.global .u32 rows[][2] = {{1, 2}, {3}};
.global .v2 .f32 pair = {1.0, 2.0};
.global .v4 .u8 vecs[2] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
.global .f16 half = 1.5;
.global .bf16 bhalf = 1.0;
.extern .shared .align 16 .b8 dyn[];
.common .global .align 8 .u64 env;
.visible .global .attribute(.managed) .align 4 .u32 managed = 3;
.global .u32 a, b = 5, c[2];
.const .align 1 .b8 str[6] = {104, 105, 0};
)");
  ASSERT_EQ(m.globals.size(), 22u);
  auto bytes_of = [&](const char* name) { return InitialImage(*FindVariable(m.globals, name)); };
  using Bytes = std::vector<uint8_t>;

  const Variable* coeffs = FindVariable(m.globals, "coeffs");
  EXPECT_EQ(coeffs->space, Space::kConst);
  EXPECT_EQ(coeffs->align, 4);
  EXPECT_TRUE(coeffs->has_initializer);
  EXPECT_EQ(coeffs->line, 4);
  float f[4];
  ASSERT_EQ(InitialImage(*coeffs).size(), 16u);
  std::memcpy(f, InitialImage(*coeffs).data(), 16);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 0.5f);
  EXPECT_EQ(f[2], -2.0f);
  EXPECT_EQ(f[3], 3.25f);

  EXPECT_EQ(bytes_of("counter"), (Bytes{42, 0, 0, 0}));
  EXPECT_EQ(bytes_of("big"), (Bytes{0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
  double pi;
  std::memcpy(&pi, bytes_of("pi").data(), 8);
  EXPECT_DOUBLE_EQ(pi, 3.14159);
  float fl[3];
  std::memcpy(fl, bytes_of("fl").data(), 12);
  EXPECT_EQ(fl[0], 1.0f);
  EXPECT_EQ(fl[1], 2.0f);
  EXPECT_EQ(fl[2], -3.0f);

  const Variable* cp = FindVariable(m.globals, "counter_ptr");
  EXPECT_EQ(InitialImage(*cp), Bytes(8, 0));
  ASSERT_EQ(cp->init.symbols.size(), 1u);
  EXPECT_EQ(cp->init.symbols[0].offset, 0u);
  EXPECT_EQ(cp->init.symbols[0].symbol, "counter");
  EXPECT_EQ(cp->init.symbols[0].addend, 0);
  const Variable* table = FindVariable(m.globals, "table");
  EXPECT_EQ(InitialImage(*table).size(), 24u);
  ASSERT_EQ(table->init.symbols.size(), 2u);
  EXPECT_EQ(table->init.symbols[0].addend, 8);
  EXPECT_EQ(table->init.symbols[1].offset, 16u);
  EXPECT_EQ(table->init.symbols[1].symbol, "fl");
  EXPECT_EQ(table->init.symbols[1].addend, -4);

  const Variable* grid = FindVariable(m.globals, "grid");
  EXPECT_EQ(grid->array_size, 6);
  EXPECT_EQ(InitialImage(*grid), (Bytes{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(bytes_of("partial"), (Bytes{7, 0, 0, 0, 0, 0, 0, 0}));
  const Variable* unsized = FindVariable(m.globals, "unsized");
  EXPECT_EQ(unsized->array_size, 3);
  EXPECT_EQ(InitialImage(*unsized), (Bytes{1, 2, 3}));
  const Variable* rows = FindVariable(m.globals, "rows");
  EXPECT_EQ(rows->array_size, 4);
  EXPECT_EQ(InitialImage(*rows), (Bytes{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0}));
  const Variable* pair = FindVariable(m.globals, "pair");
  EXPECT_EQ(pair->vector_width, 2);
  EXPECT_EQ(pair->ByteSize(), 8u);
  float p[2];
  std::memcpy(p, InitialImage(*pair).data(), 8);
  EXPECT_EQ(p[1], 2.0f);
  EXPECT_EQ(bytes_of("vecs"), (Bytes{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(bytes_of("half"), (Bytes{0x00, 0x3e}));
  EXPECT_EQ(bytes_of("bhalf"), (Bytes{0x80, 0x3f}));

  const Variable* dyn = FindVariable(m.globals, "dyn");
  EXPECT_TRUE(dyn->is_extern);
  EXPECT_EQ(dyn->space, Space::kShared);
  EXPECT_EQ(dyn->array_size, -1);
  EXPECT_EQ(dyn->align, 16);
  EXPECT_EQ(dyn->ByteSize(), 0u);
  EXPECT_FALSE(dyn->has_initializer);
  EXPECT_TRUE(FindVariable(m.globals, "env")->is_common);
  EXPECT_TRUE(FindVariable(m.globals, "managed")->is_visible);
  EXPECT_EQ(bytes_of("managed"), (Bytes{3, 0, 0, 0}));
  EXPECT_FALSE(FindVariable(m.globals, "a")->has_initializer);
  EXPECT_EQ(bytes_of("b"), (Bytes{5, 0, 0, 0}));
  EXPECT_EQ(FindVariable(m.globals, "c")->ByteSize(), 8u);
  EXPECT_EQ(FindVariable(m.globals, "c")->line, 22);
  EXPECT_EQ(bytes_of("str"), (Bytes{104, 105, 0, 0, 0, 0}));
}

// Issue "Tenant isolation, hardened", item 5: a 250-byte module declaring a million registers took a worker to
// 777 MB. What a few bytes of text declare is bounded, each refused naming the limit: registers per function (in
// one range, in many, and in ranges of nested blocks, which are expanded by name), block nesting, functions; and
// an initialiser costs what its text does, not what its array does.
TEST(PtxParser, FewBytesCannotDeclareUnboundedMemory) {
  EXPECT_NE(ParseError(".entry k() { .reg .b32 %r<1000000>; ret; }").find("'k' declares more than 65536 registers"),
            std::string::npos);
  std::string many = ".entry k() {";
  for (int i = 0; i < 5; ++i) many += " .reg .b32 %r" + std::to_string(i) + "_<16000>;";
  EXPECT_NE(ParseError(many + " ret; }").find("more than 65536 registers"), std::string::npos);
  std::string blocks = ".entry k() {";
  for (int i = 0; i < 3; ++i) blocks += " { .reg .b32 %r<30000>; }";
  EXPECT_NE(ParseError(blocks + " ret; }").find("more than 65536 registers"), std::string::npos);
  EXPECT_TRUE(ParsePtx(".entry k() { .reg .b32 %r<65536>; ret; }").ok()) << "the limit itself is allowed";

  std::string deep = ".entry k() ";
  deep += std::string(300, '{') + std::string(300, '}') + "}";
  EXPECT_NE(ParseError(deep).find("blocks nested more than 256 deep in 'k'"), std::string::npos);

  std::string functions;
  for (int i = 0; i <= 65536; ++i) functions += ".func f" + std::to_string(i) + ";";
  EXPECT_NE(ParseError(functions).find("more than 65536 functions"), std::string::npos);

  Module m = Parse(".global .b8 big[1073741824] = {1};\n.global .u32 tail[4] = {0, 0, 9};\n"
                   ".global .b8 gaps[4][268435456] = {{1}, {2}, {3, 4}, {5}};");
  const Variable* big = FindVariable(m.globals, "big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->ByteSize(), 1073741824u);
  ASSERT_EQ(big->init.runs.size(), 1u);
  EXPECT_EQ(big->init.runs[0].bytes, std::vector<uint8_t>{1}) << "the zeros after the initialiser are not held";
  // Braces that skip elements start new runs: four runs of 1, 1, 2 and 1 bytes, not 768 MiB of zeros between them.
  const Variable* gaps = FindVariable(m.globals, "gaps");
  ASSERT_NE(gaps, nullptr);
  ASSERT_EQ(gaps->init.runs.size(), 4u);
  EXPECT_EQ(gaps->init.runs[2].offset, 2u * 268435456u);
  EXPECT_EQ(gaps->init.runs[2].bytes, (std::vector<uint8_t>{3, 4}));
  uint64_t held = 0;
  for (const auto& run : gaps->init.runs) held += run.bytes.size();
  EXPECT_EQ(held, 5u);
  EXPECT_EQ(InitialImage(*FindVariable(m.globals, "tail")), (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0,
                                                                                   0, 0, 0, 0}));
}

TEST(PtxParser, SkipsDebugInfoAndPragmas) {
  Module m = Parse(R"(.version 9.0
.target sm_75, debug
.address_size 64
@@DWARF .section .debug_abbrev, "", @progbits
.entry k()
.pragma "nounroll";
{
	.reg .b32 %r<2>;
	.loc	1 2 0
$L__func_begin0:
	.loc	1 4 3, function_name $L__info_string0, inlined_at 1 2 5
	mov.u32 %r1, 1;
	.pragma "nounroll";
$L__tmp0:
	ts: .branchtargets $L__tmp0, $L__func_begin0;
	proto: .callprototype (.param .b32 _) _ (.param .b64 _);
	ret;
$L__func_end0:
}
	.file	1 "/work/a.cu"
	.file	2 "/usr/local/cuda/include/b.h", 1700000000, 1234
	.section	.debug_info
	{
.b32 238
.b8 2, 0
.b32 .debug_abbrev
.b64 $L__func_begin0
	{ .b8 1 }
.b8 47,119,111
	}
	.section	.debug_macinfo
	{
.b8 0

	}
)");
  ASSERT_EQ(m.functions.size(), 1u);
  const Function& k = m.functions[0];
  ASSERT_EQ(k.body.size(), 2u);
  EXPECT_EQ(k.body[0].line, 12);
  EXPECT_EQ(k.labels.at("$L__func_begin0"), 0);
  EXPECT_EQ(k.labels.at("$L__tmp0"), 1);
  EXPECT_EQ(k.labels.at("$L__func_end0"), 2);
  EXPECT_EQ(k.labels.count("ts"), 0u);  // .branchtargets / .callprototype statements are skipped.
  EXPECT_EQ(k.labels.count("proto"), 0u);
  EXPECT_EQ(m.target_options, (std::vector<std::string>{"debug"}));
}

TEST(PtxParser, TextureInstructionsParseGenerically) {
  Module m = Parse(R"(.version 9.0
.target sm_75
.address_size 64
.global .texref tex;
.entry k(.param .u64 t)
{
	tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [tex, {%f5, %f6}];
	suld.b.2d.b32.trap {%r1}, [%rd1, {%r2, %r3}];
}
)");
  ASSERT_EQ(m.globals.size(), 1u);
  EXPECT_EQ(m.globals[0].space, Space::kTex);
  const Instruction& tex = m.functions[0].body[0];
  EXPECT_EQ(tex.opcode, "tex");
  EXPECT_EQ(tex.modifiers, (std::vector<std::string>{"2d", "v4", "f32", "f32"}));
  ASSERT_EQ(tex.operands[1].kind, Kind::kAddress);
  EXPECT_EQ(tex.operands[1].name, "tex");
  ASSERT_EQ(tex.operands[1].elements.size(), 1u);
  EXPECT_EQ(tex.operands[1].elements[0].kind, Kind::kVector);
}

// --- Errors ------------------------------------------------------------------------------------------------------

TEST(PtxParserErrors, Garbage) {
  EXPECT_EQ(ParseError("hello world"), "line 1: unexpected 'hello' at module scope");
  EXPECT_EQ(ParseError("\n\n  #include <x>"), "line 3: unexpected character '#'");
  EXPECT_EQ(ParseError(".version 9.0\n.bogus 1;"), "line 2: unknown directive '.bogus' at module scope");
  std::string binary = "\x7f" + std::string("ELF") + std::string(4, '\0');
  EXPECT_EQ(ParseError(binary).rfind("line 1: ", 0), 0u);
  EXPECT_EQ(ParseError(".version x").rfind("line 1: expected a version", 0), 0u);
}

TEST(PtxParserErrors, UnknownDirectiveInFunctionBody) {
  std::string msg = ParseError(".version 9.0\n.entry k()\n{\n\tret;\n\t.frobnicate 3;\n}\n");
  EXPECT_EQ(msg, "line 5: unknown directive '.frobnicate' in the body of 'k'");
}

TEST(PtxParserErrors, Malformed) {
  const std::string head = ".version 9.0\n.target sm_75\n.address_size 64\n.entry k()\n{\n";
  EXPECT_EQ(ParseError(head + "\tmov.u32 %r1, 0f3F80;\n}\n"),
            "line 6: malformed float literal '0f3F80' (0f needs 8 hex digits)");
  EXPECT_EQ(ParseError(head + "\tmov.u32 %r1, 99999999999999999999;\n}\n"),
            "line 6: integer literal '99999999999999999999' too large");
  EXPECT_EQ(ParseError(head + "\tmov.u32 %r1, 12abc;\n}\n"), "line 6: malformed number '12abc'");
  EXPECT_EQ(ParseError(head + "\tmov.u32 %r1 %r2;\n}\n"),
            "line 6: expected ',' or ';' after operand of 'mov.u32', found '%r2'");
  EXPECT_EQ(ParseError(head + "L1:\nL1:\n\tret;\n}\n"), "line 7: label 'L1' defined twice");
  EXPECT_EQ(ParseError(head + "\tld.u32 %r1, [%rd1+;\n}\n"), "line 6: expected an offset, found ';'");
  EXPECT_EQ(ParseError(head + "\t/* never closed\n\tret;\n}\n"), "line 6: unterminated /* comment");
  EXPECT_EQ(ParseError(head + "\t%r1 = 3;\n}\n"), "line 6: '%r1' is not an instruction");
  EXPECT_EQ(ParseError(".global .u32 x[2] = {1, 2, 3};"), "line 1: too many initializers for 'x'");
  EXPECT_EQ(ParseError(".global .u32 x = {1};"), "line 1: brace initializer for scalar 'x'");
  EXPECT_EQ(ParseError(".const .b8 z[2][0][4] = {{1}};"), "line 1: initializer for 'z', an array with no elements");
  EXPECT_EQ(ParseError(".global x;"), "line 1: variable declaration without a type");
  EXPECT_EQ(ParseError(".entry k(\n.param .u32 a\n"),
            "line 3: expected ')' or ',' in parameter list, found end of file");
}

TEST(PtxParserErrors, TruncatedHandWritten) {
  std::string text(kKernel);
  for (size_t cut = 0; cut < text.size(); ++cut) {
    CallResult<Module> r = ParsePtx(std::string_view(text).substr(0, cut));
    if (r.ok()) continue;
    ASSERT_EQ(r.status().message().rfind("line ", 0), 0u) << cut << ": " << r.status().message();
  }
  // Cut inside the body: the error names the line where the input ended.
  std::string cut = text.substr(0, text.find("membar.gl"));
  EXPECT_EQ(ParseError(cut), "line 46: unexpected end of file in the body of 'k' (opened on line 12)");
  cut = text.substr(0, text.find("membar.gl") + 9);
  EXPECT_EQ(ParseError(cut), "line 46: expected an operand, found end of file");
  cut = text.substr(0, text.find("[%rd1+-4]") + 6);
  EXPECT_EQ(ParseError(cut), "line 27: expected an offset, found end of file");
  cut = text.substr(0, text.find("ret;") + 4);
  EXPECT_EQ(ParseError(cut), "line 51: unexpected end of file in the body of 'k' (opened on line 12)");
}

TEST(PtxParserErrors, RandomCorruptionNeverCrashes) {
  std::string original(kKernel);
  uint32_t state = 12345;
  auto next = [&]() {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  const char alphabet[] = "{}[]();,.:@!|+-_%$0123456789xfd \n/*\"<>=abc";
  int failures = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text = original;
    int edits = 1 + next() % 4;
    for (int e = 0; e < edits; ++e) {
      size_t at = next() % text.size();
      switch (next() % 3) {
        case 0: text[at] = alphabet[next() % (sizeof(alphabet) - 1)]; break;
        case 1: text.erase(at, 1 + next() % 8); break;
        default: text.insert(at, 1, alphabet[next() % (sizeof(alphabet) - 1)]); break;
      }
      if (text.empty()) text = "x";
    }
    CallResult<Module> r = ParsePtx(text);
    if (r.ok()) continue;
    ++failures;
    ASSERT_EQ(r.status().message().rfind("line ", 0), 0u) << r.status().message();
  }
  EXPECT_GT(failures, 1000);
}

TEST(PtxParser, ToleratesByteOrderMarkAndNulPadding) {
  std::string text = "\xEF\xBB\xBF.version 9.0\n.target sm_75\n.entry k()\n{\n\tret;\n}\n";
  text.append(5, '\0');
  Module m = Parse(text);
  ASSERT_EQ(m.functions.size(), 1u);
  EXPECT_EQ(m.functions[0].body[0].line, 5);
}

// --- Real nvcc output --------------------------------------------------------------------------------------------

struct NvccCase {
  const char* name;
  bool debug;
};

class NvccPtxTest : public testing::TestWithParam<NvccCase> {};

std::string CaseFile(const NvccCase& c) { return std::string(c.name) + (c.debug ? ".g.ptx" : ".ptx"); }

TEST_P(NvccPtxTest, ParsesWithConsistentLines) {
  REQUIRE_NVCC();
  std::string text = ReadFile(NvccPtx(CaseFile(GetParam())));
  Module m = Parse(text);
  EXPECT_EQ(m.version_major, 9);
  EXPECT_EQ(m.address_size, 64);
  EXPECT_EQ(m.target.rfind("sm_", 0), 0u);
  EXPECT_EQ(std::count(m.target_options.begin(), m.target_options.end(), "debug"), GetParam().debug ? 1 : 0);
  EXPECT_FALSE(m.functions.empty());
  CheckLinesAgainstText(m, text);
  for (const Function& f : m.functions) {
    if (f.is_extern) continue;
    ASSERT_FALSE(f.body.empty()) << f.name;
    EXPECT_TRUE(f.body.back().opcode == "ret" || f.body.back().opcode == "bra") << f.name;
  }
}

TEST_P(NvccPtxTest, SurvivesTruncation) {
  REQUIRE_NVCC();
  std::string text = ReadFile(NvccPtx(CaseFile(GetParam())));
  CheckTruncations(text, std::max<size_t>(1, text.size() / 600));
}

INSTANTIATE_TEST_SUITE_P(Files, NvccPtxTest,
                         testing::Values(NvccCase{"vector_add", false}, NvccCase{"vector_add", true},
                                         NvccCase{"reduce", false}, NvccCase{"reduce", true}, NvccCase{"printf", false},
                                         NvccCase{"printf", true}, NvccCase{"atomics", false},
                                         NvccCase{"atomics", true}, NvccCase{"struct_param", false},
                                         NvccCase{"struct_param", true}, NvccCase{"recursive", false},
                                         NvccCase{"recursive", true}, NvccCase{"dyn_shared", false},
                                         NvccCase{"dyn_shared", true}, NvccCase{"globals", false},
                                         NvccCase{"globals", true}),
                         [](const testing::TestParamInfo<NvccCase>& info) {
                           return std::string(info.param.name) + (info.param.debug ? "_G" : "");
                         });

TEST(NvccPtx, VectorAdd) {
  REQUIRE_NVCC();
  for (const char* file : {"vector_add.ptx", "vector_add.g.ptx"}) {
    SCOPED_TRACE(file);
    Module m = ParseFile(NvccPtx(file));
    const Function* f = FindFunction(m, "vector_add");
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(f->is_entry);
    EXPECT_TRUE(f->is_visible);
    ASSERT_EQ(f->params.size(), 4u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(f->params[i].name, "vector_add_param_" + std::to_string(i));
      EXPECT_EQ(f->params[i].type, Type::kU64);
    }
    EXPECT_EQ(f->params[3].type, Type::kU32);
    const Instruction* ld = FindFirst(*f, "ld.param.u64");
    ASSERT_NE(ld, nullptr);
    EXPECT_EQ(ld->operands[1].kind, Kind::kAddress);
    EXPECT_EQ(ld->operands[1].name, "vector_add_param_0");
    bool tid = false;
    for (const Instruction* mov : FindAll(*f, "mov.u32")) tid |= IsReg(mov->operands[1], "%tid.x");
    EXPECT_TRUE(tid);
    const ptx::RegisterDecl* rd = FindRegister(*f, "%rd");
    ASSERT_NE(rd, nullptr);
    EXPECT_EQ(rd->type, Type::kB64);
    EXPECT_TRUE(rd->is_range);
    EXPECT_GE(rd->count, 4);
    ASSERT_EQ(f->labels.count("$L__BB0_2"), 1u);
    const Instruction* guarded = nullptr;
    for (const Instruction& ins : f->body) {
      if (!ins.guard.empty()) guarded = &ins;
    }
    ASSERT_NE(guarded, nullptr);
    EXPECT_EQ(guarded->opcode, "bra");
    EXPECT_TRUE(IsReg(guarded->operands[0], "$L__BB0_2"));
  }
  EXPECT_NE(FindFirst(*FindFunction(ParseFile(NvccPtx("vector_add.ptx")), "vector_add"), "st.global.f32"), nullptr);
  EXPECT_NE(FindFirst(*FindFunction(ParseFile(NvccPtx("vector_add.g.ptx")), "vector_add"), "st.f32"), nullptr);
}

TEST(NvccPtx, ReductionWithShuffles) {
  REQUIRE_NVCC();
  Module m = ParseFile(NvccPtx("reduce.ptx"));
  const Function* f = FindFunction(m, "reduce_sum");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->directives.at("maxntid"), (std::vector<int64_t>{256, 1, 1}));
  // The __shared__ array is demoted into the kernel.
  const Variable* partial = FindVariable(f->locals, "_ZZ10reduce_sumE7partial");
  ASSERT_NE(partial, nullptr);
  EXPECT_EQ(partial->space, Space::kShared);
  EXPECT_EQ(partial->ByteSize(), 128u);
  const Instruction* shfl = FindFirst(*f, "shfl.sync.down.b32");
  ASSERT_NE(shfl, nullptr);
  ASSERT_EQ(shfl->operands.size(), 5u);
  EXPECT_EQ(shfl->operands[0].kind, Kind::kPipe);
  EXPECT_EQ(shfl->operands[0].elements[1].name.rfind("%p", 0), 0u);
  EXPECT_NE(FindFirst(*f, "shfl.sync.bfly.b32"), nullptr);
  EXPECT_NE(FindFirst(*f, "vote.sync.ballot.b32"), nullptr);
  EXPECT_NE(FindFirst(*f, "ld.global.nc.f32"), nullptr);
  EXPECT_NE(FindFirst(*f, "atom.global.add.f32"), nullptr);
  bool warp_sz = false;
  for (const Instruction* mov : FindAll(*f, "mov.u32")) warp_sz |= IsReg(mov->operands[1], "WARP_SZ");
  EXPECT_TRUE(warp_sz);
  const Instruction* bar = FindFirst(*f, "bar.sync");
  ASSERT_NE(bar, nullptr);
  EXPECT_EQ(bar->operands[0].kind, Kind::kImmInt);

  // -G: intrinsics become .func calls, with "{ .reg .b64 %tmp; ... }" blocks around cvta.
  Module g = ParseFile(NvccPtx("reduce.g.ptx"));
  const Function* fg = FindFunction(g, "reduce_sum");
  ASSERT_NE(fg, nullptr);
  int renamed_tmp = 0;
  for (const Instruction* c : FindAll(*fg, "cvta.shared.u64")) {
    EXPECT_EQ(c->operands[1].name.rfind("%tmp$", 0), 0u);
    ++renamed_tmp;
  }
  EXPECT_GE(renamed_tmp, 1);
  EXPECT_NE(FindFunction(g, "__fAtomicAdd", /*want_definition=*/false), nullptr);
  EXPECT_TRUE(FindFunction(g, "__fAtomicAdd", false)->is_extern);
  EXPECT_NE(FindFunctionContaining(g, "shfl_down_sync"), nullptr);
}

TEST(NvccPtx, PrintfCallSequence) {
  REQUIRE_NVCC();
  Module m = ParseFile(NvccPtx("printf.ptx"));
  const Function* vprintf = FindFunction(m, "vprintf", /*want_definition=*/false);
  ASSERT_NE(vprintf, nullptr);
  EXPECT_TRUE(vprintf->is_extern);
  ASSERT_EQ(vprintf->returns.size(), 1u);
  EXPECT_EQ(vprintf->params.size(), 2u);
  const Variable* str = FindVariable(m.globals, "$str");
  ASSERT_NE(str, nullptr);
  EXPECT_EQ(str->space, Space::kGlobal);
  std::string expected = "hello from %d: x=%d y=%f\n";
  expected.push_back('\0');
  const std::vector<uint8_t> text = InitialImage(*str);
  EXPECT_EQ(std::string(text.begin(), text.end()), expected);

  const Function* f = FindFunction(m, "hello");
  ASSERT_NE(f, nullptr);
  ASSERT_NE(FindVariable(f->locals, "__local_depot0"), nullptr);
  EXPECT_EQ(FindVariable(f->locals, "__local_depot0")->space, Space::kLocal);
  EXPECT_NE(FindVariable(f->locals, "param0$1"), nullptr);
  EXPECT_NE(FindVariable(f->locals, "param1$1"), nullptr);
  EXPECT_NE(FindVariable(f->locals, "retval0$1"), nullptr);
  EXPECT_NE(FindRegister(*f, "temp_param_reg$1"), nullptr);
  const Instruction* call = FindFirst(*f, "call.uni");
  ASSERT_NE(call, nullptr);
  ASSERT_EQ(call->operands.size(), 3u);
  EXPECT_EQ(call->operands[0].elements[0].name, "retval0$1");
  EXPECT_EQ(call->operands[1].name, "vprintf");
  ASSERT_EQ(call->operands[2].elements.size(), 2u);
  EXPECT_EQ(call->operands[2].elements[0].name, "param0$1");
  EXPECT_EQ(call->operands[2].elements[1].name, "param1$1");
  const Instruction* st = FindFirst(*f, "st.param.b64");
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->operands[0].name, "param0$1");
  EXPECT_TRUE(st->operands[0].has_offset);
  const Instruction* stv = FindFirst(*f, "st.local.v2.u32");
  ASSERT_NE(stv, nullptr);
  EXPECT_EQ(stv->operands[1].kind, Kind::kVector);
  EXPECT_EQ(stv->operands[1].elements.size(), 2u);
}

TEST(NvccPtx, Atomics) {
  REQUIRE_NVCC();
  Module m = ParseFile(NvccPtx("atomics.ptx"));
  const Function* f = FindFunction(m, "atomics");
  ASSERT_NE(f, nullptr);
  for (const char* form : {"atom.global.add.u32", "atom.global.max.s32", "atom.global.min.s32", "atom.global.exch.b32",
                           "atom.global.cas.b32", "atom.global.and.b32", "atom.global.or.b32", "atom.global.xor.b32",
                           "atom.global.inc.u32", "atom.global.add.f32", "atom.global.add.u64"}) {
    EXPECT_NE(FindFirst(*f, form), nullptr) << form;
  }
  const Instruction* cas = FindFirst(*f, "atom.global.cas.b32");
  ASSERT_EQ(cas->operands.size(), 4u);
  EXPECT_EQ(cas->operands[1].kind, Kind::kAddress);
  const Instruction* inc = FindFirst(*f, "atom.global.inc.u32");
  EXPECT_EQ(inc->operands[2].int_value, 100);
}

TEST(NvccPtx, StructByValueParameter) {
  REQUIRE_NVCC();
  for (const char* file : {"struct_param.ptx", "struct_param.g.ptx"}) {
    SCOPED_TRACE(file);
    Module m = ParseFile(NvccPtx(file));
    const Function* f = FindFunction(m, "apply");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(f->params.size(), 1u);
    EXPECT_EQ(f->params[0].name, "apply_param_0");
    EXPECT_EQ(f->params[0].type, Type::kB8);
    EXPECT_EQ(f->params[0].align, 8);
    EXPECT_EQ(f->params[0].array_size, 24);
    EXPECT_EQ(f->params[0].ByteSize(), 24u);
    bool offset16 = false;
    for (const Instruction* ld : FindAll(*f, "ld.param.u64")) {
      offset16 |= ld->operands[1].name == "apply_param_0" && ld->operands[1].int_value == 16;
    }
    EXPECT_TRUE(offset16);
  }
}

TEST(NvccPtx, RecursiveDeviceFunction) {
  REQUIRE_NVCC();
  for (const char* file : {"recursive.ptx", "recursive.g.ptx"}) {
    SCOPED_TRACE(file);
    Module m = ParseFile(NvccPtx(file));
    const Function* fib = FindFunction(m, "fib");
    ASSERT_NE(fib, nullptr);
    EXPECT_FALSE(fib->is_entry);
    ASSERT_EQ(fib->returns.size(), 1u);
    EXPECT_EQ(fib->returns[0].name, "func_retval0");
    EXPECT_EQ(fib->returns[0].type, Type::kB32);
    ASSERT_EQ(fib->params.size(), 1u);
    EXPECT_EQ(fib->params[0].name, "fib_param_0");
    std::vector<const Instruction*> calls = FindAll(*fib, "call.uni");
    ASSERT_EQ(calls.size(), 2u);
    // Two call sequences: blocks 1 and 2 of fib, each with its own param0/retval0.
    EXPECT_EQ(calls[0]->operands[1].name, "fib");
    EXPECT_EQ(calls[0]->operands[2].elements[0].name, "param0$1");
    EXPECT_EQ(calls[1]->operands[2].elements[0].name, "param0$2");
    EXPECT_EQ(calls[1]->operands[0].elements[0].name, "retval0$2");
    const Instruction* st = FindFirst(*fib, "st.param.b32");
    ASSERT_NE(st, nullptr);
    bool ret_store = false;
    for (const Instruction* s : FindAll(*fib, "st.param.b32")) ret_store |= s->operands[0].name == "func_retval0";
    EXPECT_TRUE(ret_store);
    // Block numbering restarts in each function.
    const Function* kernel = FindFunction(m, "fib_kernel");
    ASSERT_NE(kernel, nullptr);
    EXPECT_NE(FindVariable(kernel->locals, "param0$1"), nullptr);
    EXPECT_EQ(FindVariable(kernel->locals, "param0$2"), nullptr);
  }
}

TEST(NvccPtx, DynamicSharedMemory) {
  REQUIRE_NVCC();
  Module m = ParseFile(NvccPtx("dyn_shared.ptx"));
  const Variable* s = FindVariable(m.globals, "s");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->is_extern);
  EXPECT_EQ(s->space, Space::kShared);
  EXPECT_EQ(s->array_size, -1);
  EXPECT_EQ(s->ByteSize(), 0u);
  EXPECT_GT(s->align, 0);
  const Function* f = FindFunction(m, "reverse");
  ASSERT_NE(f, nullptr);
  bool symbol = false;
  for (const Instruction* mov : FindAll(*f, "mov.u32")) symbol |= IsReg(mov->operands[1], "s");
  EXPECT_TRUE(symbol);
  EXPECT_NE(FindFirst(*f, "st.shared.u32"), nullptr);
}

TEST(NvccPtx, GlobalsWithInitializers) {
  REQUIRE_NVCC();
  for (const char* file : {"globals.ptx", "globals.g.ptx"}) {
    SCOPED_TRACE(file);
    Module m = ParseFile(NvccPtx(file));
    const Variable* coeffs = FindVariable(m.globals, "coeffs");
    ASSERT_NE(coeffs, nullptr);
    EXPECT_EQ(coeffs->space, Space::kConst);
    ASSERT_EQ(coeffs->ByteSize(), 16u);
    ASSERT_EQ(InitialImage(*coeffs).size(), 16u);
    float f[4];
    std::memcpy(f, InitialImage(*coeffs).data(), 16);
    EXPECT_EQ(f[0], 1.0f);
    EXPECT_EQ(f[1], 0.5f);
    EXPECT_EQ(f[2], -2.0f);
    EXPECT_EQ(f[3], 3.25f);

    const Variable* table = FindVariable(m.globals, "table");
    ASSERT_NE(table, nullptr);
    ASSERT_EQ(InitialImage(*table).size(), 24u);
    int32_t t[6];
    std::memcpy(t, InitialImage(*table).data(), 24);
    EXPECT_EQ(std::vector<int32_t>(t, t + 6), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));

    const Variable* counter = FindVariable(m.globals, "counter");
    ASSERT_NE(counter, nullptr);
    EXPECT_EQ(counter->space, Space::kGlobal);
    EXPECT_EQ(InitialImage(*counter), (std::vector<uint8_t>{42, 0, 0, 0}));
    int64_t big;
    std::memcpy(&big, InitialImage(*FindVariable(m.globals, "big_value")).data(), 8);
    EXPECT_EQ(big, -5);
    double pi;
    std::memcpy(&pi, InitialImage(*FindVariable(m.globals, "pi")).data(), 8);
    EXPECT_DOUBLE_EQ(pi, 3.14159);

    const Variable* cp = FindVariable(m.globals, "counter_ptr");
    ASSERT_NE(cp, nullptr);
    ASSERT_EQ(cp->init.symbols.size(), 1u);
    EXPECT_EQ(cp->init.symbols[0].symbol, "counter");
    EXPECT_EQ(cp->init.symbols[0].offset, 0u);
    EXPECT_EQ(cp->init.symbols[0].addend, 0);
    EXPECT_EQ(InitialImage(*cp), std::vector<uint8_t>(8, 0));
    const Variable* tp = FindVariable(m.globals, "target_ptr");
    ASSERT_NE(tp, nullptr);
    ASSERT_EQ(tp->init.symbols.size(), 1u);
    EXPECT_EQ(tp->init.symbols[0].symbol, "target");
    EXPECT_EQ(tp->init.symbols[0].addend, 8);
    const Variable* target = FindVariable(m.globals, "target");
    ASSERT_NE(target, nullptr);
    EXPECT_FALSE(target->has_initializer);
    EXPECT_EQ(target->ByteSize(), 32u);
  }
}

// --- Real numba-cuda output (committed; see tests/emu/ptx/numba/gen.py) -------------------------------------------

TEST(NumbaPtx, ElementwiseWithExceptionCheck) {
  std::string text = ReadFile(NumbaPtx("scale.ptx"));
  Module m = Parse(text);
  CheckLinesAgainstText(m, text);
  EXPECT_EQ(m.target_options, (std::vector<std::string>{"debug"}));
  const Function* kernel = nullptr;
  int funcs = 0;
  for (const Function& f : m.functions) {
    if (f.is_entry) kernel = &f;
    if (!f.is_entry && !f.is_extern) ++funcs;
  }
  ASSERT_NE(kernel, nullptr);
  EXPECT_NE(kernel->name.find("scale"), std::string::npos);
  EXPECT_GE(kernel->params.size(), 10u);  // numba passes each array as (meminfo, parent, size, itemsize, data...).
  EXPECT_GE(funcs, 1);                    // The exception-raising helper.
  // The exception flag and the thread/block indices recorded with it are visible globals; the environment is .common.
  int visible_u32 = 0, common = 0;
  for (const Variable& v : m.globals) {
    visible_u32 += v.is_visible && v.type == Type::kU32;
    common += v.is_common;
  }
  EXPECT_GE(visible_u32, 7);
  EXPECT_EQ(common, 1);
  // Call sequences in nested blocks were renamed.
  int renamed = 0;
  for (const Variable& v : kernel->locals) renamed += v.name.rfind("param0$", 0) == 0;
  EXPECT_GE(renamed, 2);
  EXPECT_NE(FindVariable(kernel->locals, "__local_depot0"), nullptr);
  CheckTruncations(text, text.size() / 400);
}

TEST(NumbaPtx, SharedArrayAndSyncthreads) {
  std::string text = ReadFile(NumbaPtx("block_sum.ptx"));
  Module m = Parse(text);
  CheckLinesAgainstText(m, text);
  const Variable* smem = FindVariable(m.globals, "_cudapy_smem_1");
  ASSERT_NE(smem, nullptr);
  EXPECT_EQ(smem->space, Space::kShared);
  EXPECT_EQ(smem->ByteSize(), 512u);
  EXPECT_TRUE(smem->is_visible);
  const Function* f = FindFunctionContaining(m, "block_sum");
  ASSERT_NE(f, nullptr);
  EXPECT_GE(FindAll(*f, "bar.sync").size(), 2u);
  EXPECT_NE(FindFirst(*f, "ld.shared.f32"), nullptr);
  // "and.b64 %rd, %rd, -9223372036854775808": the most negative literal.
  bool min_literal = false;
  for (const Instruction* a : FindAll(*f, "and.b64")) {
    min_literal |= a->operands[2].kind == Kind::kImmInt && a->operands[2].int_value == INT64_MIN;
  }
  EXPECT_TRUE(min_literal);
  CheckTruncations(text, text.size() / 300);
}

TEST(NumbaPtx, Atomics) {
  std::string text = ReadFile(NumbaPtx("histogram.ptx"));
  Module m = Parse(text);
  CheckLinesAgainstText(m, text);
  const Function* f = FindFunctionContaining(m, "histogram");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(FindFirst(*f, "atom.global.add.f32"), nullptr);
  EXPECT_NE(FindFirst(*f, "atom.global.cas.b32"), nullptr);
  EXPECT_NE(FindFirst(*f, "atom.global.max.s32"), nullptr);
  EXPECT_NE(FindFirst(*f, "atom.add.u32"), nullptr);  // Generic addressing.
  CheckTruncations(text, text.size() / 300);
}

// --- Speed ---------------------------------------------------------------------------------------------------------

TEST(PtxParserSpeed, LargeSyntheticModule) {
  constexpr int kInstructions = 200000;
  std::string text = ".version 9.0\n.target sm_75\n.address_size 64\n\n";
  text += ".visible .entry big(\n\t.param .u64 big_param_0,\n\t.param .u32 big_param_1\n)\n{\n";
  text += "\t.reg .pred \t%p<8>;\n\t.reg .b32 \t%r<64>;\n\t.reg .f32 \t%f<64>;\n\t.reg .b64 \t%rd<64>;\n\n";
  int emitted = 0, block = 0;
  while (emitted < kInstructions) {
    int i = emitted;
    text += "$L__BB0_" + std::to_string(i) + ":\n";
    text += "\tld.param.u64 \t%rd1, [big_param_0];\n";
    text += "\tmov.u32 \t%r1, %tid.x;\n";
    text += "\tmad.lo.s32 \t%r2, %r1, %r3, " + std::to_string(i) + ";\n";
    text += "\tmul.wide.s32 \t%rd2, %r2, 4;\n";
    text += "\tadd.s64 \t%rd3, %rd1, %rd2;\n";
    text += "\tld.global.nc.f32 \t%f1, [%rd3+16];\n";
    text += "\tfma.rn.f32 \t%f2, %f1, 0f3F800000, %f3;\n";
    text += "\tsetp.lt.s32 \t%p1, %r2, 1024;\n";
    text += "\t@%p1 bra \t$L__BB0_" + std::to_string(i) + ";\n";
    text += "\t{ // callseq " + std::to_string(block++) + ", 0\n\t.param .b64 param0;\n";
    text += "\tst.param.b64 \t[param0+0], %rd3;\n\t}\n";
    text += "\tst.global.v2.f32 \t[%rd3], {%f1, %f2};\n";
    emitted += 11;
  }
  text += "\tret;\n}\n";
  auto start = std::chrono::steady_clock::now();
  CallResult<Module> r = ParsePtx(text);
  auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Function& f = r.value().functions[0];
  EXPECT_EQ(static_cast<int>(f.body.size()), emitted + 1);
  EXPECT_EQ(f.locals.size(), static_cast<size_t>(block));
  std::printf("[ timing   ] parsed %zu instructions (%.1f MB) in %.3f s: %.1f M instructions/s, %.1f MB/s\n",
              f.body.size(), text.size() / 1e6, elapsed, f.body.size() / elapsed / 1e6, text.size() / elapsed / 1e6);
}

}  // namespace
}  // namespace gpupool::emu
