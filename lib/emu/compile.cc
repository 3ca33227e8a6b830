// PTX tree -> bytecode. Every name, type and modifier is resolved here, and anything the interpreter does not
// implement is refused with the instruction and its line, so a module either loads completely or not at all.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "emu/program.h"
#include "emu/ptx_link.h"

namespace gpupool::emu::internal {
namespace {

using ptx::Module;

std::string Joined(const ptx::Instruction& in) {
  std::string s = in.opcode;
  for (const auto& m : in.modifiers) s += "." + m;
  return s;
}

bool IsFloat(Type t) { return t == Type::kF16 || t == Type::kBF16 || t == Type::kF32 || t == Type::kF64; }
bool IsSigned(Type t) { return t == Type::kS8 || t == Type::kS16 || t == Type::kS32 || t == Type::kS64; }

uint64_t Mask(int bytes) { return bytes >= 8 ? ~0ull : (1ull << (bytes * 8)) - 1; }

struct Symbol {
  enum Kind { kGlobalAddr, kShared, kLocal, kParam, kFunction } kind;
  uint64_t value;  // Address, shared offset, frame offset, or function index.
};

class FunctionCompiler;

class ModuleCompiler {
 public:
  ModuleCompiler(const Module& m, GlobalAllocator& alloc) : m_(m), alloc_(alloc) {}
  CallResult<Program> Run();

  const Module& m_;
  GlobalAllocator& alloc_;
  Program prog_;
  std::unordered_map<std::string, Symbol> module_symbols_;
  std::vector<std::pair<const ptx::Variable*, uint64_t>> extern_shared_;
  // Function-level .shared variables: (function index, name) -> offset.
  std::map<std::pair<int, std::string>, uint64_t> function_shared_;
};

CallStatus Err(int line, const std::string& what) {
  return CallStatus(cu::kInvalidPtx, "line " + std::to_string(line) + ": " + what);
}

// The block size bound of a kernel's .maxntid (at most that many threads) or .reqntid (exactly that many): the
// product of its one to three dimensions. Both bound the block; a value below 1 is refused, as ptxas refuses it.
CallStatus BlockBound(const ptx::Function& f, uint32_t* max_threads) {
  uint64_t bound = 0;
  for (const char* name : {"maxntid", "reqntid"}) {
    auto it = f.directives.find(name);
    if (it == f.directives.end()) continue;
    if (it->second.empty() || it->second.size() > 3) {
      return Err(f.line, "." + std::string(name) + " of '" + f.name + "' takes one to three dimensions");
    }
    uint64_t threads = 1;
    for (int64_t d : it->second) {
      if (d < 1 || d > 1024) {
        return Err(f.line, "." + std::string(name) + " of '" + f.name + "' has a dimension of " + std::to_string(d) +
                               ": each must be 1 to 1024");
      }
      threads *= static_cast<uint64_t>(d);
    }
    bound = bound == 0 ? threads : std::min(bound, threads);
  }
  *max_threads = static_cast<uint32_t>(bound);  // At most 1024^3: fits.
  return CallStatus::Ok();
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return a <= 1 ? v : (v + a - 1) / a * a; }

std::string KiB(uint64_t bytes) { return std::to_string(bytes / 1024) + " KiB"; }

uint64_t VarAlign(const ptx::Variable& v) {
  if (v.align > 0) return static_cast<uint64_t>(v.align);
  int s = ptx::TypeSize(v.type) * v.vector_width;
  return s > 0 ? static_cast<uint64_t>(s) : 1;
}

class FunctionCompiler {
 public:
  FunctionCompiler(ModuleCompiler& mc, const ptx::Function& f, Function& out, int index)
      : mc_(mc), f_(f), out_(out), index_(index) {}

  CallStatus Run() {
    // Registers (the parser bounds them too; a module may come from elsewhere, as the fuzz targets build them).
    uint64_t declared = 0;
    for (const auto& r : f_.registers) declared += r.is_range ? static_cast<uint64_t>(std::max(r.count, 0)) : 1;
    if (declared > kMaxRegistersPerFunction) {
      return Err(f_.line, "'" + f_.name + "' declares " + std::to_string(declared) + " registers; the emulator " +
                              "allows at most " + std::to_string(kMaxRegistersPerFunction) + " per function");
    }
    for (const auto& r : f_.registers) {
      int bytes = r.type == Type::kPred ? 1 : ptx::TypeSize(r.type) * r.vector_width;
      if (r.is_range) {
        for (int i = 0; i < r.count; ++i) AddReg(r.name + std::to_string(i), bytes);
      } else {
        AddReg(r.name, bytes);
      }
    }
    // Parameters and returns in the param area; .reg parameters get registers.
    uint64_t off = 0;
    auto place_param = [&](const ptx::Variable& v, std::vector<ParamSlot>& slots) {
      ParamSlot slot;
      uint64_t size = std::max<uint64_t>(v.ByteSize(), 1);
      if (v.space == ptx::Space::kReg) {
        slot.reg = static_cast<int32_t>(AddReg(v.name, ptx::TypeSize(v.type)));
        slot.size = static_cast<uint32_t>(ptx::TypeSize(v.type));
      } else {
        off = AlignUp(off, VarAlign(v));
        slot.offset = static_cast<uint32_t>(off);
        slot.size = static_cast<uint32_t>(size);
        symbols_[v.name] = {Symbol::kParam, off};
        off += size;
      }
      slots.push_back(slot);
    };
    for (const auto& p : f_.params) place_param(p, out_.params);
    if (f_.is_entry) {
      for (const auto& s : out_.params) out_.kernel_params.push_back({s.offset, s.size, 0});
      for (size_t i = 0; i < f_.params.size(); ++i) {
        out_.kernel_params[i].align = static_cast<uint32_t>(VarAlign(f_.params[i]));
      }
      if (off > kMaxKernelParamBytes) {
        return Err(f_.line, "kernel '" + f_.name + "' takes " + std::to_string(off) + " bytes of parameters; a " +
                                "GPU allows at most " + std::to_string(kMaxKernelParamBytes));
      }
      out_.kernel_param_bytes = static_cast<uint32_t>(off);
    }
    for (const auto& p : f_.returns) place_param(p, out_.returns);
    // Body variables.
    uint64_t local = 0;
    for (const auto& v : f_.locals) {
      switch (v.space) {
        case ptx::Space::kLocal:
          local = AlignUp(local, VarAlign(v));
          symbols_[v.name] = {Symbol::kLocal, local};
          local += std::max<uint64_t>(v.ByteSize(), 1);
          break;
        case ptx::Space::kParam:
          off = AlignUp(off, VarAlign(v));
          symbols_[v.name] = {Symbol::kParam, off};
          off += std::max<uint64_t>(v.ByteSize(), 1);
          break;
        case ptx::Space::kShared:
          symbols_[v.name] = {Symbol::kShared, mc_.function_shared_.at({index_, v.name})};
          break;
        case ptx::Space::kReg:
          AddReg(v.name, ptx::TypeSize(v.type));
          break;
        default:
          return Err(v.line, "variables of this state space cannot be declared inside a function: " + v.name);
      }
    }
    // A GPU's limits, refused at load as ptxas refuses them, before a size is narrowed to the 32 bits it is kept in.
    if (local > kMaxLocalBytesPerThread) {
      return Err(f_.line, "'" + f_.name + "' needs " + std::to_string(local) + " bytes of local memory per thread; " +
                              "a GPU allows at most " + KiB(kMaxLocalBytesPerThread));
    }
    if (off > kMaxParamAreaBytes) {
      return Err(f_.line, "'" + f_.name + "' declares " + std::to_string(off) + " bytes of .param space; the " +
                              "emulator allows at most " + KiB(kMaxParamAreaBytes) + " per function");
    }
    out_.param_area = static_cast<uint32_t>(AlignUp(off, 16));
    out_.local_area = static_cast<uint32_t>(AlignUp(local, 16));
    out_.uses_local = local > 0;
    for (const auto& [label, pc] : f_.labels) labels_[label] = pc;
    out_.code.reserve(f_.body.size());
    for (const auto& in : f_.body) {
      Inst inst;
      inst.line = in.line;
      if (!in.guard.empty()) {
        auto it = regs_.find(in.guard);
        if (it == regs_.end()) return Err(in.line, "unknown guard predicate " + in.guard);
        inst.guard = static_cast<int32_t>(it->second);
        inst.guard_negated = in.guard_negated;
      }
      if (CallStatus s = Decode(in, inst); !s.ok()) return s;
      Specialise(inst);
      out_.code.push_back(inst);
    }
    // Falling off the end of a function returns.
    Inst ret;
    ret.op = Op::kRet;
    ret.line = f_.body.empty() ? f_.line : f_.body.back().line;
    out_.code.push_back(ret);
    out_.num_regs = static_cast<uint32_t>(out_.reg_bytes.size());
    ReadLaunchBounds();
    return CallStatus::Ok();
  }

 private:
  // The launch bounds among the function's performance directives. Values a GPU's compiler would reject (zero,
  // negative) bound nothing; products saturate.
  void ReadLaunchBounds() {
    auto product = [&](const char* directive) -> uint32_t {
      auto it = f_.directives.find(directive);
      if (it == f_.directives.end() || it->second.empty()) return 0;
      uint64_t p = 1;
      for (int64_t v : it->second) {
        if (v <= 0) return 0;
        p = std::min<uint64_t>(p * std::min<uint64_t>(static_cast<uint64_t>(v), UINT32_MAX), UINT32_MAX);
      }
      return static_cast<uint32_t>(p);
    };
    // bound_threads: BlockBound, which refuses what ptxas refuses.
    out_.bound_blocks_per_sm = product("minnctapersm");
    out_.bound_registers = product("maxnreg");
  }

  uint32_t AddReg(const std::string& name, int bytes) {
    auto it = regs_.find(name);
    if (it != regs_.end()) return it->second;
    uint32_t slot = static_cast<uint32_t>(out_.reg_bytes.size());
    out_.reg_bytes.push_back(static_cast<uint8_t>(bytes <= 0 ? 8 : bytes));
    regs_[name] = slot;
    return slot;
  }

  static bool SpecialFor(const std::string& name, Special* out) {
    static const std::unordered_map<std::string, Special> kMap = {
        {"%tid.x", Special::kTidX},         {"%tid.y", Special::kTidY},         {"%tid.z", Special::kTidZ},
        {"%ntid.x", Special::kNtidX},       {"%ntid.y", Special::kNtidY},       {"%ntid.z", Special::kNtidZ},
        {"%ctaid.x", Special::kCtaidX},     {"%ctaid.y", Special::kCtaidY},     {"%ctaid.z", Special::kCtaidZ},
        {"%nctaid.x", Special::kNctaidX},   {"%nctaid.y", Special::kNctaidY},   {"%nctaid.z", Special::kNctaidZ},
        {"%laneid", Special::kLaneid},      {"%warpid", Special::kWarpid},      {"%nwarpid", Special::kNwarpid},
        {"%smid", Special::kSmid},          {"%nsmid", Special::kNsmid},        {"%gridid", Special::kGridid},
        {"%clock", Special::kClock},        {"%clock64", Special::kClock64},    {"%globaltimer", Special::kGlobaltimer},
        {"%lanemask_eq", Special::kLanemaskEq}, {"%lanemask_le", Special::kLanemaskLe},
        {"%lanemask_lt", Special::kLanemaskLt}, {"%lanemask_ge", Special::kLanemaskGe},
        {"%lanemask_gt", Special::kLanemaskGt}, {"%dynamic_smem_size", Special::kDynamicSmemSize},
        {"%total_smem_size", Special::kTotalSmemSize}, {"WARP_SZ", Special::kWarpSize},
        {"%globaltimer_lo", Special::kGlobaltimerLo}, {"%globaltimer_hi", Special::kGlobaltimerHi},
        {"%reserved_smem_offset_begin", Special::kReservedSmemBegin},
        {"%reserved_smem_offset_end", Special::kReservedSmemEnd},
        {"%reserved_smem_offset_cap", Special::kReservedSmemCap},
        {"%reserved_smem_offset_0", Special::kReservedSmemOffset0},
        {"%reserved_smem_offset_1", Special::kReservedSmemOffset1},
    };
    auto it = kMap.find(name);
    if (it != kMap.end()) {
      *out = it->second;
      return true;
    }
    // cooperative_groups' grid sync finds its workspace in %envreg1:%envreg2; the other %envregN read as 0.
    if (name == "%envreg1" || name == "%envreg2") {
      *out = name == "%envreg1" ? Special::kEnvreg1 : Special::kEnvreg2;
      return true;
    }
    // %tid (no component) in mov.v4 forms and %envregN read as 0.
    if (name.rfind("%envreg", 0) == 0) {
      *out = Special::kZero;
      return true;
    }
    return false;
  }

  bool LookupSymbol(const std::string& name, Symbol* out) const {
    auto it = symbols_.find(name);
    if (it != symbols_.end()) {
      *out = it->second;
      return true;
    }
    auto mit = mc_.module_symbols_.find(name);
    if (mit != mc_.module_symbols_.end()) {
      *out = mit->second;
      return true;
    }
    return false;
  }

  // Encodes an immediate for an operation of type `t`.
  static uint64_t Imm(const ptx::Operand& o, Type t) {
    switch (o.kind) {
      case ptx::Operand::Kind::kImmInt:
        if (t == Type::kF32) {
          float f = static_cast<float>(o.int_value);
          uint32_t b;
          std::memcpy(&b, &f, 4);
          return b;
        }
        if (t == Type::kF64) {
          double d = static_cast<double>(o.int_value);
          uint64_t b;
          std::memcpy(&b, &d, 8);
          return b;
        }
        return static_cast<uint64_t>(o.int_value) & (t == Type::kPred ? 1 : Mask(ptx::TypeSize(t)));
      case ptx::Operand::Kind::kImmFloat:
        if (t == Type::kF64) {
          float f;
          std::memcpy(&f, &o.float_bits, 4);
          double d = f;
          uint64_t b;
          std::memcpy(&b, &d, 8);
          return b;
        }
        return o.float_bits;
      case ptx::Operand::Kind::kImmDouble: {
        if (t == Type::kF32) {
          float f = static_cast<float>(o.double_value);
          uint32_t b;
          std::memcpy(&b, &f, 4);
          return b;
        }
        uint64_t b;
        std::memcpy(&b, &o.double_value, 8);
        return b;
      }
      default:
        return 0;
    }
  }

  // A source or destination operand.
  CallStatus Resolve(const ptx::Operand& o, Type t, int line, Operand* out) {
    out->negated = o.negated;
    switch (o.kind) {
      case ptx::Operand::Kind::kImmInt:
      case ptx::Operand::Kind::kImmFloat:
      case ptx::Operand::Kind::kImmDouble:
        out->kind = Src::kImm;
        out->imm = Imm(o, t);
        return CallStatus::Ok();
      case ptx::Operand::Kind::kSink:
        out->kind = Src::kNone;
        return CallStatus::Ok();
      case ptx::Operand::Kind::kRegister: {
        auto it = regs_.find(o.name);
        if (it != regs_.end()) {
          out->kind = Src::kReg;
          out->reg = it->second;
          return CallStatus::Ok();
        }
        Special sp;
        if (SpecialFor(o.name, &sp)) {
          out->kind = Src::kSpecial;
          out->reg = static_cast<uint32_t>(sp);
          return CallStatus::Ok();
        }
        Symbol sym;
        if (LookupSymbol(o.name, &sym)) {
          // "sym+8" as an operand: the symbol's address plus the offset.
          uint64_t offset = o.has_offset ? static_cast<uint64_t>(o.int_value) : 0;
          switch (sym.kind) {
            case Symbol::kGlobalAddr: out->kind = Src::kImm; out->imm = sym.value + offset; break;
            case Symbol::kShared: out->kind = Src::kImm; out->imm = sym.value + offset; break;
            case Symbol::kLocal: out->kind = Src::kLocalSym; out->imm = sym.value + offset; break;
            case Symbol::kParam: out->kind = Src::kParamSym; out->imm = sym.value + offset; break;
            case Symbol::kFunction: out->kind = Src::kImm; out->imm = kFunctionAddressBase + sym.value; break;
          }
          return CallStatus::Ok();
        }
        return Err(line, "unknown register or symbol '" + o.name + "'");
      }
      default:
        return Err(line, "unexpected operand form");
    }
  }

  // Shared and local addresses held in 32-bit registers wrap at 32 bits (mode2 = 1 tells the interpreter).
  void MarkAddressWidth(Inst& inst) {
    if ((inst.space == Space::kShared || inst.space == Space::kLocal) && inst.base.kind == Src::kReg &&
        out_.reg_bytes[inst.base.reg] == 4) {
      inst.mode2 = 1;
    }
  }

  // A destination that may be written "a|p" (a value and a predicate, as shfl, match and setp allow).
  CallStatus ResolveDestinations(const ptx::Operand& d, Type first, Type second, int line, Inst& inst) {
    if (d.kind != ptx::Operand::Kind::kPipe) return Resolve(d, first, line, &inst.d[0]);
    if (CallStatus s = Resolve(d.elements[0], first, line, &inst.d[0]); !s.ok()) return s;
    return Resolve(d.elements[1], second, line, &inst.d[1]);
  }

  CallStatus ResolveAddress(const ptx::Operand& o, int line, Inst& inst) {
    if (o.kind != ptx::Operand::Kind::kAddress) {
      // "ld.param.u32 %r1, sym" without brackets is not PTX; but allow a bare symbol as an address.
      if (o.kind != ptx::Operand::Kind::kRegister) return Err(line, "expected an address operand [..]");
    }
    inst.offset = o.int_value;
    if (o.name.empty()) {
      inst.base.kind = Src::kNone;
      return CallStatus::Ok();
    }
    auto it = regs_.find(o.name);
    if (it != regs_.end()) {
      inst.base.kind = Src::kReg;
      inst.base.reg = it->second;
      return CallStatus::Ok();
    }
    Symbol sym;
    if (!LookupSymbol(o.name, &sym)) return Err(line, "unknown address base '" + o.name + "'");
    switch (sym.kind) {
      case Symbol::kGlobalAddr:
      case Symbol::kShared:
        inst.base.kind = Src::kNone;
        inst.offset += static_cast<int64_t>(sym.value);
        break;
      case Symbol::kLocal:
        inst.base.kind = Src::kLocalSym;
        inst.base.imm = sym.value;
        break;
      case Symbol::kParam:
        inst.base.kind = Src::kParamSym;
        inst.base.imm = sym.value;
        break;
      case Symbol::kFunction:
        return Err(line, "a function is not an address to load from: " + o.name);
    }
    return CallStatus::Ok();
  }

  struct Mods {
    std::vector<Type> types;
    std::set<std::string> flags;
    Round round = Round::kNone;
    bool has_space = false;
    Space space = Space::kGeneric;
    int vec = 1;
  };

  static Mods Classify(const ptx::Instruction& in) {
    Mods m;
    for (const auto& x : in.modifiers) {
      Type t = ptx::ParseType(x);
      if (t != Type::kNone) {
        m.types.push_back(t);
        continue;
      }
      if (x == "rn") m.round = Round::kRn;
      else if (x == "rz") m.round = Round::kRz;
      else if (x == "rm") m.round = Round::kRm;
      else if (x == "rp") m.round = Round::kRp;
      else if (x == "rni") m.round = Round::kRni;
      else if (x == "rzi") m.round = Round::kRzi;
      else if (x == "rmi") m.round = Round::kRmi;
      else if (x == "rpi") m.round = Round::kRpi;
      else if (x == "rna") m.round = Round::kRna;
      else if (x == "global") { m.has_space = true; m.space = Space::kGlobal; }
      // A cluster's shared memory is the CTA's own: the emulator runs clusters of one CTA.
      else if (x == "shared" || x == "shared::cta" || x == "shared::cluster") { m.has_space = true; m.space = Space::kShared; }
      else if (x == "local") { m.has_space = true; m.space = Space::kLocal; }
      else if (x == "param" || x == "param::entry" || x == "param::func") { m.has_space = true; m.space = Space::kParam; }
      else if (x == "const") { m.has_space = true; m.space = Space::kConst; }
      else if (x == "v2") m.vec = 2;
      else if (x == "v4") m.vec = 4;
      else m.flags.insert(x);
    }
    return m;
  }

  // The first modifier of `in` that names an entry of `modes` (".add", ".finite"...), or false.
  static bool ModeFromFlags(const Mods& m, const std::unordered_map<std::string, uint8_t>& modes, uint8_t* mode) {
    for (const auto& f : m.flags) {
      auto it = modes.find(f);
      if (it != modes.end()) {
        *mode = it->second;
        return true;
      }
    }
    return false;
  }

  static uint16_t CommonFlags(const Mods& m) {
    uint16_t f = 0;
    if (m.flags.count("ftz")) f |= kFtz;
    if (m.flags.count("sat")) f |= kSat;
    if (m.flags.count("approx")) f |= kApprox;
    if (m.flags.count("cc")) f |= kCarryOut;
    if (m.flags.count("full")) f |= kFull;
    if (m.flags.count("NaN")) f |= kNan;
    if (m.flags.count("relu")) f |= kRelu;
    if (m.round != Round::kNone) f |= kHasRound;
    return f;
  }

  // An instruction's second address (its first takes inst.base/offset): the base into *base, the offset as an
  // immediate into *offset. Only a register or an absolute address (symbols included) is accepted; otherwise the
  // instruction is refused with `what`.
  CallStatus ResolveSecondAddress(const ptx::Instruction& in, const ptx::Operand& o, const char* what, Operand* base,
                                 Operand* offset) {
    Inst address;
    if (CallStatus s = ResolveAddress(o, in.line, address); !s.ok()) return s;
    if (address.base.kind != Src::kReg && address.base.kind != Src::kNone) return Unsupported(in, what);
    *base = address.base;
    offset->kind = Src::kImm;
    offset->imm = static_cast<uint64_t>(address.offset);
    return CallStatus::Ok();
  }

  // A .L2::cache_hint form: its last operand is the cache policy.
  static bool HasCacheHint(const ptx::Instruction& in) {
    return std::any_of(in.modifiers.begin(), in.modifiers.end(),
                       [](const std::string& x) { return x.find("cache_hint") != std::string::npos; });
  }

  // mbarrier.{init,inval,arrive,arrive_drop,expect_tx,complete_tx,test_wait,try_wait,pending_count}.
  CallStatus DecodeMbarrier(const ptx::Instruction& in, const Mods& m, Inst& inst) {
    static const std::unordered_map<std::string, uint8_t> kOps = {
        {"init", kMbarInit},         {"inval", kMbarInval},           {"arrive", kMbarArrive},
        {"arrive_drop", kMbarArriveDrop}, {"expect_tx", kMbarExpectTx}, {"complete_tx", kMbarCompleteTx},
        {"test_wait", kMbarTestWait}, {"try_wait", kMbarTryWait},     {"pending_count", kMbarPendingCount}};
    if (in.modifiers.empty() || !kOps.count(in.modifiers[0])) return Unsupported(in);
    inst.op = Op::kMbarrier;
    inst.mode = kOps.at(in.modifiers[0]);
    if (m.flags.count("parity")) inst.mode2 |= kMbarrierParity;
    if ((inst.mode == kMbarArrive || inst.mode == kMbarArriveDrop) && m.flags.count("expect_tx")) {
      inst.mode2 |= kMbarrierExpectTx;
    }
    // .noComplete promises the arrival does not complete the phase (undefined otherwise): an ordinary arrival.
    // mbarrier objects live in shared memory (a cluster's is the CTA's own); without a state space the address is
    // generic.
    inst.space = m.has_space ? m.space : Space::kGeneric;
    const size_t n = in.operands.size();
    switch (inst.mode) {
      case kMbarInit: case kMbarExpectTx: case kMbarCompleteTx:
        if (CallStatus s = Operands(in, 2); !s.ok()) return s;
        if (CallStatus s = ResolveAddress(in.operands[0], in.line, inst); !s.ok()) return s;
        return Resolve(in.operands[1], Type::kU32, in.line, &inst.s[0]);
      case kMbarInval:
        if (CallStatus s = Operands(in, 1); !s.ok()) return s;
        if (CallStatus s = ResolveAddress(in.operands[0], in.line, inst); !s.ok()) return s;
        return CallStatus::Ok();
      case kMbarArrive: case kMbarArriveDrop: {
        // state, [addr] {, count}; with .expect_tx: state, [addr], txCount.
        if (n < 2 || n > 3) return Err(in.line, "'" + Joined(in) + "' takes 2 or 3 operands");
        if (CallStatus s = Resolve(in.operands[0], Type::kB64, in.line, &inst.d[0]); !s.ok()) return s;
        if (CallStatus s = ResolveAddress(in.operands[1], in.line, inst); !s.ok()) return s;
        const bool expect_tx = inst.mode2 & kMbarrierExpectTx;
        if (expect_tx && n != 3) return Err(in.line, "'" + Joined(in) + "' needs a transaction count");
        inst.s[0].kind = Src::kImm;
        inst.s[0].imm = 1;
        if (n == 3) return Resolve(in.operands[2], Type::kU32, in.line, &inst.s[expect_tx ? 1 : 0]);
        return CallStatus::Ok();
      }
      case kMbarTestWait: case kMbarTryWait:
        // waitComplete, [addr], state|phaseParity {, suspendTimeHint}.
        if (n < 3 || n > 4) return Err(in.line, "'" + Joined(in) + "' takes 3 or 4 operands");
        if (CallStatus s = Resolve(in.operands[0], Type::kPred, in.line, &inst.d[0]); !s.ok()) return s;
        if (CallStatus s = ResolveAddress(in.operands[1], in.line, inst); !s.ok()) return s;
        return Resolve(in.operands[2], (inst.mode2 & kMbarrierParity) ? Type::kU32 : Type::kB64, in.line,
                       &inst.s[0]);
      default:  // pending_count: count, state.
        if (CallStatus s = Operands(in, 2); !s.ok()) return s;
        if (CallStatus s = Resolve(in.operands[0], Type::kU32, in.line, &inst.d[0]); !s.ok()) return s;
        return Resolve(in.operands[1], Type::kB64, in.line, &inst.s[0]);
    }
  }

  // cp.async.bulk: global -> shared completing on an mbarrier, shared -> global in bulk groups; their commit,
  // wait and prefetch forms do nothing here, since copies complete at issue. Tensor (TMA) copies need tensor maps.
  CallStatus DecodeBulkCopy(const ptx::Instruction& in, Inst& inst) {
    const std::string& what = in.modifiers.size() > 2 ? in.modifiers[2] : "";
    if (what == "commit_group" || what == "wait_group" || what == "prefetch") {
      inst.op = Op::kNop;
      return CallStatus::Ok();
    }
    if (what == "tensor") return Unsupported(in, "tensor copies (TMA) need tensor maps, which slices do not offer");
    bool multicast = false, to_global = false;
    for (const std::string& x : in.modifiers) {
      multicast = multicast || x.rfind("multicast", 0) == 0;
    }
    if (multicast) return Unsupported(in, "multicast to a cluster");
    if (in.modifiers.size() < 4) return Unsupported(in);
    const std::string& dst = in.modifiers[2];
    const std::string& src = in.modifiers[3];
    if (dst == "global" && (src == "shared" || src == "shared::cta")) {
      to_global = true;
    } else if (!((dst == "shared::cluster" || dst == "shared::cta" || dst == "shared") && src == "global")) {
      return Unsupported(in, "bulk copies between these state spaces");
    }
    const size_t expected = (to_global ? 3 : 4) + (HasCacheHint(in) ? 1 : 0);
    if (CallStatus s = Operands(in, expected); !s.ok()) return s;
    inst.op = Op::kCpAsyncBulk;
    inst.mode = to_global ? 1 : 0;
    inst.space = to_global ? Space::kGlobal : Space::kShared;
    if (CallStatus s = ResolveAddress(in.operands[0], in.line, inst); !s.ok()) return s;
    MarkAddressWidth(inst);
    if (CallStatus s = ResolveSecondAddress(in, in.operands[1], "this source address", &inst.s[0], &inst.s[1]);
        !s.ok()) {
      return s;
    }
    if (CallStatus s = Resolve(in.operands[2], Type::kU32, in.line, &inst.s[2]); !s.ok()) return s;
    if (to_global) return CallStatus::Ok();
    return ResolveSecondAddress(in, in.operands[3], "this mbarrier address", &inst.s[3], &inst.s[4]);
  }

  CallStatus Unsupported(const ptx::Instruction& in, const std::string& why = "") {
    return Err(in.line, "unsupported instruction '" + Joined(in) + "'" + (why.empty() ? "" : ": " + why));
  }

  CallStatus Operands(const ptx::Instruction& in, size_t n) {
    if (in.operands.size() != n) {
      return Err(in.line, "'" + Joined(in) + "' takes " + std::to_string(n) + " operands, got " +
                              std::to_string(in.operands.size()));
    }
    return CallStatus::Ok();
  }

  // dst, src... with all sources of the op's type.
  CallStatus Simple(const ptx::Instruction& in, Inst& inst, size_t nsrc, Type src_type = Type::kNone) {
    if (CallStatus s = Operands(in, nsrc + 1); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[0], inst.type, in.line, &inst.d[0]); !s.ok()) return s;
    Type st = src_type == Type::kNone ? inst.type : src_type;
    for (size_t i = 0; i < nsrc; ++i) {
      if (CallStatus s = Resolve(in.operands[i + 1], st, in.line, &inst.s[i]); !s.ok()) return s;
    }
    return CallStatus::Ok();
  }

  CallStatus Decode(const ptx::Instruction& in, Inst& inst);
  // Decode's instruction families: each answers for its own opcodes (nullopt: not one of them).
  std::optional<CallStatus> DecodeArithmetic(const ptx::Instruction& in, const Mods& m, Inst& inst);
  std::optional<CallStatus> DecodeMoveAndCompare(const ptx::Instruction& in, const Mods& m, Inst& inst);
  std::optional<CallStatus> DecodeBitFields(const ptx::Instruction& in, const Mods& m, Inst& inst);
  std::optional<CallStatus> DecodeAsyncCopies(const ptx::Instruction& in, const Mods& m, Inst& inst);
  std::optional<CallStatus> DecodeBitsAndDots(const ptx::Instruction& in, const Mods& m, Inst& inst);
  std::optional<CallStatus> DecodeConversions(const ptx::Instruction& in, const Mods& m, Inst& inst);
  std::optional<CallStatus> DecodeMemory(const ptx::Instruction& in, const Mods& m, Inst& inst);
  std::optional<CallStatus> DecodeControl(const ptx::Instruction& in, const Mods& m, Inst& inst);
  std::optional<CallStatus> DecodeWarpAndOther(const ptx::Instruction& in, const Mods& m, Inst& inst);
  // An instruction that must name a type and does not: the error saying so.
  CallStatus NeedType(const ptx::Instruction& in, const Inst& inst) {
    if (inst.type == Type::kNone) return Err(in.line, "'" + Joined(in) + "' needs a type");
    return CallStatus::Ok();
  }
  // Tensor-core instructions (compile_matrix.inc).
  CallStatus DecodeMatrix(const ptx::Instruction& in, Inst& inst);
  // What DecodeMatrix reads from a matrix instruction's modifiers (ParseMatrixModifiers), for its forms.
  struct MatrixForm {
    MatrixOp op;  // Its shape, and what the form fills in.
    std::vector<MatrixType> types;
    std::set<std::string> flags;
    std::vector<std::string> layouts;  // .row/.col in order.
    bool has_shape = false, has_space = false;
    Space space = Space::kGeneric;
  };
  CallStatus ParseMatrixModifiers(const ptx::Instruction& in, MatrixForm* form);
  CallStatus OnlyMatrixFlags(const ptx::Instruction& in, const MatrixForm& form,
                            std::initializer_list<const char*> allowed);
  CallStatus DecodeWmma(const ptx::Instruction& in, MatrixForm& form, Inst& inst);
  CallStatus DecodeMma(const ptx::Instruction& in, MatrixForm& form, Inst& inst);
  CallStatus DecodeLdMovMatrix(const ptx::Instruction& in, MatrixForm& form, Inst& inst);
  CallStatus MatrixOperands(const ptx::Instruction& in, MatrixOp& op, Inst& inst);
  CallStatus DecodeCvtTf32(const ptx::Instruction& in, Inst& inst);
  CallStatus MatrixRegisters(const ptx::Instruction& in, const ptx::Operand& o, MatrixOp& op, MatrixRole role,
                            size_t count);
  // tex, tld4, suld, sust (compile_tex.inc).
  CallStatus DecodeTexture(const ptx::Instruction& in, Inst& inst, const Mods& m);

  // Picks a fast opcode when the instruction's shape allows it (see Op::kFast*).
  static void Specialise(Inst& in) {
    auto plain = [](const Operand& o) { return o.kind == Src::kReg || o.kind == Src::kImm; };
    auto srcs_plain = [&](int n) {
      for (int i = 0; i < n; ++i) {
        if (!plain(in.s[i]) || in.s[i].negated) return false;
      }
      return in.d[0].kind == Src::kReg;
    };
    const bool rn = in.round == Round::kNone || in.round == Round::kRn;
    const bool no_flags = (in.flags & (kFtz | kSat | kCarryOut | kHi | kWide | kBits24 | kRelu | kNan)) == 0;
    const Type t = in.type;
    const bool b32 = t == Type::kU32 || t == Type::kS32 || t == Type::kB32;
    const bool b64 = t == Type::kU64 || t == Type::kS64 || t == Type::kB64;
    switch (in.op) {
      case Op::kAdd: case Op::kSub:
        if (!srcs_plain(2) || !rn || !no_flags) return;
        if (t == Type::kF32) in.op = in.op == Op::kAdd ? Op::kFastAddF32 : Op::kFastSubF32;
        else if (t == Type::kF64) in.op = in.op == Op::kAdd ? Op::kFastAddF64 : Op::kFastSubF64;
        else if (b32) in.op = in.op == Op::kAdd ? Op::kFastAdd32 : Op::kFastSub32;
        else if (b64) in.op = in.op == Op::kAdd ? Op::kFastAdd64 : Op::kFastSub64;
        return;
      case Op::kMul:
        if (!srcs_plain(2) || !rn) return;
        if ((in.flags & kWide) && !(in.flags & (kFtz | kSat | kCarryOut | kHi | kBits24))) {
          if (in.type2 == Type::kS32) in.op = Op::kFastMulWideS32;
          else if (in.type2 == Type::kU32) in.op = Op::kFastMulWideU32;
          return;
        }
        if (!no_flags) return;
        if (t == Type::kF32) in.op = Op::kFastMulF32;
        else if (t == Type::kF64) in.op = Op::kFastMulF64;
        else if (b32) in.op = Op::kFastMulLo32;
        return;
      case Op::kFma: case Op::kMad:
        if (!srcs_plain(3) || !rn || !no_flags) return;
        if (t == Type::kF32) in.op = Op::kFastFmaF32;
        else if (t == Type::kF64) in.op = Op::kFastFmaF64;
        else if (b32 && in.op == Op::kMad) in.op = Op::kFastMadLo32;
        return;
      case Op::kMov:
        if (srcs_plain(1) && t != Type::kPred && ptx::TypeSize(t) >= 4) in.op = Op::kFastMov;
        return;
      case Op::kSetp:
        if (!srcs_plain(2) || in.mode2 != 0 || in.d[1].kind != Src::kNone || (in.flags & kFtz)) return;
        if (in.type2 == Type::kS32 && in.mode <= 5) in.op = Op::kFastSetpS32;
        else if ((in.type2 == Type::kU32 || in.type2 == Type::kB32) && in.mode <= 9) in.op = Op::kFastSetpU32;
        return;
      case Op::kAnd: case Op::kOr: case Op::kXor:
        if (!srcs_plain(2) || !b32) return;
        in.op = in.op == Op::kAnd ? Op::kFastAnd32 : in.op == Op::kOr ? Op::kFastOr32 : Op::kFastXor32;
        return;
      case Op::kShl:
        if (!srcs_plain(2)) return;
        if (b32) in.op = Op::kFastShl32;
        else if (b64) in.op = Op::kFastShlB64;
        return;
      case Op::kShr:
        if (srcs_plain(2) && (t == Type::kU32 || t == Type::kB32)) in.op = Op::kFastShrU32;
        return;
      default:
        return;
    }
  }

  ModuleCompiler& mc_;
  const ptx::Function& f_;
  Function& out_;
  int index_;
  std::unordered_map<std::string, uint32_t> regs_;
  std::unordered_map<std::string, Symbol> symbols_;
  std::unordered_map<std::string, int> labels_;
};

// Comparison operators for setp/set (mode).
// Comparison operators for setp/set (Inst::mode), in the order exec_ops.inc expects. In their own namespace so
// that names such as kHi do not shadow the instruction flags.
namespace cmp {
enum : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kLo, kLs, kHi, kHs, kEqu, kNeu, kLtu, kLeu, kGtu, kGeu, kNum, kNan };
}  // namespace cmp

bool ParseCmp(const std::string& s, uint8_t* out) {
  static const std::unordered_map<std::string, uint8_t> kMap = {
      {"eq", cmp::kEq},   {"ne", cmp::kNe},   {"lt", cmp::kLt},   {"le", cmp::kLe},   {"gt", cmp::kGt},
      {"ge", cmp::kGe},   {"lo", cmp::kLo},   {"ls", cmp::kLs},   {"hi", cmp::kHi},   {"hs", cmp::kHs},
      {"equ", cmp::kEqu}, {"neu", cmp::kNeu}, {"ltu", cmp::kLtu}, {"leu", cmp::kLeu}, {"gtu", cmp::kGtu},
      {"geu", cmp::kGeu}, {"num", cmp::kNum}, {"nan", cmp::kNan}};
  auto it = kMap.find(s);
  if (it == kMap.end()) return false;
  *out = it->second;
  return true;
}

#include "emu/compile_matrix.inc"

CallStatus FunctionCompiler::Decode(const ptx::Instruction& in, Inst& inst) {
  const std::string& op = in.opcode;
  if (op == "wmma" || op == "mma" || op == "ldmatrix" || op == "movmatrix") return DecodeMatrix(in, inst);
  if (op == "cvt" && std::find(in.modifiers.begin(), in.modifiers.end(), "tf32") != in.modifiers.end()) {
    return DecodeCvtTf32(in, inst);
  }
  Mods m = Classify(in);
  inst.flags = CommonFlags(m);
  inst.round = m.round;
  inst.type = m.types.empty() ? Type::kNone : m.types.back();
  inst.space = m.space;
  inst.vec = static_cast<uint8_t>(m.vec);

  // Each family answers for its own opcodes, in this order (the cvt forms and cp's two kinds within one family).
  for (auto family : {&FunctionCompiler::DecodeArithmetic, &FunctionCompiler::DecodeMoveAndCompare,
                      &FunctionCompiler::DecodeBitFields, &FunctionCompiler::DecodeAsyncCopies,
                      &FunctionCompiler::DecodeBitsAndDots, &FunctionCompiler::DecodeConversions,
                      &FunctionCompiler::DecodeMemory, &FunctionCompiler::DecodeControl,
                      &FunctionCompiler::DecodeWarpAndOther}) {
    if (std::optional<CallStatus> decoded = (this->*family)(in, m, inst)) return *decoded;
  }
  return Unsupported(in);
}

// Integer and floating-point arithmetic, logic, shifts and the unary math functions.
std::optional<CallStatus> FunctionCompiler::DecodeArithmetic(const ptx::Instruction& in, const Mods& m, Inst& inst) {
  const std::string& op = in.opcode;
  auto need_type = [&]() { return NeedType(in, inst); };
  static const std::unordered_map<std::string, Op> kArith = {
      {"add", Op::kAdd},   {"sub", Op::kSub},   {"mul", Op::kMul},   {"mad", Op::kMad},     {"fma", Op::kFma},
      {"div", Op::kDiv},   {"rem", Op::kRem},   {"abs", Op::kAbs},   {"neg", Op::kNeg},     {"min", Op::kMin},
      {"max", Op::kMax},   {"addc", Op::kAddC}, {"subc", Op::kSubC}, {"madc", Op::kMadC},   {"and", Op::kAnd},
      {"or", Op::kOr},     {"xor", Op::kXor},   {"not", Op::kNot},   {"cnot", Op::kCnot},   {"shl", Op::kShl},
      {"shr", Op::kShr},   {"popc", Op::kPopc}, {"clz", Op::kClz},   {"bfind", Op::kBfind}, {"brev", Op::kBrev},
      {"rcp", Op::kRcp},   {"sqrt", Op::kSqrt}, {"rsqrt", Op::kRsqrt}, {"sin", Op::kSin},   {"cos", Op::kCos},
      {"lg2", Op::kLg2},   {"ex2", Op::kEx2},   {"tanh", Op::kTanh}, {"copysign", Op::kCopysign}, {"sad", Op::kSad},
      {"mul24", Op::kMul}, {"mad24", Op::kMad},
  };
  auto arith = kArith.find(op);
  if (arith != kArith.end()) {
    inst.op = arith->second;
    // min/max of two packed 16-bit integers (PTX ISA 8.0, sm_90: CUB's reductions use them): 32-bit registers,
    // each half on its own. mode 1: signed halves, 2: unsigned.
    const bool s16x2 = std::find(in.modifiers.begin(), in.modifiers.end(), "s16x2") != in.modifiers.end();
    const bool u16x2 = std::find(in.modifiers.begin(), in.modifiers.end(), "u16x2") != in.modifiers.end();
    if ((s16x2 || u16x2) && inst.type == Type::kNone) {
      if (inst.op != Op::kMin && inst.op != Op::kMax) return Unsupported(in, "this packed 16-bit integer operation");
      inst.type = Type::kB32;
      inst.mode = s16x2 ? 1 : 2;
      return Simple(in, inst, 2);
    }
    if (CallStatus s = need_type(); !s.ok()) return s;
    if (m.flags.count("hi")) inst.flags |= kHi;
    if (m.flags.count("wide")) inst.flags |= kWide;
    if (m.flags.count("shiftamt")) inst.flags |= kShiftAmt;
    if (op == "mul24" || op == "mad24") inst.flags |= kBits24;
    if (m.flags.count("xorsign")) {
      if ((op != "min" && op != "max") || !m.flags.count("abs")) {
        return Unsupported(in, ".xorsign other than min/max.xorsign.abs");
      }
      inst.flags |= kXorSignAbs;
    }
    if (inst.type == Type::kB128) return Unsupported(in, "128-bit arithmetic");
    size_t nsrc = 2;
    switch (inst.op) {
      case Op::kMad: case Op::kFma: case Op::kMadC: case Op::kSad: nsrc = 3; break;
      case Op::kAbs: case Op::kNeg: case Op::kNot: case Op::kCnot: case Op::kPopc: case Op::kClz:
      case Op::kBfind: case Op::kBrev: case Op::kRcp: case Op::kSqrt: case Op::kRsqrt: case Op::kSin:
      case Op::kCos: case Op::kLg2: case Op::kEx2: case Op::kTanh: nsrc = 1; break;
      default: break;
    }
    const bool packed = inst.type == Type::kF16x2 || inst.type == Type::kBF16x2 || inst.type == Type::kBF16;
    if (packed || (inst.type == Type::kF16 && (inst.op == Op::kEx2 || inst.op == Op::kTanh))) {
      switch (inst.op) {
        case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kFma: case Op::kNeg: case Op::kAbs: case Op::kMin:
        case Op::kMax: case Op::kEx2: case Op::kTanh: break;
        default: return Unsupported(in, "this packed half or bf16 operation");
      }
      inst.mode = static_cast<uint8_t>(inst.op);
      inst.op = Op::kHalves;
      return Simple(in, inst, nsrc);
    }
    if ((inst.op == Op::kMad || inst.op == Op::kMul) && (inst.flags & kWide)) {
      // Sources have the named type; the destination is twice as wide.
      Type dst = inst.type;
      switch (inst.type) {
        case Type::kU16: dst = Type::kU32; break;
        case Type::kS16: dst = Type::kS32; break;
        case Type::kU32: dst = Type::kU64; break;
        case Type::kS32: dst = Type::kS64; break;
        default: return Unsupported(in, ".wide needs a 16- or 32-bit integer type");
      }
      inst.type2 = inst.type;
      inst.type = dst;
      if (CallStatus s = Operands(in, nsrc + 1); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], dst, in.line, &inst.d[0]); !s.ok()) return s;
      for (size_t i = 0; i < nsrc; ++i) {
        Type st = (inst.op == Op::kMad && i == 2) ? dst : inst.type2;
        if (CallStatus s = Resolve(in.operands[i + 1], st, in.line, &inst.s[i]); !s.ok()) return s;
      }
      return CallStatus::Ok();
    }
    if (inst.op == Op::kShl || inst.op == Op::kShr) {
      // The shift amount is always a .u32.
      if (CallStatus s = Operands(in, 3); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], inst.type, in.line, &inst.d[0]); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[1], inst.type, in.line, &inst.s[0]); !s.ok()) return s;
      return Resolve(in.operands[2], Type::kU32, in.line, &inst.s[1]);
    }
    if (inst.op == Op::kPopc || inst.op == Op::kClz || inst.op == Op::kBfind) {
      // Destination is .u32 whatever the source type.
      inst.type2 = inst.type;
      if (CallStatus s = Operands(in, 2); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], Type::kU32, in.line, &inst.d[0]); !s.ok()) return s;
      return Resolve(in.operands[1], inst.type, in.line, &inst.s[0]);
    }
    if (inst.type == Type::kF16 &&
        !(inst.op == Op::kAdd || inst.op == Op::kSub || inst.op == Op::kMul || inst.op == Op::kFma ||
          inst.op == Op::kNeg || inst.op == Op::kAbs || inst.op == Op::kMin || inst.op == Op::kMax)) {
      return Unsupported(in, "this .f16 operation");
    }
    return Simple(in, inst, nsrc);
  }

  return std::nullopt;
}

// mov, setp/set, selp and slct.
std::optional<CallStatus> FunctionCompiler::DecodeMoveAndCompare(const ptx::Instruction& in, const Mods& m,
                                                                 Inst& inst) {
  const std::string& op = in.opcode;
  auto need_type = [&]() { return NeedType(in, inst); };
  if (op == "mov") {
    if (CallStatus s = need_type(); !s.ok()) return s;
    if (CallStatus s = Operands(in, 2); !s.ok()) return s;
    const auto& dst = in.operands[0];
    const auto& src = in.operands[1];
    if (src.kind == ptx::Operand::Kind::kVector) {
      // mov.b64 %rd, {%r1, %r2}: pack little-endian.
      inst.op = Op::kMovPack;
      inst.vec = static_cast<uint8_t>(src.elements.size());
      if (inst.vec != 2 && inst.vec != 4) return Unsupported(in, "vector of " + std::to_string(inst.vec));
      if (CallStatus s = Resolve(dst, inst.type, in.line, &inst.d[0]); !s.ok()) return s;
      Type part = ptx::TypeSize(inst.type) / inst.vec == 2 ? Type::kB16 : ptx::TypeSize(inst.type) / inst.vec == 4
                                                                             ? Type::kB32 : Type::kB8;
      inst.type2 = part;
      for (size_t i = 0; i < src.elements.size(); ++i) {
        if (CallStatus s = Resolve(src.elements[i], part, in.line, &inst.s[i]); !s.ok()) return s;
      }
      return CallStatus::Ok();
    }
    if (dst.kind == ptx::Operand::Kind::kVector) {
      inst.op = Op::kMovUnpack;
      inst.vec = static_cast<uint8_t>(dst.elements.size());
      if (inst.vec != 2 && inst.vec != 4) return Unsupported(in, "vector of " + std::to_string(inst.vec));
      Type part = ptx::TypeSize(inst.type) / inst.vec == 2 ? Type::kB16 : ptx::TypeSize(inst.type) / inst.vec == 4
                                                                             ? Type::kB32 : Type::kB8;
      inst.type2 = part;
      for (size_t i = 0; i < dst.elements.size(); ++i) {
        if (CallStatus s = Resolve(dst.elements[i], part, in.line, &inst.d[i]); !s.ok()) return s;
      }
      return Resolve(src, inst.type, in.line, &inst.s[0]);
    }
    inst.op = Op::kMov;
    return Simple(in, inst, 1);
  }

  if (op == "setp" || op == "set") {
    inst.op = op == "setp" ? Op::kSetp : Op::kSet;
    bool cmp_found = false;
    for (const auto& x : in.modifiers) {
      if (ParseCmp(x, &inst.mode)) {
        cmp_found = true;
        break;
      }
    }
    if (!cmp_found) return Err(in.line, "'" + Joined(in) + "' has no comparison operator");
    inst.mode2 = 0;
    if (m.flags.count("and")) inst.mode2 = 1;
    if (m.flags.count("or")) inst.mode2 = 2;
    if (m.flags.count("xor")) inst.mode2 = 3;
    Type src;
    if (inst.op == Op::kSetp) {
      if (m.types.size() != 1) return Err(in.line, "setp needs one type");
      src = m.types[0];
    } else {
      if (m.types.size() != 2) return Err(in.line, "set needs a destination and a source type");
      inst.type = m.types[0];
      src = m.types[1];
    }
    inst.type2 = src;
    size_t expected = inst.mode2 ? 4 : 3;
    if (CallStatus s = Operands(in, expected); !s.ok()) return s;
    if (CallStatus s = ResolveDestinations(in.operands[0], inst.op == Op::kSetp ? Type::kPred : inst.type, Type::kPred,
                                          in.line, inst);
        !s.ok()) {
      return s;
    }
    if (CallStatus s = Resolve(in.operands[1], src, in.line, &inst.s[0]); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[2], src, in.line, &inst.s[1]); !s.ok()) return s;
    if (inst.mode2) return Resolve(in.operands[3], Type::kPred, in.line, &inst.s[2]);
    return CallStatus::Ok();
  }

  if (op == "selp") {
    inst.op = Op::kSelp;
    if (CallStatus s = need_type(); !s.ok()) return s;
    if (CallStatus s = Operands(in, 4); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[0], inst.type, in.line, &inst.d[0]); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[1], inst.type, in.line, &inst.s[0]); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[2], inst.type, in.line, &inst.s[1]); !s.ok()) return s;
    return Resolve(in.operands[3], Type::kPred, in.line, &inst.s[2]);
  }
  if (op == "slct") {
    inst.op = Op::kSlct;
    if (m.types.size() != 2) return Err(in.line, "slct needs two types");
    inst.type = m.types[0];
    inst.type2 = m.types[1];
    if (CallStatus s = Operands(in, 4); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[0], inst.type, in.line, &inst.d[0]); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[1], inst.type, in.line, &inst.s[0]); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[2], inst.type, in.line, &inst.s[1]); !s.ok()) return s;
    return Resolve(in.operands[3], inst.type2, in.line, &inst.s[2]);
  }

  return std::nullopt;
}

// bfe, bfi, prmt, shf and lop3.
std::optional<CallStatus> FunctionCompiler::DecodeBitFields(const ptx::Instruction& in, const Mods& m, Inst& inst) {
  const std::string& op = in.opcode;
  auto need_type = [&]() { return NeedType(in, inst); };
  if (op == "bfe" || op == "bfi" || op == "prmt" || op == "shf" || op == "lop3") {
    if (CallStatus s = need_type(); !s.ok()) return s;
    // Boilerplate by nature: each instruction's operands resolved one by one, bfe/bfi/prmt alike.
    if (op == "bfe") {
      inst.op = Op::kBfe;
      if (CallStatus s = Operands(in, 4); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], inst.type, in.line, &inst.d[0]); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[1], inst.type, in.line, &inst.s[0]); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[2], Type::kU32, in.line, &inst.s[1]); !s.ok()) return s;
      return Resolve(in.operands[3], Type::kU32, in.line, &inst.s[2]);
    }
    if (op == "bfi") {
      inst.op = Op::kBfi;
      if (CallStatus s = Operands(in, 5); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], inst.type, in.line, &inst.d[0]); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[1], inst.type, in.line, &inst.s[0]); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[2], inst.type, in.line, &inst.s[1]); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[3], Type::kU32, in.line, &inst.s[2]); !s.ok()) return s;
      return Resolve(in.operands[4], Type::kU32, in.line, &inst.s[3]);
    }
    if (op == "prmt") {
      inst.op = Op::kPrmt;
      static const std::unordered_map<std::string, uint8_t> kModes = {
          {"f4e", 1}, {"b4e", 2}, {"rc8", 3}, {"ecl", 4}, {"ecr", 5}, {"rc16", 6}};
      ModeFromFlags(m, kModes, &inst.mode);  // Default mode (0) when none is named.
      return Simple(in, inst, 3, Type::kB32);
    }
    if (op == "shf") {
      inst.op = Op::kShf;
      if (m.flags.count("l")) inst.flags |= kLeft;
      else if (!m.flags.count("r")) return Err(in.line, "shf needs .l or .r");
      if (m.flags.count("clamp")) inst.flags |= kClamp;
      else if (!m.flags.count("wrap")) return Err(in.line, "shf needs .wrap or .clamp");
      return Simple(in, inst, 3, Type::kB32);
    }
    inst.op = Op::kLop3;
    return Simple(in, inst, 4, Type::kB32);
  }

  return std::nullopt;
}

// cp.async (with its commit and wait groups), mbarrier, cp.reduce.
std::optional<CallStatus> FunctionCompiler::DecodeAsyncCopies(const ptx::Instruction& in, const Mods& m, Inst& inst) {
  const std::string& op = in.opcode;
  if (op == "cp" && !in.modifiers.empty() && in.modifiers[0] == "async") {
    // The interpreter copies at issue, so every copy has completed by the time any thread could wait for it:
    // commit and wait are nothing to do, and waiting early is allowed (an async copy may complete at any time).
    const std::string& what = in.modifiers.size() > 1 ? in.modifiers[1] : "";
    if (what == "commit_group" || what == "wait_group" || what == "wait_all") {
      inst.op = Op::kNop;
      return CallStatus::Ok();
    }
    if (what == "mbarrier") {
      // cp.async.mbarrier.arrive{.noinc}.shared{::cta}.b64 [mbar]: the thread's earlier copies are done already.
      inst.op = Op::kMbarrier;
      inst.mode = kMbarAsyncArrive;
      if (m.flags.count("noinc")) inst.mode2 = kMbarrierNoInc;
      inst.space = m.has_space ? m.space : Space::kGeneric;
      if (CallStatus s = Operands(in, 1); !s.ok()) return s;
      return ResolveAddress(in.operands[0], in.line, inst);
    }
    if (what == "bulk") return DecodeBulkCopy(in, inst);
    if (what != "ca" && what != "cg") return Unsupported(in);
    bool shared_dst = false, global_src = false;
    for (const std::string& x : in.modifiers) {
      shared_dst = shared_dst || x == "shared" || x == "shared::cta";
      global_src = global_src || x == "global";
    }
    if (!shared_dst || !global_src) return Unsupported(in, "cp.async copies global to shared memory");
    inst.op = Op::kCpAsync;
    inst.space = Space::kShared;
    const size_t extra = in.operands.size() - (HasCacheHint(in) ? 1 : 0);
    if (in.operands.size() < 3 || extra < 3 || extra > 4) return Err(in.line, "'" + Joined(in) + "': operands");
    if (CallStatus s = ResolveAddress(in.operands[0], in.line, inst); !s.ok()) return s;
    MarkAddressWidth(inst);
    if (CallStatus s = ResolveSecondAddress(in, in.operands[1], "a source address that is not global memory",
                                           &inst.s[0], &inst.s[1]);
        !s.ok()) {
      return s;
    }
    if (CallStatus s = Resolve(in.operands[2], Type::kU32, in.line, &inst.s[2]); !s.ok()) return s;
    if (inst.s[2].kind != Src::kImm || (inst.s[2].imm != 4 && inst.s[2].imm != 8 && inst.s[2].imm != 16)) {
      return Err(in.line, "cp.async copies 4, 8 or 16 bytes");
    }
    if (extra == 4) {
      const ptx::Operand& last = in.operands[3];
      auto reg = regs_.find(last.name);
      const bool predicate = reg != regs_.end() && out_.reg_bytes[reg->second] == 1;  // .pred (u8 is no size).
      inst.mode = predicate ? 1 : 0;
      if (CallStatus s = Resolve(last, predicate ? Type::kPred : Type::kU32, in.line, &inst.s[3]); !s.ok()) return s;
    }
    return CallStatus::Ok();
  }

  if (op == "mbarrier") return DecodeMbarrier(in, m, inst);
  if (op == "cp" && !in.modifiers.empty() && in.modifiers[0] == "reduce") {
    return Unsupported(in, "bulk reductions");
  }

  return std::nullopt;
}

// bmsk, dp4a/dp2a and testp.
std::optional<CallStatus> FunctionCompiler::DecodeBitsAndDots(const ptx::Instruction& in, const Mods& m, Inst& inst) {
  const std::string& op = in.opcode;
  if (op == "bmsk") {
    // bmsk.{clamp,wrap}.b32 d, a, b: ones in bits [a, a + b) of 32.
    inst.op = Op::kBmsk;
    static const std::unordered_map<std::string, uint8_t> kModes = {{"clamp", 0}, {"wrap", 1}};
    if (!ModeFromFlags(m, kModes, &inst.mode)) return Err(in.line, "bmsk needs .clamp or .wrap");
    return Simple(in, inst, 2, Type::kB32);
  }

  if (op == "dp4a" || op == "dp2a") {
    // dp4a.atype.btype d, a, b, c / dp2a.{lo,hi}.atype.btype d, a, b, c: integer dot products.
    inst.op = op == "dp4a" ? Op::kDp4a : Op::kDp2a;
    if (m.types.size() != 2) return Err(in.line, "'" + Joined(in) + "' needs two types");
    inst.type = m.types[0];
    inst.type2 = m.types[1];
    if (inst.op == Op::kDp2a) inst.mode = m.flags.count("hi") ? 1 : 0;
    return Simple(in, inst, 3, Type::kB32);
  }

  if (op == "testp") {
    inst.op = Op::kTestp;
    static const std::unordered_map<std::string, uint8_t> kKinds = {
        {"finite", 0}, {"infinite", 1}, {"number", 2}, {"notanumber", 3}, {"normal", 4}, {"subnormal", 5}};
    if (!ModeFromFlags(m, kKinds, &inst.mode)) return Err(in.line, "testp needs a test (.finite, .number...)");
    if (CallStatus s = Operands(in, 2); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[0], Type::kPred, in.line, &inst.d[0]); !s.ok()) return s;
    return Resolve(in.operands[1], inst.type, in.line, &inst.s[0]);
  }

  return std::nullopt;
}

// cvt in its forms (packed, fp8 pairs, plain), cvta and isspacep.
std::optional<CallStatus> FunctionCompiler::DecodeConversions(const ptx::Instruction& in, const Mods& m, Inst& inst) {
  const std::string& op = in.opcode;
  auto need_type = [&]() { return NeedType(in, inst); };
  if (op == "cvt" && !in.modifiers.empty() && in.modifiers[0] == "pack") {
    // cvt.pack.sat.convertType.s32[.b32]: the modifiers in that order (the narrow types are no PTX register types).
    static const std::unordered_map<std::string, std::pair<uint8_t, bool>> kNarrow = {
        {"u16", {16, false}}, {"s16", {16, true}}, {"u8", {8, false}}, {"s8", {8, true}},
        {"u4", {4, false}},   {"s4", {4, true}},   {"u2", {2, false}}, {"s2", {2, true}}};
    const std::vector<std::string>& x = in.modifiers;
    if (x.size() < 4 || x[1] != "sat" || !kNarrow.count(x[2]) || x[3] != "s32") return Unsupported(in);
    const auto [bits, is_signed] = kNarrow.at(x[2]);
    const bool with_c = bits != 16;
    if (x.size() != (with_c ? 5u : 4u) || (with_c && x[4] != "b32")) return Unsupported(in);
    inst.op = Op::kCvtPack;
    inst.mode = bits;
    inst.mode2 = is_signed ? 1 : 0;
    if (CallStatus s = Operands(in, with_c ? 4 : 3); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[0], Type::kB32, in.line, &inst.d[0]); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[1], Type::kS32, in.line, &inst.s[0]); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[2], Type::kS32, in.line, &inst.s[1]); !s.ok()) return s;
    if (with_c) return Resolve(in.operands[3], Type::kB32, in.line, &inst.s[2]);
    inst.s[2].kind = Src::kImm;
    inst.s[2].imm = 0;
    return CallStatus::Ok();
  }

  if (op == "cvt" && (m.flags.count("e4m3x2") || m.flags.count("e5m2x2"))) {
    // Two f32 to two fp8 (a to the upper byte, b to the lower), or two fp8 to an f16x2 (exact): rounding to
    // nearest even, and towards fp8 with .satfinite, which the ISA requires (out of range: the largest finite).
    const bool e5m2 = m.flags.count("e5m2x2") > 0;
    inst.mode = static_cast<uint8_t>((e5m2 ? kFp8E5M2 : 0) | (m.flags.count("relu") ? kFp8Relu : 0));
    for (const auto& f : m.flags) {
      if (f != "e4m3x2" && f != "e5m2x2" && f != "satfinite" && f != "relu") return Unsupported(in, "modifier ." + f);
    }
    if (m.round != Round::kRn || m.flags.count("e4m3x2") + m.flags.count("e5m2x2") != 1) return Unsupported(in);
    if (m.types.size() == 1 && m.types[0] == Type::kF32 && m.flags.count("satfinite")) {
      inst.op = Op::kCvtToFp8x2;
      if (CallStatus s = Operands(in, 3); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], Type::kB16, in.line, &inst.d[0]); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[1], Type::kF32, in.line, &inst.s[0]); !s.ok()) return s;
      return Resolve(in.operands[2], Type::kF32, in.line, &inst.s[1]);
    }
    if (m.types.size() == 1 && m.types[0] == Type::kF16x2 && !m.flags.count("satfinite")) {
      inst.op = Op::kCvtFromFp8x2;
      if (CallStatus s = Operands(in, 2); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], Type::kB32, in.line, &inst.d[0]); !s.ok()) return s;
      return Resolve(in.operands[1], Type::kB16, in.line, &inst.s[0]);
    }
    return Unsupported(in, "this fp8 conversion");
  }

  if (op == "cvt") {
    inst.op = Op::kCvt;
    if (m.types.size() != 2) return Err(in.line, "cvt needs a destination and a source type");
    inst.type = m.types[0];
    inst.type2 = m.types[1];
    auto packed = [](Type t) { return t == Type::kF16x2 || t == Type::kBF16x2 || t == Type::kB128; };
    if ((inst.type == Type::kF16x2 || inst.type == Type::kBF16x2) && inst.type2 == Type::kF32) {
      // cvt.rn{.relu}{.satfinite}.f16x2.f32 d, a, b: a to the upper half, b to the lower.
      if (m.flags.count("satfinite")) inst.mode = 1;
      if (CallStatus s = Operands(in, 3); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], Type::kB32, in.line, &inst.d[0]); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[1], Type::kF32, in.line, &inst.s[0]); !s.ok()) return s;
      return Resolve(in.operands[2], Type::kF32, in.line, &inst.s[1]);
    }
    if (packed(inst.type) || packed(inst.type2)) return Unsupported(in, "this packed conversion");
    if (m.flags.count("satfinite")) inst.mode = 1;  // cvt.rn.satfinite.{f16,bf16}.{f32,f64}.
    return Simple(in, inst, 1, inst.type2);
  }

  if (op == "cvta" || op == "isspacep") {
    inst.op = op == "isspacep" ? Op::kIsspacep : (m.flags.count("to") ? Op::kCvtaTo : Op::kCvta);
    if (!m.has_space) return Err(in.line, "'" + Joined(in) + "' needs a state space");
    inst.space2 = m.space;
    if (op == "isspacep") {
      if (CallStatus s = Operands(in, 2); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], Type::kPred, in.line, &inst.d[0]); !s.ok()) return s;
      return Resolve(in.operands[1], Type::kU64, in.line, &inst.s[0]);
    }
    if (CallStatus s = need_type(); !s.ok()) return s;
    return Simple(in, inst, 1);
  }

  return std::nullopt;
}

// ld, ldu, st, atom and red.
std::optional<CallStatus> FunctionCompiler::DecodeMemory(const ptx::Instruction& in, const Mods& m, Inst& inst) {
  const std::string& op = in.opcode;
  auto need_type = [&]() { return NeedType(in, inst); };
  if (op == "ld" || op == "ldu" || op == "st") {
    inst.op = op == "st" ? Op::kSt : Op::kLd;
    if (CallStatus s = need_type(); !s.ok()) return s;
    if (inst.type == Type::kB128) return Unsupported(in, "128-bit loads and stores");
    if (m.flags.count("volatile")) inst.flags |= kVolatile;
    // .L2::cache_hint: a third operand, the cache policy (createpolicy's), a hint the emulator has no cache for.
    const bool cache_hint = HasCacheHint(in);
    if (CallStatus s = Operands(in, cache_hint ? 3 : 2); !s.ok()) return s;
    if (cache_hint) {
      Operand policy;
      if (CallStatus s = Resolve(in.operands[2], Type::kB64, in.line, &policy); !s.ok()) return s;
    }
    const auto& addr = in.operands[op == "st" ? 0 : 1];
    const auto& val = in.operands[op == "st" ? 1 : 0];
    if (CallStatus s = ResolveAddress(addr, in.line, inst); !s.ok()) return s;
    MarkAddressWidth(inst);
    Operand* vals = op == "st" ? inst.s : inst.d;
    if (inst.vec > 1) {
      if (val.kind != ptx::Operand::Kind::kVector || val.elements.size() != inst.vec) {
        return Err(in.line, "'" + Joined(in) + "' needs a vector of " + std::to_string(inst.vec));
      }
      for (size_t i = 0; i < inst.vec; ++i) {
        if (CallStatus s = Resolve(val.elements[i], inst.type, in.line, &vals[i]); !s.ok()) return s;
      }
      return CallStatus::Ok();
    }
    return Resolve(val, inst.type, in.line, &vals[0]);
  }

  if (op == "atom" || op == "red") {
    inst.op = op == "atom" ? Op::kAtom : Op::kRed;
    if (CallStatus s = need_type(); !s.ok()) return s;
    static const std::unordered_map<std::string, uint8_t> kAtomOps = {
        {"add", 0}, {"min", 1}, {"max", 2}, {"inc", 3}, {"dec", 4}, {"and", 5}, {"or", 6}, {"xor", 7},
        {"exch", 8}, {"cas", 9}};
    if (!ModeFromFlags(m, kAtomOps, &inst.mode)) return Err(in.line, "'" + Joined(in) + "' has no operation");
    int size = ptx::TypeSize(inst.type);
    if (size == 2) {
      // 16-bit atomics exist for add.noftz.f16/bf16 and cas/exch.b16.
      bool ok = (inst.mode == 0 && (inst.type == Type::kF16 || inst.type == Type::kBF16)) ||
                ((inst.mode == 8 || inst.mode == 9) && (inst.type == Type::kB16 || inst.type == Type::kU16));
      if (!ok) return Unsupported(in, "this 16-bit atomic");
    } else if (size != 4 && size != 8) {
      return Unsupported(in, "atomics of this size");
    }
    if (m.vec > 1) return Unsupported(in, "vector atomics");
    size_t nsrc = inst.mode == 9 ? 2 : 1;
    size_t first = 0;
    if (inst.op == Op::kAtom) {
      if (CallStatus s = Operands(in, nsrc + 2); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[0], inst.type, in.line, &inst.d[0]); !s.ok()) return s;
      first = 1;
    } else if (CallStatus s = Operands(in, nsrc + 1); !s.ok()) {
      return s;
    }
    if (CallStatus s = ResolveAddress(in.operands[first], in.line, inst); !s.ok()) return s;
    MarkAddressWidth(inst);
    for (size_t i = 0; i < nsrc; ++i) {
      if (CallStatus s = Resolve(in.operands[first + 1 + i], inst.type, in.line, &inst.s[i]); !s.ok()) return s;
    }
    return CallStatus::Ok();
  }

  return std::nullopt;
}

// Branches, calls, returns, exit, trap and barriers.
std::optional<CallStatus> FunctionCompiler::DecodeControl(const ptx::Instruction& in, const Mods& m, Inst& inst) {
  const std::string& op = in.opcode;
  if (op == "brx") {
    // brx.idx{.uni} index, tlist: a jump through a table declared with .branchtargets.
    if (!m.flags.count("idx")) return Unsupported(in, "brx without .idx");
    inst.op = Op::kBrxIdx;
    if (CallStatus s = Operands(in, 2); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[0], Type::kU32, in.line, &inst.s[0]); !s.ok()) return s;
    auto list = f_.branch_targets.find(in.operands[1].name);
    if (list == f_.branch_targets.end()) {
      return Err(in.line, "brx.idx names '" + in.operands[1].name + "', which is no .branchtargets list");
    }
    std::vector<uint32_t> table;
    for (const std::string& label : list->second) {
      auto it = labels_.find(label);
      if (it == labels_.end()) return Err(in.line, "unknown label " + label + " in .branchtargets " + list->first);
      table.push_back(static_cast<uint32_t>(it->second));
    }
    inst.target = static_cast<int32_t>(out_.jump_tables.size());
    out_.jump_tables.push_back(std::move(table));
    return CallStatus::Ok();
  }

  if (op == "bra") {
    inst.op = Op::kBra;
    if (CallStatus s = Operands(in, 1); !s.ok()) return s;
    auto it = labels_.find(in.operands[0].name);
    if (it == labels_.end()) return Err(in.line, "unknown label " + in.operands[0].name);
    inst.target = it->second;
    return CallStatus::Ok();
  }

  if (op == "call") {
    inst.op = Op::kCall;
    // Forms: call f; call f, (args); call (rets), f; call (rets), f, (args); call (rets), %rd, (args), proto.
    size_t i = 0;
    const ptx::Operand* rets = nullptr;
    const ptx::Operand* args = nullptr;
    if (i < in.operands.size() && in.operands[i].kind == ptx::Operand::Kind::kList) rets = &in.operands[i++];
    if (i >= in.operands.size()) return Err(in.line, "call without a callee");
    const ptx::Operand& callee = in.operands[i++];
    if (i < in.operands.size() && in.operands[i].kind == ptx::Operand::Kind::kList) args = &in.operands[i++];
    auto reg = regs_.find(callee.name);
    Symbol sym;
    if (reg != regs_.end()) {
      inst.target = -1;
      inst.s[0].kind = Src::kReg;
      inst.s[0].reg = reg->second;
    } else if (LookupSymbol(callee.name, &sym) && sym.kind == Symbol::kFunction) {
      inst.target = static_cast<int32_t>(sym.value);
    } else {
      return Err(in.line, "call of unknown function '" + callee.name + "'");
    }
    inst.call_args = static_cast<uint32_t>(out_.call_operands.size());
    auto add_list = [&](const ptx::Operand* list, uint16_t* count) -> CallStatus {
      if (!list) return CallStatus::Ok();
      for (const auto& e : list->elements) {
        Operand o;
        if (CallStatus s = Resolve(e, Type::kB64, in.line, &o); !s.ok()) return s;
        out_.call_operands.push_back(o);
        ++*count;
      }
      return CallStatus::Ok();
    };
    if (CallStatus s = add_list(rets, &inst.nrets); !s.ok()) return s;
    if (CallStatus s = add_list(args, &inst.nargs); !s.ok()) return s;
    return CallStatus::Ok();
  }

  if (op == "ret") {
    inst.op = Op::kRet;
    return CallStatus::Ok();
  }
  if (op == "exit") {
    inst.op = Op::kExit;
    return CallStatus::Ok();
  }
  if (op == "trap" || op == "brkpt") {
    inst.op = Op::kTrap;
    inst.mode = op == "brkpt" ? 1 : 0;
    return CallStatus::Ok();
  }

  if (op == "bar" || op == "barrier") {
    // bar.sync / barrier.sync (.aligned) a{, b}; bar.arrive a, b; bar.red.popc.u32 d, a{, b}, {!}p;
    // bar.warp.sync mask.
    if (m.flags.count("warp")) {
      inst.op = Op::kWarpSync;
      if (CallStatus s = Operands(in, 1); !s.ok()) return s;
      return Resolve(in.operands[0], Type::kB32, in.line, &inst.s[0]);
    }
    if (m.flags.count("red")) {
      inst.op = Op::kBarRed;
      if (m.flags.count("popc")) inst.mode = 0;
      else if (m.flags.count("and")) inst.mode = 1;
      else if (m.flags.count("or")) inst.mode = 2;
      else return Err(in.line, "bar.red needs .popc, .and or .or");
      if (in.operands.size() != 3 && in.operands.size() != 4) return Err(in.line, "bar.red takes 3 or 4 operands");
      Type dt = inst.mode == 0 ? Type::kU32 : Type::kPred;
      if (CallStatus s = Resolve(in.operands[0], dt, in.line, &inst.d[0]); !s.ok()) return s;
      if (CallStatus s = Resolve(in.operands[1], Type::kU32, in.line, &inst.s[0]); !s.ok()) return s;
      if (in.operands.size() == 4) {
        if (CallStatus s = Resolve(in.operands[2], Type::kU32, in.line, &inst.s[1]); !s.ok()) return s;
      }
      return Resolve(in.operands.back(), Type::kPred, in.line, &inst.s[2]);
    }
    inst.op = m.flags.count("arrive") ? Op::kBarArrive : Op::kBar;
    if (in.operands.empty() || in.operands.size() > 2) return Err(in.line, "bar takes 1 or 2 operands");
    if (CallStatus s = Resolve(in.operands[0], Type::kU32, in.line, &inst.s[0]); !s.ok()) return s;
    if (in.operands.size() == 2) return Resolve(in.operands[1], Type::kU32, in.line, &inst.s[1]);
    return CallStatus::Ok();
  }

  return std::nullopt;
}

// Warp collectives (shfl, vote, match, redux...), the remaining instructions and textures.
std::optional<CallStatus> FunctionCompiler::DecodeWarpAndOther(const ptx::Instruction& in, const Mods& m, Inst& inst) {
  const std::string& op = in.opcode;
  auto need_type = [&]() { return NeedType(in, inst); };
  if (op == "shfl") {
    inst.op = Op::kShfl;
    if (!m.flags.count("sync")) return Unsupported(in, "shfl without .sync (removed on sm_70+)");
    static const std::unordered_map<std::string, uint8_t> kShflModes = {{"up", 0}, {"down", 1}, {"bfly", 2}, {"idx", 3}};
    if (!ModeFromFlags(m, kShflModes, &inst.mode)) return Err(in.line, "shfl needs .up, .down, .bfly or .idx");
    inst.type = Type::kB32;
    if (CallStatus s = Operands(in, 5); !s.ok()) return s;
    if (CallStatus s = ResolveDestinations(in.operands[0], Type::kB32, Type::kPred, in.line, inst); !s.ok()) return s;
    for (int i = 0; i < 4; ++i) {
      if (CallStatus s = Resolve(in.operands[i + 1], Type::kB32, in.line, &inst.s[i]); !s.ok()) return s;
    }
    return CallStatus::Ok();
  }

  if (op == "vote") {
    inst.op = Op::kVote;
    if (!m.flags.count("sync")) return Unsupported(in, "vote without .sync (removed on sm_70+)");
    static const std::unordered_map<std::string, uint8_t> kVoteModes = {{"all", 0}, {"any", 1}, {"uni", 2}, {"ballot", 3}};
    if (!ModeFromFlags(m, kVoteModes, &inst.mode)) return Err(in.line, "vote needs .all, .any, .uni or .ballot");
    if (CallStatus s = Operands(in, 3); !s.ok()) return s;
    Type dt = inst.mode == 3 ? Type::kB32 : Type::kPred;
    if (CallStatus s = Resolve(in.operands[0], dt, in.line, &inst.d[0]); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[1], Type::kPred, in.line, &inst.s[0]); !s.ok()) return s;
    return Resolve(in.operands[2], Type::kB32, in.line, &inst.s[1]);
  }

  if (op == "match") {
    inst.op = Op::kMatch;
    if (CallStatus s = need_type(); !s.ok()) return s;
    inst.mode = m.flags.count("all") ? 1 : 0;
    if (!m.flags.count("all") && !m.flags.count("any")) return Err(in.line, "match needs .any or .all");
    if (CallStatus s = Operands(in, 3); !s.ok()) return s;
    if (CallStatus s = ResolveDestinations(in.operands[0], Type::kB32, Type::kPred, in.line, inst); !s.ok()) return s;
    if (CallStatus s = Resolve(in.operands[1], inst.type, in.line, &inst.s[0]); !s.ok()) return s;
    return Resolve(in.operands[2], Type::kB32, in.line, &inst.s[1]);
  }

  if (op == "redux") {
    inst.op = Op::kRedux;
    if (CallStatus s = need_type(); !s.ok()) return s;
    static const std::unordered_map<std::string, uint8_t> kOps = {
        {"add", 0}, {"min", 1}, {"max", 2}, {"and", 3}, {"or", 4}, {"xor", 5}};
    if (!ModeFromFlags(m, kOps, &inst.mode)) return Err(in.line, "redux needs an operation");
    if (IsFloat(inst.type)) return Unsupported(in, "floating-point redux");
    return Simple(in, inst, 2);
  }

  if (op == "activemask") {
    inst.op = Op::kActivemask;
    if (CallStatus s = Operands(in, 1); !s.ok()) return s;
    return Resolve(in.operands[0], Type::kB32, in.line, &inst.d[0]);
  }

  if (op == "membar" || op == "fence") {
    if (m.flags.count("proxy")) {
      inst.op = Op::kFence;  // Proxy fences order nothing our interpreter reorders.
      return CallStatus::Ok();
    }
    inst.op = Op::kFence;
    return CallStatus::Ok();
  }
  if (op == "nanosleep") {
    inst.op = Op::kNanosleep;
    return CallStatus::Ok();
  }
  if (op == "griddepcontrol") {
    // Programmatic dependent launch. The emulated device starts a kernel only after the kernels before it in its
    // stream order have finished and their writes are visible, so .wait has nothing to wait for, and
    // .launch_dependents (allowing the next kernel to start early) is a hint it need not take.
    if (m.flags.size() != 1 || !(m.flags.count("wait") || m.flags.count("launch_dependents"))) {
      return Unsupported(in);
    }
    if (!in.operands.empty()) return Err(in.line, "griddepcontrol takes no operands");
    inst.op = Op::kNop;
    return CallStatus::Ok();
  }
  if (op == "prefetch" || op == "prefetchu" || op == "discard" || op == "applypriority" ||
      op == "createpolicy") {
    if (op == "createpolicy") {
      // Cache-policy descriptors are hints: yield 0.
      inst.op = Op::kMov;
      inst.type = Type::kB64;
      if (in.operands.empty()) return Err(in.line, "createpolicy needs a destination");
      if (CallStatus s = Resolve(in.operands[0], Type::kB64, in.line, &inst.d[0]); !s.ok()) return s;
      inst.s[0].kind = Src::kImm;
      inst.s[0].imm = 0;
      return CallStatus::Ok();
    }
    inst.op = Op::kNop;  // Cache hints only.
    return CallStatus::Ok();
  }
  if (op == "tex" || op == "tld4" || op == "suld" || op == "sust" || op == "txq" || op == "suq" || op == "sured") {
    return DecodeTexture(in, inst, m);
  }
  return std::nullopt;
}


#include "emu/compile_tex.inc"

CallResult<Program> ModuleCompiler::Run() {
  prog_.version_major = m_.version_major;
  prog_.version_minor = m_.version_minor;
  if (m_.target.size() > 3 && m_.target.compare(0, 3, "sm_") == 0) {
    int target = 0;
    for (size_t i = 3; i < m_.target.size() && i < 7 && std::isdigit(static_cast<unsigned char>(m_.target[i])); ++i) {
      target = target * 10 + (m_.target[i] - '0');
    }
    prog_.target = target;
  }
  // Functions first, so variables' initialisers and code can refer to them.
  for (const auto& f : m_.functions) {
    auto it = prog_.function_index.find(f.name);
    if (it == prog_.function_index.end()) {
      int index = static_cast<int>(prog_.functions.size());
      prog_.function_index[f.name] = index;
      prog_.functions.emplace_back();
      prog_.functions.back().name = f.name;
      module_symbols_[f.name] = {Symbol::kFunction, static_cast<uint64_t>(index)};
    }
  }
  // Shared memory, laid out as ptxas lays it out: each kernel's blocks hold only the variables the kernel and the
  // functions it calls use, so that variables of kernels that never run together share offsets (a library's module
  // holds hundreds of kernels, each with its own temporary storage: their sum is no kernel's). A variable used by a
  // function that several kernels call has one offset for all of them. Dynamic (extern unsized) shared memory
  // starts past the largest kernel's variables.
  auto too_much_shared = [](int line, const std::string& what, uint64_t bytes, uint64_t limit) {
    return Err(line, what + " takes " + std::to_string(bytes) + " bytes of static shared memory; " +
                         (limit == kMaxStaticSharedBytes
                              ? "a GPU allows at most " + KiB(limit) + " per block (more only as dynamic shared memory)"
                              : "the emulator allows at most " + KiB(limit) + " per module"));
  };
  struct SharedVar {
    const ptx::Variable* v;
    int owner;  // The function that declares it; -1: module scope.
    uint64_t offset;
  };
  std::vector<SharedVar> shared_vars;
  std::map<std::string, size_t> module_shared_index;
  for (const auto& v : m_.globals) {
    if (v.space != ptx::Space::kShared) continue;
    if (v.array_size < 0 || (v.is_extern && v.ByteSize() == 0)) {
      extern_shared_.push_back({&v, 0});
      continue;
    }
    if (v.ByteSize() > kMaxStaticSharedBytes) {
      return too_much_shared(v.line, "'" + v.name + "'", v.ByteSize(), kMaxStaticSharedBytes);
    }
    module_shared_index[v.name] = shared_vars.size();
    shared_vars.push_back({&v, -1, 0});
  }
  const size_t nfuncs = prog_.functions.size();
  // What each function uses directly: module-scope shared variables, and functions (called, or their address
  // taken); and whether it calls through a register (which may reach any function).
  std::vector<std::vector<size_t>> uses_shared(nfuncs);
  std::vector<std::vector<int>> calls(nfuncs);
  std::vector<bool> calls_indirectly(nfuncs, false);
  std::vector<int> entries;  // Function indices of the kernels.
  for (const auto& f : m_.functions) {
    const size_t fi = static_cast<size_t>(prog_.function_index[f.name]);
    if (f.is_entry) entries.push_back(static_cast<int>(fi));
    std::function<void(const ptx::Operand&)> visit = [&](const ptx::Operand& o) {
      if (!o.name.empty()) {
        if (auto it = module_shared_index.find(o.name); it != module_shared_index.end()) {
          uses_shared[fi].push_back(it->second);
        } else if (auto fit = prog_.function_index.find(o.name); fit != prog_.function_index.end()) {
          calls[fi].push_back(fit->second);
        }
      }
      for (const auto& e : o.elements) visit(e);
    };
    for (const auto& in : f.body) {
      for (const auto& o : in.operands) {
        visit(o);
        if (in.opcode == "call" && o.kind == ptx::Operand::Kind::kRegister && !o.name.empty() && o.name[0] == '%') {
          calls_indirectly[fi] = true;
        }
      }
    }
    for (const auto& v : f.locals) {
      if (v.space != ptx::Space::kShared) continue;
      if (v.array_size < 0) {
        extern_shared_.push_back({&v, 0});
        function_shared_[{static_cast<int>(fi), v.name}] = 0;  // Patched below.
        continue;
      }
      if (v.ByteSize() > kMaxStaticSharedBytes) {
        return too_much_shared(v.line, "'" + v.name + "'", v.ByteSize(), kMaxStaticSharedBytes);
      }
      shared_vars.push_back({&v, static_cast<int>(fi), 0});
    }
  }
  // Which kernels use each variable, a bitset over the kernels. A module too big for that to be cheap (thousands
  // of kernels and variables: a hostile one) has every variable used by every kernel, laid end to end.
  const size_t words = (entries.size() + 63) / 64;
  constexpr uint64_t kLayoutBudget = uint64_t{1} << 24;  // Kernels x (variables + functions) walked at most.
  const bool separate = uint64_t{entries.size()} * (shared_vars.size() + nfuncs) <= kLayoutBudget;
  std::vector<std::vector<uint64_t>> used_by(separate ? shared_vars.size() : 0, std::vector<uint64_t>(words, 0));
  if (separate) {
    std::vector<bool> reached(nfuncs);
    std::vector<int> stack;
    for (size_t k = 0; k < entries.size(); ++k) {
      std::fill(reached.begin(), reached.end(), false);
      stack.assign(1, entries[k]);
      reached[static_cast<size_t>(entries[k])] = true;
      bool everything = false;
      while (!stack.empty() && !everything) {
        const size_t f = static_cast<size_t>(stack.back());
        stack.pop_back();
        everything = calls_indirectly[f];
        for (int g : calls[f]) {
          if (!reached[static_cast<size_t>(g)]) {
            reached[static_cast<size_t>(g)] = true;
            stack.push_back(g);
          }
        }
      }
      if (everything) std::fill(reached.begin(), reached.end(), true);
      const uint64_t bit = uint64_t{1} << (k % 64);
      for (size_t f = 0; f < nfuncs; ++f) {
        if (!reached[f]) continue;
        for (size_t i : uses_shared[f]) used_by[i][k / 64] |= bit;
      }
      for (size_t i = 0; i < shared_vars.size(); ++i) {
        const int owner = shared_vars[i].owner;
        if (owner >= 0 && reached[static_cast<size_t>(owner)]) used_by[i][k / 64] |= bit;
      }
    }
  }
  auto together = [&](size_t a, size_t b) {
    if (!separate) return true;
    for (size_t w = 0; w < words; ++w) {
      if (used_by[a][w] & used_by[b][w]) return true;
    }
    return false;
  };
  // Each variable at the lowest offset where it overlaps none placed before it that a kernel uses with it.
  uint64_t shared = 0;
  for (size_t i = 0; i < shared_vars.size(); ++i) {
    SharedVar& sv = shared_vars[i];
    const uint64_t align = VarAlign(*sv.v), size = sv.v->ByteSize();
    uint64_t offset = separate ? 0 : AlignUp(shared, align);
    for (bool moved = separate; moved;) {
      moved = false;
      for (size_t j = 0; j < i; ++j) {
        const SharedVar& w = shared_vars[j];
        const uint64_t wend = w.offset + w.v->ByteSize();
        if (offset < wend && w.offset < offset + size && together(i, j)) {
          offset = AlignUp(wend, align);
          moved = true;
        }
      }
    }
    sv.offset = offset;
    shared = std::max(shared, offset + size);
    if (shared > kMaxModuleSharedBytes) return too_much_shared(sv.v->line, "the module", shared, kMaxModuleSharedBytes);
    if (sv.owner < 0) {
      module_symbols_[sv.v->name] = {Symbol::kShared, offset};
    } else {
      function_shared_[{sv.owner, sv.v->name}] = offset;
    }
  }
  // Each kernel's static shared memory: what a GPU gives each of its blocks, at most 48 KiB.
  for (size_t k = 0; k < entries.size(); ++k) {
    Function& kernel = prog_.functions[static_cast<size_t>(entries[k])];
    uint64_t footprint = 0;
    for (size_t i = 0; i < shared_vars.size(); ++i) {
      if (!separate || (used_by[i][k / 64] >> (k % 64) & 1) != 0) {
        footprint = std::max(footprint, shared_vars[i].offset + shared_vars[i].v->ByteSize());
      }
    }
    if (footprint > kMaxStaticSharedBytes) {
      return too_much_shared(0, "kernel '" + kernel.name + "'", footprint, kMaxStaticSharedBytes);
    }
    kernel.static_shared_bytes = static_cast<uint32_t>(footprint);
  }
  uint64_t dynamic_base = AlignUp(shared, 16);
  prog_.static_shared_bytes = static_cast<uint32_t>(dynamic_base);
  for (auto& [v, off] : extern_shared_) {
    module_symbols_[v->name] = {Symbol::kShared, dynamic_base};
  }
  for (auto& [key, off] : function_shared_) {
    if (off == 0) {
      // Function-scope unsized extern shared arrays alias the dynamic area too.
      for (const auto& f : m_.functions) {
        if (prog_.function_index[f.name] != key.first) continue;
        for (const auto& v : f.locals) {
          if (v.name == key.second && v.array_size < 0) off = dynamic_base;
        }
      }
    }
  }
  // Global and constant variables in device memory.
  std::vector<const ptx::Variable*> placed;
  for (const auto& v : m_.globals) {
    if (v.space != ptx::Space::kGlobal && v.space != ptx::Space::kConst) {
      if (v.space == ptx::Space::kShared) continue;
      if (v.space == ptx::Space::kTex) {
        return Err(v.line, "texture, surface or sampler reference '" + v.name + "' (.texref/.surfref/.samplerref): "
                           "references were removed in CUDA 12 and are not supported; use texture and surface "
                           "objects");
      }
      return Err(v.line, "module-scope variable of an unsupported state space: " + v.name);
    }
    if (v.is_extern && !v.has_initializer && v.ByteSize() == 0) {
      return Err(v.line, "external variable '" + v.name + "' is not defined in this module (linking is not supported)");
    }
    if (module_symbols_.count(v.name) && prog_.globals.count(v.name)) continue;  // .common duplicates.
    uint64_t size = std::max<uint64_t>(v.ByteSize(), 1);
    uint64_t addr = alloc_.Allocate(size, std::max<uint64_t>(VarAlign(v), 8));
    if (addr == 0) {
      return CallStatus(cu::kOutOfMemory, "out of device memory for module variable " + v.name);
    }
    prog_.globals[v.name] = {addr, v.ByteSize(), v.space};
    module_symbols_[v.name] = {Symbol::kGlobalAddr, addr};
    placed.push_back(&v);
  }
  // The variable is zeroed in device memory, then what its initialiser wrote goes over it: the host holds no copy
  // of the whole variable, only the initialiser's runs of bytes (as long as its text).
  for (const ptx::Variable* v : placed) {
    uint64_t addr = prog_.globals[v->name].address;
    const uint64_t size = std::max<uint64_t>(v->ByteSize(), 1);
    alloc_.Zero(addr, size);
    if (!v->has_initializer) continue;
    for (const auto& run : v->init.runs) {
      if (run.offset >= size) continue;
      alloc_.Write(addr + run.offset, run.bytes.data(), std::min<uint64_t>(run.bytes.size(), size - run.offset));
    }
    for (const auto& ref : v->init.symbols) {
      auto it = module_symbols_.find(ref.symbol);
      if (it == module_symbols_.end()) return Err(v->line, "initialiser refers to unknown symbol " + ref.symbol);
      uint64_t value = it->second.value + static_cast<uint64_t>(ref.addend);
      if (it->second.kind == Symbol::kFunction) value = kFunctionAddressBase + it->second.value;
      if (ref.offset > size || size - ref.offset < 8) continue;
      alloc_.Write(addr + ref.offset, &value, 8);
    }
  }
  // Code.
  for (const auto& f : m_.functions) {
    int index = prog_.function_index[f.name];
    Function& out = prog_.functions[index];
    // A function without a body is a declaration (a prototype, or an .extern such as vprintf).
    if (f.is_extern || (f.body.empty() && !f.is_entry)) {
      if (!out.defined && out.native == Native::kNone) {
        if (f.name == "vprintf") out.native = Native::kVprintf;
        else if (f.name == "malloc") out.native = Native::kMalloc;
        else if (f.name == "free") out.native = Native::kFree;
        else if (f.name == "__assertfail") out.native = Native::kAssertFail;
      }
      continue;
    }
    if (out.defined) continue;
    out.is_entry = f.is_entry;
    out.defined = true;
    if (CallStatus s = BlockBound(f, &out.bound_threads); !s.ok()) return s;
    FunctionCompiler fc(*this, f, out, index);
    if (CallStatus s = fc.Run(); !s.ok()) return s;
  }
  // Calls must land somewhere.
  for (auto& f : prog_.functions) {
    prog_.needs_local = prog_.needs_local || f.uses_local;
    for (const auto& in : f.code) {
      if (in.op == Op::kCall) prog_.has_calls = true;
      for (const Operand& o : in.s) {
        if (o.kind == Src::kSpecial && o.reg >= static_cast<uint32_t>(Special::kReservedSmemBegin) &&
            o.reg <= static_cast<uint32_t>(Special::kReservedSmemOffset1)) {
          prog_.uses_reserved_shared = true;
        }
      }
      if (in.op != Op::kCall || in.target < 0) continue;
      const Function& callee = prog_.functions[static_cast<size_t>(in.target)];
      // A device-side launch, whether libcudadevrt's PTX was linked in or not, is refused here: declared, it would
      // fail only when reached; defined, it would launch nothing.
      if (IsDeviceLaunchFunction(callee.name) && !IsDeviceLaunchFunction(f.name)) {
        return CallStatus(cu::kNotSupported, DeviceLaunchRefusal(f.name, callee.name));
      }
      if (!callee.defined && callee.native == Native::kNone) {
        // Kernels that never reach the call still run, as on a GPU; one that does fails naming the function.
        prog_.functions[static_cast<size_t>(in.target)].native = Native::kUndefined;
      }
    }
  }
  prog_.needs_local = prog_.needs_local || prog_.has_calls;
  return std::move(prog_);
}

}  // namespace

CallResult<Program> Compile(const ptx::Module& module, GlobalAllocator& allocator) {
  ModuleCompiler mc(module, allocator);
  return mc.Run();
}

}  // namespace gpupool::emu::internal
