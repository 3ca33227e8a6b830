#include "emu/exec.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <thread>

#include "emu/fp.h"
#include "emu/printf.h"
#include "emu/texture.h"

namespace gpupool::emu::internal {
namespace {

constexpr uint32_t kLocalStackBytes = 16 * 1024;  // Per thread, like a generous cudaLimitStackSize.
constexpr uint32_t kParamStackBytes = 8 * 1024;   // Call parameters per thread, beyond the kernel's own.

// Bytes per type, indexed by ptx::Type (kept in step with the enum; checked in Execute).
constexpr uint8_t kTypeBytes[] = {0, 1, 2, 4, 8, 16, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 2, 4, 4, 8, 1};
inline int Size(Type t) { return kTypeBytes[static_cast<int>(t)]; }
bool IsSignedT(Type t) { return t == Type::kS8 || t == Type::kS16 || t == Type::kS32 || t == Type::kS64; }
bool IsFloatT(Type t) { return t == Type::kF16 || t == Type::kBF16 || t == Type::kF32 || t == Type::kF64; }

inline uint64_t MaskBytes(int bytes) { return bytes >= 8 ? ~0ull : (1ull << (bytes * 8)) - 1; }

// Sign-extends the low `bytes` of v.
inline int64_t Sext(uint64_t v, int bytes) {
  if (bytes >= 8) return static_cast<int64_t>(v);
  int shift = 64 - bytes * 8;
  return static_cast<int64_t>(v << shift) >> shift;
}

// Reads an integer operand as int64 (signed types sign-extended, others zero-extended from the type's width).
inline int64_t AsInt(uint64_t v, Type t) {
  int s = Size(t);
  return IsSignedT(t) ? Sext(v, s) : static_cast<int64_t>(v & MaskBytes(s));
}

constexpr uint32_t kWarpLanes = 32;

// One lane's registers. A warp keeps its lanes' registers side by side, register by register ([register][lane]),
// so that an instruction the whole warp runs reads and writes each operand as one contiguous row of 32 lanes (which
// the compiler turns into vector instructions); a lane sees its own column, kWarpLanes words apart.
class LaneRegs {
 public:
  LaneRegs() = default;
  explicit LaneRegs(uint64_t* column) : column_(column) {}
  uint64_t& operator[](size_t i) const { return column_[i * kWarpLanes]; }
  explicit operator bool() const { return column_ != nullptr; }

 private:
  uint64_t* column_ = nullptr;
};

struct Frame {
  int32_t fn = 0;
  uint32_t pc = 0;
  uint32_t reg_base = 0;
  uint32_t local_base = 0;   // Offset in the thread's local window.
  uint8_t* param_base = nullptr;
  uint32_t param_size = 0;
};

enum class ThreadState : uint8_t { kRunning, kBarrier, kCollective, kExited };

struct Thread {
  uint32_t tid[3] = {0, 0, 0};
  uint32_t linear = 0, lane = 0, warp = 0;
  ThreadState state = ThreadState::kRunning;
  std::vector<Frame> frames;
  uint32_t reg_top = 0;      // Registers in use in this lane's column of its warp's register file (all frames).
  uint8_t* local = nullptr;  // This thread's local window.
  uint32_t local_top = 0;
  std::span<uint8_t> param_stack;  // In the CTA context's slab.
  uint32_t param_top = 0;
  bool carry = false;
  uint32_t barrier = 0;       // Waiting on this barrier id.
  bool red_pred = false;      // bar.red: this thread's predicate.
};

struct Barrier {
  uint32_t arrived = 0;   // Threads that arrived (waiting or bar.arrive).
  uint32_t expected = 0;  // 0: every thread not exited.
  std::vector<uint32_t> waiting;
  uint32_t popc = 0;
  bool all = true, any = false;
};

struct Fault {
  CallStatus status;
};

// Zeroed memory from calloc, kept and reused while big enough. Large blocks usually come as fresh pages from the
// kernel, so pages a kernel never touches (most of a 16 KiB local stack) cost nothing and never become resident.
class Slab {
 public:
  uint8_t* Reserve(size_t bytes) {
    if (bytes > bytes_) {
      memory_.reset(static_cast<uint8_t*>(std::calloc(bytes, 1)));
      if (!memory_) throw std::bad_alloc();
      bytes_ = bytes;
    }
    return memory_.get();
  }
  size_t bytes() const { return bytes_; }
  void Release() {
    memory_.reset();
    bytes_ = 0;
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> memory_;
  size_t bytes_ = 0;
};

// What one worker keeps from one launch to the next for the CTAs it runs, so that a launch of a block shape seen
// before allocates nothing: the Thread objects with their registers and call frames, their stacks, shared memory.
// A CTA starts as before: shared memory zeroed, the kernel's parameters copied in and its .param variables zeroed.
// Local memory holds, as on a GPU, whatever was left there (zero when first allocated), as it always did for the
// second CTA a worker ran.
struct CtaContext {
  std::vector<Thread> threads;
  std::vector<std::vector<uint64_t>> warp_regs;  // Per warp: [register][lane], kWarpLanes words per register.
  std::vector<uint8_t> shared;
  Slab locals;        // Every thread's local stack, one after another.
  Slab param_stacks;  // Every thread's parameter stack, one after another.

  // What the threads' ids and stacks were last set up for: a launch with the same layout skips doing it again.
  struct Layout {
    uint32_t block[3] = {0, 0, 0};
    uint32_t local_size = 0;
    size_t param_stack_bytes = 0;
    const uint8_t* locals = nullptr;
    const uint8_t* param_stacks = nullptr;
    bool operator==(const Layout&) const = default;
  } layout;

  // After a launch, what grew beyond these is freed instead of kept: stacks of a large block with calls (1024
  // threads need 24 MiB), registers and frames of deep recursion. A device then keeps little memory for a rare
  // large launch, which allocates as every launch once did.
  static constexpr size_t kKeptSlabBytes = 8u << 20;
  static constexpr size_t kKeptRegsPerThread = 4096;
  static constexpr size_t kKeptFramesPerThread = 64;
  void Trim() {
    if (locals.bytes() > kKeptSlabBytes) locals.Release();
    if (param_stacks.bytes() > kKeptSlabBytes) param_stacks.Release();
    for (Thread& t : threads) {
      if (t.frames.capacity() > kKeptFramesPerThread) std::vector<Frame>().swap(t.frames);
    }
    for (auto& regs : warp_regs) {
      if (regs.capacity() > kKeptRegsPerThread * kWarpLanes) std::vector<uint64_t>().swap(regs);
    }
  }
};

// d = fma(a, b, c) on the f32 operands of the lanes in `act` (rows of kWarpLanes 64-bit registers): one FMA
// instruction per lane where the host has them, else the C library's fmaf; the same correctly rounded result.
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void FmaRowF32WithFma(uint64_t* d, const uint64_t* a, const uint64_t* b,
                                                          const uint64_t* c, uint32_t act) {
  for (uint32_t l = 0; l < kWarpLanes; ++l) {
    const uint64_t v = Bits(__builtin_fmaf(F32(a[l]), F32(b[l]), F32(c[l])));
    d[l] = ((act >> l) & 1) ? v : d[l];
  }
}
#endif
void FmaRowF32Portable(uint64_t* d, const uint64_t* a, const uint64_t* b, const uint64_t* c, uint32_t act) {
  for (uint32_t l = 0; l < kWarpLanes; ++l) {
    if ((act >> l) & 1) d[l] = Bits(std::fmaf(F32(a[l]), F32(b[l]), F32(c[l])));
  }
}
void FmaRowF32(uint64_t* d, const uint64_t* a, const uint64_t* b, const uint64_t* c, uint32_t act) {
#if defined(__x86_64__)
  static const bool has_fma = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
  if (has_fma) {
    FmaRowF32WithFma(d, a, b, c, act);
    return;
  }
#endif
  FmaRowF32Portable(d, a, b, c, act);
}

// The lanes of a warp at one instruction (same call depth, function and pc), with their register windows.
struct WarpGroup {
  Thread* lanes[32];
  LaneRegs regs[32];
  uint32_t n = 0;
  uint32_t mask = 0;            // The lanes (bit = lane) in the group.
  uint64_t* rows = nullptr;     // When every lane's frame starts at the same register: its register 0's row.
  uint64_t scratch_rows[4][32];  // Operands that are not registers, as rows.
  uint32_t depth = 0;
  int32_t fn = 0;
  uint32_t pc = 0;
};

class CtaRunner {
 public:
  // Runs CTAs of `launch` in `context`, which it sets up for the launch's block.
  CtaRunner(const Launch& launch, CtaContext& context, MemoryMap& memory, int sm, std::atomic<bool>& abort,
            const std::atomic<bool>* cancel, ExecutionGate* gate)
      : launch_(launch), prog_(*launch.program), memory_(memory), sm_(sm), abort_(abort), cancel_(cancel),
        gate_(gate) {
    ranges_ = memory.Ranges();
    textures_ = &memory.Textures();
    nthreads_ = launch.block.x * launch.block.y * launch.block.z;
    // The device checked that the block fits (LayBlock) before it queued the launch.
    BlockLayout block;
    LayBlock(prog_, launch.function, launch.block, launch.dynamic_shared, launch.params.size(), &block);
    reserved_base_ = (prog_.static_shared_bytes + launch.dynamic_shared + 15) / 16 * 16;
    shared_size_ = block.shared_bytes;
    if (context.shared.size() < shared_size_ + 16) context.shared.resize(shared_size_ + 16);
    shared_ = std::span<uint8_t>(context.shared.data(), shared_size_ + 16);
    local_size_ = block.local_bytes;
    register_limit_ = block.registers;
    uint8_t* locals = context.locals.Reserve(static_cast<size_t>(local_size_) * nthreads_ + 16);
    const size_t param_stack_bytes = block.param_stack_bytes;
    const size_t param_stack_stride = (param_stack_bytes + 15) / 16 * 16;
    uint8_t* param_stacks = context.param_stacks.Reserve(param_stack_stride * nthreads_);
    if (context.threads.size() < nthreads_) {
      context.threads.resize(nthreads_);
      context.layout = {};
    }
    threads_ = std::span<Thread>(context.threads.data(), nthreads_);
    nwarps_ = (nthreads_ + 31) / 32;
    if (context.warp_regs.size() < nwarps_) context.warp_regs.resize(nwarps_);
    warp_regs_ = std::span<std::vector<uint64_t>>(context.warp_regs.data(), nwarps_);
    const CtaContext::Layout layout{{launch.block.x, launch.block.y, launch.block.z}, local_size_,
                                    param_stack_bytes, locals, param_stacks};
    if (layout == context.layout) return;
    context.layout = layout;
    for (uint32_t i = 0; i < nthreads_; ++i) {
      Thread& t = threads_[i];
      t.linear = i;
      t.tid[0] = i % launch.block.x;
      t.tid[1] = (i / launch.block.x) % launch.block.y;
      t.tid[2] = i / (launch.block.x * launch.block.y);
      t.lane = i % 32;
      t.warp = i / 32;
      t.local = locals + static_cast<size_t>(i) * local_size_;
      t.param_stack = std::span<uint8_t>(param_stacks + i * param_stack_stride, param_stack_bytes);
    }
  }

  // Runs one CTA. Returns false (with fault_) on a kernel fault or deadlock.
  bool RunCta(uint32_t cx, uint32_t cy, uint32_t cz) {
    ctaid_[0] = cx;
    ctaid_[1] = cy;
    ctaid_[2] = cz;
    std::fill(shared_.begin(), shared_.end(), 0);
    const Function& entry = prog_.functions[static_cast<size_t>(launch_.function)];
    for (auto& regs : warp_regs_) regs.assign(size_t{entry.num_regs} * kWarpLanes, 0);
    for (Thread& t : threads_) {
      t.state = ThreadState::kRunning;
      t.frames.clear();
      t.reg_top = entry.num_regs;
      t.local_top = entry.local_area;
      std::memcpy(t.param_stack.data(), launch_.params.data(), launch_.params.size());
      t.param_top = std::max<uint32_t>(entry.param_area, static_cast<uint32_t>(launch_.params.size()));
      // The kernel's own .param variables and the slack after them start zeroed, whatever an earlier CTA left
      // there (a call zeroes its callee's parameters itself).
      const size_t zeroed_end = std::min<size_t>(t.param_stack.size(), size_t{t.param_top} + 16);
      std::memset(t.param_stack.data() + launch_.params.size(), 0, zeroed_end - launch_.params.size());
      Frame& f = t.frames.emplace_back();  // In place: a copy from the stack stalls on store forwarding.
      f.fn = launch_.function;
      f.param_base = t.param_stack.data();
      f.param_size = t.param_top;
      t.carry = false;
      t.barrier = 0;
      t.red_pred = false;
    }
    for (auto& b : barriers_) b = Barrier();
    exited_ = 0;
    int idle_rounds = 0;  // Rounds in which every thread that ran only waited on an mbarrier nobody changed.
    while (exited_ < nthreads_) {
      if (Cancelled()) return false;
      bool progress = false, only_waits = true;
      const uint64_t events = mbarrier_events_;
      for (uint32_t w = 0; w < nwarps_; ++w) {
        bool running = false;
        for (uint32_t k = w * 32; k < std::min(nthreads_, w * 32 + 32) && !running; ++k) {
          running = threads_[k].state == ThreadState::kRunning;
        }
        if (!running) continue;
        progress = true;
        bool waits_only = true;
        if (launch_.warp_major) {
          if (!RunWarp(w, &waits_only)) return false;
        } else {
          for (uint32_t k = w * 32; k < std::min(nthreads_, w * 32 + 32); ++k) {
            if (threads_[k].state != ThreadState::kRunning) continue;
            yielded_on_wait_ = false;
            if (!RunThread(threads_[k])) return false;
            waits_only = waits_only && yielded_on_wait_;
          }
        }
        only_waits = only_waits && waits_only;
      }
      bool released = false;
      for (uint32_t w = 0; w < nwarps_; ++w) released = CompleteCollectives(w) || released;
      if (!fault_.ok()) return false;  // A collective faulted (ldmatrix from an illegal address).
      for (uint32_t id = 0; id < 16; ++id) released = CompleteBarrier(id) || released;
      if (!progress && !released && exited_ < nthreads_) return Deadlock();
      idle_rounds = (progress && only_waits && !released && events == mbarrier_events_) ? idle_rounds + 1 : 0;
      if (idle_rounds > 1) return Deadlock();
    }
    return true;
  }

  const CallStatus& fault() const { return fault_; }

  // Polled now and then by running threads: a cancelled launch (device reset or destroyed) stops mid-kernel.
  // Also the gate's checkpoint: a kernel of this device may be held here while a neighbour has its turn.
  bool Cancelled() {
    if (gate_ && cancel_) gate_->Checkpoint(*cancel_);
    if (cancel_ && cancel_->load(std::memory_order_relaxed)) {
      Fail(cu::kLaunchFailed, "launch cancelled: the context was reset or destroyed");
      return true;
    }
    return abort_.load(std::memory_order_relaxed);
  }
  std::string& output() { return output_; }
  uint64_t instructions() const { return instructions_; }

 private:
  // ---- Faults. ----
  std::string Where(const Thread& t, const Inst& in) const {
    const Function& fn = prog_.functions[static_cast<size_t>(t.frames.back().fn)];
    return "in " + fn.name + " at PTX line " + std::to_string(in.line) + ", block (" + std::to_string(ctaid_[0]) +
           "," + std::to_string(ctaid_[1]) + "," + std::to_string(ctaid_[2]) + ") thread (" +
           std::to_string(t.tid[0]) + "," + std::to_string(t.tid[1]) + "," + std::to_string(t.tid[2]) + ")";
  }
  bool Fail(int code, const std::string& message) {
    if (fault_.ok()) fault_ = CallStatus(code, message);
    abort_.store(true);
    return false;
  }

  bool Deadlock() {
    std::string detail;
    uint32_t at_barrier = 0, at_collective = 0, at_mbarrier = 0;
    for (const Thread& t : threads_) {
      at_barrier += t.state == ThreadState::kBarrier ? 1 : 0;
      at_collective += t.state == ThreadState::kCollective ? 1 : 0;
      at_mbarrier += t.state == ThreadState::kRunning ? 1 : 0;  // Running only to poll an mbarrier.
    }
    return Fail(cu::kLaunchTimeout,
                "the kernel can never finish (barrier deadlock) in block (" + std::to_string(ctaid_[0]) + "," +
                    std::to_string(ctaid_[1]) + "," + std::to_string(ctaid_[2]) + "): " +
                    std::to_string(at_barrier) + " thread(s) wait at a barrier, " + std::to_string(at_collective) +
                    " at a warp-synchronous instruction and " + std::to_string(at_mbarrier) +
                    " on an mbarrier phase that cannot complete, " + std::to_string(exited_) + " of " +
                    std::to_string(nthreads_) + " exited; a barrier or warp collective waits for threads that " +
                    "never arrive");
  }

  // ---- Memory. ----
  bool InGlobal(uint64_t addr, uint64_t size) {
    if (addr >= cache_base_ && addr + size <= cache_end_ && addr + size >= addr) return true;
    // The allocation found before this one (kernels usually read one array and write another).
    if (addr >= previous_base_ && addr + size <= previous_end_ && addr + size >= addr) {
      std::swap(cache_base_, previous_base_);
      std::swap(cache_end_, previous_end_);
      return true;
    }
    const auto& r = *ranges_;
    auto it = std::upper_bound(r.begin(), r.end(), std::pair<uint64_t, uint64_t>(addr, ~uint64_t{0}));
    if (it == r.begin()) return false;
    --it;
    if (addr >= it->first && addr + size <= it->second && addr + size >= addr) {
      previous_base_ = cache_base_;
      previous_end_ = cache_end_;
      cache_base_ = it->first;
      cache_end_ = it->second;
      return true;
    }
    // The device heap grows during the launch: refresh once before giving up.
    auto fresh = memory_.Ranges();
    if (fresh.get() != ranges_.get()) {
      ranges_ = fresh;
      return InGlobal(addr, size);
    }
    return false;
  }

  // Host pointer for an access of `size` bytes at `addr` in `space`, or nullptr after recording the fault.
  uint8_t* Translate(Thread& t, const Inst& in, Space space, uint64_t addr, uint32_t size, bool write) {
    uint8_t* shared = shared_.data();
    switch (space) {
      case Space::kShared:
        if (addr + size <= shared_size_ && addr + size >= addr) return Aligned(t, in, shared + addr, addr, size);
        break;
      case Space::kLocal:
        if (addr + size <= local_size_ && addr + size >= addr) return Aligned(t, in, t.local + addr, addr, size);
        break;
      case Space::kParam: {
        uint8_t* p = reinterpret_cast<uint8_t*>(addr);
        if (p >= t.param_stack.data() && p + size <= t.param_stack.data() + t.param_stack.size()) return p;
        break;
      }
      case Space::kGlobal:
      case Space::kConst:
        if (InGlobal(addr, size)) return Aligned(t, in, reinterpret_cast<uint8_t*>(addr), addr, size);
        break;
      case Space::kGeneric: {
        uintptr_t sh = reinterpret_cast<uintptr_t>(shared);
        if (addr >= sh && addr + size <= sh + shared_size_) return Aligned(t, in, reinterpret_cast<uint8_t*>(addr), addr - sh, size);
        uintptr_t lo = reinterpret_cast<uintptr_t>(t.local);
        if (local_size_ && addr >= lo && addr + size <= lo + local_size_) {
          return Aligned(t, in, reinterpret_cast<uint8_t*>(addr), addr - lo, size);
        }
        uint8_t* p = reinterpret_cast<uint8_t*>(addr);
        if (p >= t.param_stack.data() && p + size <= t.param_stack.data() + t.param_stack.size()) return p;
        if (InGlobal(addr, size)) return Aligned(t, in, p, addr, size);
        break;
      }
    }
    static const char* kNames[] = {"generic", "global", "shared", "local", "param", "const"};
    Fail(cu::kIllegalAddress,
         "illegal address: " + std::to_string(size) + "-byte " + (write ? "store to " : "load from ") +
             kNames[static_cast<int>(space)] + " address 0x" + Hex(addr) + " " + Where(t, in) +
             (space == Space::kShared ? " (shared window is " + std::to_string(shared_size_) + " bytes)"
                                      : ": not inside any allocation"));
    return nullptr;
  }

  uint8_t* Aligned(Thread& t, const Inst& in, uint8_t* p, uint64_t addr, uint32_t size) {
    if ((addr & (size - 1)) != 0) {
      Fail(cu::kMisalignedAddress, "misaligned " + std::to_string(size) + "-byte access at 0x" + Hex(addr) + " " +
                                          Where(t, in));
      return nullptr;
    }
    return p;
  }

  static std::string Hex(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
    return buf;
  }

  // ---- Operands. ----
  // Cycles of a kClockRateKhz clock since the process started: time, so that a kernel waiting for a number of
  // cycles waits as long as on a GPU however fast the interpreter runs.
  static uint64_t Cycles() {
    static const auto start = std::chrono::steady_clock::now();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    return static_cast<uint64_t>(static_cast<unsigned __int128>(ns.count()) * kClockRateKhz / 1000000);
  }

  uint64_t SpecialValue(const Thread& t, Special s) const {
    switch (s) {
      case Special::kTidX: return t.tid[0];
      case Special::kTidY: return t.tid[1];
      case Special::kTidZ: return t.tid[2];
      case Special::kNtidX: return launch_.block.x;
      case Special::kNtidY: return launch_.block.y;
      case Special::kNtidZ: return launch_.block.z;
      case Special::kCtaidX: return ctaid_[0];
      case Special::kCtaidY: return ctaid_[1];
      case Special::kCtaidZ: return ctaid_[2];
      case Special::kNctaidX: return launch_.grid.x;
      case Special::kNctaidY: return launch_.grid.y;
      case Special::kNctaidZ: return launch_.grid.z;
      case Special::kLaneid: return t.lane;
      case Special::kWarpid: return t.warp;
      case Special::kNwarpid: return nwarps_;
      case Special::kSmid: return static_cast<uint64_t>(sm_);
      case Special::kNsmid: return 40;
      case Special::kGridid: return launch_.grid_id;
      case Special::kClock: return static_cast<uint32_t>(Cycles());
      case Special::kClock64: return Cycles();
      case Special::kGlobaltimer:
        return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
      case Special::kLanemaskEq: return 1u << t.lane;
      case Special::kLanemaskLe: return t.lane == 31 ? 0xffffffffu : (2u << t.lane) - 1;
      case Special::kLanemaskLt: return (1u << t.lane) - 1;
      case Special::kLanemaskGe: return ~((1u << t.lane) - 1) & 0xffffffffu;
      case Special::kLanemaskGt: return t.lane == 31 ? 0 : (~((2u << t.lane) - 1)) & 0xffffffffu;
      case Special::kDynamicSmemSize: return launch_.dynamic_shared;
      case Special::kTotalSmemSize:
        return prog_.functions[static_cast<size_t>(launch_.function)].static_shared_bytes + launch_.dynamic_shared;
      case Special::kReservedSmemBegin: return reserved_base_;
      case Special::kReservedSmemEnd: return reserved_base_ + kReservedSharedBytes;
      case Special::kReservedSmemCap: return kReservedSharedBytes;
      case Special::kReservedSmemOffset0: return reserved_base_;
      case Special::kReservedSmemOffset1: return reserved_base_ + 64;
      case Special::kGlobaltimerLo: return SpecialValue(t, Special::kGlobaltimer) & 0xffffffffu;
      case Special::kGlobaltimerHi: return SpecialValue(t, Special::kGlobaltimer) >> 32;
      case Special::kWarpSize: return 32;
      case Special::kZero: return 0;
      case Special::kEnvreg1: return launch_.grid_workspace >> 32;
      case Special::kEnvreg2: return launch_.grid_workspace & 0xffffffffu;
    }
    return 0;
  }

  // The address an instruction's [base+offset] names for thread `t` (before a 32-bit base's wrap).
  uint64_t AddressOf(const Thread& t, const Frame& f, LaneRegs R, const Inst& in) const {
    uint64_t addr = static_cast<uint64_t>(in.offset);
    if (in.base.kind == Src::kReg) addr += R[in.base.reg];
    else if (in.base.kind != Src::kNone) addr += Get(t, f, R, in.base);
    return addr;
  }
  uint64_t Cvta(const Inst& in, const Thread& t, uint64_t v) const;
  // Thread t's registers in frame f.
  LaneRegs RegsOf(const Thread& t, const Frame& f) const {
    return LaneRegs(warp_regs_[t.warp].data() + size_t{f.reg_base} * kWarpLanes + t.lane);
  }
  LaneRegs RegsOf(const Thread& t) const { return RegsOf(t, t.frames.back()); }
  inline uint64_t Get(const Thread& t, const Frame& f, LaneRegs R, const Operand& o) const {
    switch (o.kind) {
      case Src::kReg: return R[o.reg];
      case Src::kImm: return o.imm;
      case Src::kSpecial: return SpecialValue(t, static_cast<Special>(o.reg));
      case Src::kLocalSym: return f.local_base + o.imm;
      case Src::kParamSym: return reinterpret_cast<uint64_t>(f.param_base + o.imm);
      default: return 0;
    }
  }
  inline bool Pred(const Thread& t, const Frame& f, LaneRegs R, const Operand& o) const {
    bool v = (Get(t, f, R, o) & 1) != 0;
    return o.negated ? !v : v;
  }

  // ---- The interpreter. ----
  // Runs `t` until it blocks, exits, gives way at a wait, or has run `budget` instructions.
  bool RunThread(Thread& t, uint64_t budget = ~uint64_t{0});
  bool RunValueOp(Thread& t, Frame* fr, LaneRegs R, const Function* fn, const Inst& in);
  bool RunWarp(uint32_t w, bool* waits_only);
  int RunTogether(WarpGroup& g);
  uint32_t GroupActive(const WarpGroup& g, int32_t guard, uint64_t negated) const;
  template <typename F>
  void LanesTogether(WarpGroup& g, int32_t guard, uint64_t guard_negated, const Operand& s0, const Operand& s1,
                     const Operand& s2, bool to_register, uint32_t dst, F f);
  void WaitAtCollective(WarpGroup& g, uint32_t pc, uint32_t act);
  void PartAtBranch(WarpGroup& g, uint32_t target, uint32_t pc, uint32_t act);
  bool ArriveTogether(WarpGroup& g, const Inst& in, uint32_t pc, uint32_t act);
  bool LoadStoreTogether(WarpGroup& g, const Inst& in, uint32_t act);
  bool FullWarpTogether(WarpGroup& g, const Inst& in);
  const uint64_t* OperandRow(WarpGroup& g, const Operand& o, int k) const;
  void ArriveAndWait(Thread& t, Frame& fr, LaneRegs R, const Inst& in, uint32_t id, uint32_t pc);
  // tex, tld4, suld, sust (exec_tex.inc); false after recording a fault.
  bool Texture(Thread& t, Frame& fr, LaneRegs R, const Inst& in);
  bool DoCall(Thread& t, const Inst& in);
  bool DoReturn(Thread& t);
  bool Native(Thread& t, const Inst& in, const Function& callee);
  bool CompleteCollectives(uint32_t warp);
  bool MbarrierStep(uint8_t op, const Inst& in, uint8_t* p, uint64_t a, uint64_t b, bool* complete, const Thread& t,
                    LaneRegs R);
  // Tensor cores (exec_matrix.inc).
  bool WmmaMemory(Thread& t, const Inst& in, const Frame& fr, LaneRegs R);
  bool CompleteMatrix(const Inst& in, uint32_t first, uint32_t count, uint32_t group);
  uint64_t ShuffleSource(const Inst& in, uint32_t first, uint32_t count, uint32_t group, const uint64_t* a,
                         uint32_t j) const;
  bool CompleteBarrier(uint32_t id);
  uint8_t* GenericPeek(Thread& t, uint64_t addr);
  void Exit(Thread& t) {
    t.state = ThreadState::kExited;
    ++exited_;
  }

  const Launch& launch_;
  const Program& prog_;
  MemoryMap& memory_;
  int sm_;
  std::atomic<bool>& abort_;
  const std::atomic<bool>* cancel_;
  ExecutionGate* gate_;
  std::shared_ptr<const std::vector<std::pair<uint64_t, uint64_t>>> ranges_;
  const TextureTable* textures_ = nullptr;  // The device's texture and surface objects (texture.h).
  uint64_t cache_base_ = 1, cache_end_ = 0;        // The allocation InGlobal found last,
  uint64_t previous_base_ = 1, previous_end_ = 0;  // and the one before it.
  uint32_t nthreads_ = 0, nwarps_ = 0, exited_ = 0;
  uint32_t ctaid_[3] = {0, 0, 0};
  uint32_t shared_size_ = 0, local_size_ = 0;
  uint32_t register_limit_ = 0;  // Register slots per thread, calls included (BlockLayout::registers).
  uint32_t reserved_base_ = 0;
  uint64_t mbarrier_events_ = 0;  // Changes to any mbarrier object: a wait that spins with none is stuck.
  // A warp's turn (RunWarp) ends after this many loop iterations (backward branches taken together), as a GPU
  // interleaves a block's warps: a loop over memory then walks it warp after warp, neighbours' accesses close
  // together in time (the host's caches and prefetchers see one stream, not one stride per warp), and a warp
  // spinning on a flag another warp of the block sets lets that warp run.
  static constexpr uint32_t kTurnBranches = 8;
  uint32_t backward_branches_ = 0;  // In the current turn.
  bool turn_over_ = false;          // The current turn ended at kTurnBranches.
  bool yielded_on_wait_ = false;  // The thread last run gave way at a wait not yet complete.  // Where the reserved shared memory starts (when the kernel uses it).
  std::span<uint8_t> shared_;   // In the context; shared_size_ bytes and a little slack.
  std::span<Thread> threads_;   // The block's threads, the context's first nthreads_.
  std::span<std::vector<uint64_t>> warp_regs_;  // The block's warps' register files, in the context.
  Barrier barriers_[16];
  CallStatus fault_;
  std::string output_;
  uint64_t instructions_ = 0;

  friend struct Ops;
};


#include "emu/exec_matrix.inc"
#include "emu/exec_ops.inc"
#include "emu/exec_tex.inc"
#include "emu/exec_warp.inc"

}  // namespace

bool LayBlock(const Program& program, int function, const Dim3& block, uint32_t dynamic_shared, size_t param_bytes,
              BlockLayout* layout) {
  const Function& entry = program.functions[static_cast<size_t>(function)];
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  const uint64_t warps = (threads + kWarpLanes - 1) / kWarpLanes;
  uint64_t shared = uint64_t{program.static_shared_bytes} + dynamic_shared;
  if (program.uses_reserved_shared) shared = (shared + 15) / 16 * 16 + kReservedSharedBytes;
  const bool has_calls = program.has_calls;
  const bool needs_local = program.needs_local;
  // The kernel's own locals (up to kMaxLocalBytesPerThread), and a stack for its calls' beyond them.
  const uint64_t local = needs_local ? std::max<uint64_t>(kLocalStackBytes, uint64_t{entry.local_area} +
                                                                                (has_calls ? kLocalStackBytes : 0))
                                     : 0;
  // Call frames need room beyond the kernel's own parameters; a module without calls does not. Every thread's
  // stack starts 16-byte aligned, as its own allocation did.
  const uint64_t params =
      std::max<uint64_t>(entry.param_area, param_bytes) + (has_calls ? kParamStackBytes : 16);
  layout->shared_bytes = static_cast<uint32_t>(std::min<uint64_t>(shared, UINT32_MAX));
  layout->local_bytes = static_cast<uint32_t>(local);
  layout->param_stack_bytes = static_cast<size_t>(params);
  const uint64_t fixed = shared + threads * (local + (params + 15) / 16 * 16 + sizeof(Thread));
  // Registers are 64-bit slots, kept for every lane of every warp.
  layout->footprint = fixed + uint64_t{entry.num_regs} * 8 * warps * kWarpLanes;
  if (layout->footprint > kMaxBlockFootprintBytes) return false;
  // What is left holds the registers of calls, as many as fit.
  const uint64_t per_thread = (kMaxBlockFootprintBytes - fixed) / (8 * warps * kWarpLanes);
  layout->registers = static_cast<uint32_t>(std::min<uint64_t>(per_thread, UINT32_MAX / 2));
  return true;
}

void ParamBuffer::Assign(const void* data, size_t bytes, size_t at_least) {
  size_ = std::max(bytes, at_least);
  uint8_t* to = inline_;
  if (size_ > kInlineBytes) {
    heap_.resize(size_);
    to = heap_.data();
  }
  if (bytes) std::memcpy(to, data, bytes);
  std::memset(to + bytes, 0, size_ - bytes);
}

struct LaunchRunner::State {
  State(int worker_count, int sms) : workers(std::max(worker_count, 1)), sm_count(std::max(sms, 1)) {
    for (int w = 0; w < workers; ++w) contexts.push_back(std::make_unique<CtaContext>());
  }

  // What one worker did in a launch. Output and faults per CTA index would cost memory for huge grids; each
  // worker keeps its CTAs' output tagged with the CTA index, merged in CTA order at the end.
  struct WorkerResult {
    std::vector<std::pair<uint64_t, std::string>> outputs;
    CallStatus fault;
    uint64_t fault_cta = ~0ull;
    uint64_t instructions = 0;
  };

  static constexpr auto kPoll = std::chrono::microseconds(50);
  const int workers, sm_count;
  std::vector<std::unique_ptr<CtaContext>> contexts;  // One per worker; [0] is the caller's.
  std::vector<WorkerResult> results;                  // One per worker of the launch running.

  // The launch running, as every worker reads it.
  const Launch* launch = nullptr;
  MemoryMap* memory = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  ExecutionGate* gate = nullptr;
  uint64_t ctas = 0;
  std::atomic<uint64_t> next{0};  // The next CTA to take.
  std::atomic<bool> abort{false};

  // Parked threads for workers 1..threads.size(). A launch bumps `generation` and wakes them; the first
  // `participants` - 1 of them join in, and the last to finish wakes the caller.
  std::mutex mu;
  std::condition_variable start_cv, done_cv;
  uint64_t generation = 0;  // Guarded by mu, as are the fields below.
  std::atomic<uint64_t> published{0};  // generation, for polling without the mutex.
  int participants = 0;
  int running = 0;
  bool stopping = false;
  std::vector<std::thread> threads;

  // Runs CTAs of the current launch until none is left, as worker `w`.
  void Work(int w, CtaContext& context) {
    CtaRunner runner(*launch, context, *memory, w % sm_count, abort, cancel, gate);
    WorkerResult& r = results[static_cast<size_t>(w)];
    const Dim3& grid = launch->grid;
    while (!abort.load(std::memory_order_relaxed)) {
      uint64_t i = next.fetch_add(1);
      if (i >= ctas) break;
      uint32_t cx = static_cast<uint32_t>(i % grid.x);
      uint32_t cy = static_cast<uint32_t>((i / grid.x) % grid.y);
      uint32_t cz = static_cast<uint32_t>(i / (static_cast<uint64_t>(grid.x) * grid.y));
      bool ok = runner.RunCta(cx, cy, cz);
      if (!runner.output().empty()) {
        r.outputs.emplace_back(i, std::move(runner.output()));
        runner.output().clear();
      }
      if (!ok) {
        r.fault = runner.fault();
        r.fault_cta = i;
        break;
      }
    }
    r.instructions = runner.instructions();
  }

  void Park(int w) {
    uint64_t seen = 0;
    for (;;) {
      // Launches often come back to back: polling a little while before sleeping saves the next one a wakeup's
      // latency. The poll yields the core at each turn, so that on a busy host it takes nothing from others.
      const auto until = std::chrono::steady_clock::now() + kPoll;
      while (published.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
      {
        std::unique_lock<std::mutex> lock(mu);
        start_cv.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
        if (w >= participants) continue;
      }
      Work(w, *contexts[static_cast<size_t>(w)]);
      bool last;
      {
        std::lock_guard<std::mutex> lock(mu);
        last = --running == 0;
      }
      if (last) done_cv.notify_one();
    }
  }

  // Starts parked threads until `count` workers (the caller included) can run; answers how many can, fewer when
  // the host refuses a thread.
  int EnsureWorkers(int count) {
    while (static_cast<int>(threads.size()) + 1 < count) {
      int w = static_cast<int>(threads.size()) + 1;
      try {
        threads.emplace_back([this, w] { Park(w); });
      } catch (const std::system_error&) {
        break;
      }
    }
    return std::min(count, static_cast<int>(threads.size()) + 1);
  }

  ~State() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    start_cv.notify_all();
    for (auto& t : threads) t.join();
  }
};

LaunchRunner::LaunchRunner(int workers, int sm_count) : state_(std::make_unique<State>(workers, sm_count)) {}

LaunchRunner::~LaunchRunner() = default;

LaunchOutcome LaunchRunner::Run(const Launch& launch, MemoryMap& memory, const std::atomic<bool>* cancel,
                                ExecutionGate* gate) {
  LaunchOutcome out;
  static const bool type_table_in_step = [] {
    for (int t = 0; t <= static_cast<int>(Type::kPred); ++t) {
      if (kTypeBytes[t] != ptx::TypeSize(static_cast<Type>(t))) return false;
    }
    return true;
  }();
  if (!type_table_in_step) {
    out.status = CallStatus(cu::kUnknown, "internal: type size table out of step with ptx::Type");
    return out;
  }
  State& st = *state_;
  const uint64_t ctas = static_cast<uint64_t>(launch.grid.x) * launch.grid.y * launch.grid.z;
  if (ctas == 0) return out;
  int workers = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(st.workers), ctas));
  // A cooperative grid's CTAs wait for each other (grid sync): all of them run at once, one host thread each, and
  // the OS shares the cores among them. The launch checked that the grid fits the device at once. Workers beyond
  // the parked ones get a thread and a context of their own for this launch only.
  if (launch.cooperative) workers = static_cast<int>(ctas);
  // Each worker holds a block: together no more than kMaxLaunchFootprintBytes, however many cores the host has (a
  // cooperative grid was checked against it as a whole).
  BlockLayout block;
  LayBlock(*launch.program, launch.function, launch.block, launch.dynamic_shared, launch.params.size(), &block);
  if (!launch.cooperative) {
    const uint64_t fit = std::max<uint64_t>(1, kMaxLaunchFootprintBytes / std::max<uint64_t>(block.footprint, 1));
    workers = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(workers), fit));
  }
  st.launch = &launch;
  st.memory = &memory;
  st.cancel = cancel;
  st.gate = gate;
  st.ctas = ctas;
  st.next.store(0);
  st.abort.store(false);
  st.results.resize(static_cast<size_t>(workers));
  for (auto& r : st.results) {
    r.outputs.clear();
    r.fault = CallStatus::Ok();
    r.fault_cta = ~0ull;
    r.instructions = 0;
  }
  const int parked = std::min(workers, st.workers);
  bool started = true;
  std::vector<std::thread> extra_threads;
  std::vector<std::unique_ptr<CtaContext>> extra_contexts;
  try {
    for (int w = parked; w < workers; ++w) {
      extra_contexts.push_back(std::make_unique<CtaContext>());
      CtaContext* context = extra_contexts.back().get();
      extra_threads.emplace_back([&st, w, context] { st.Work(w, *context); });
    }
  } catch (const std::system_error&) {
    started = false;
  }
  // An ordinary launch runs on whichever workers the host gave threads to; a cooperative one needs them all.
  int participants = st.EnsureWorkers(parked);
  if (launch.cooperative && participants < parked) started = false;
  if (started) {
    if (participants > 1) {
      {
        std::lock_guard<std::mutex> lock(st.mu);
        st.participants = participants;
        st.running = participants - 1;
        st.published.store(++st.generation, std::memory_order_release);
      }
      st.start_cv.notify_all();
    }
    st.Work(0, *st.contexts[0]);
    if (participants > 1) {
      std::unique_lock<std::mutex> lock(st.mu);
      st.done_cv.wait(lock, [&] { return st.running == 0; });
    }
  } else {
    // The host refused a thread (a cooperative grid needs one per block): stop those started, fail the launch.
    st.abort.store(true);
  }
  for (auto& th : extra_threads) th.join();
  for (auto& context : st.contexts) context->Trim();
  if (!started) {
    out.status = CallStatus(cu::kLaunchOutOfResources,
                           "the host could not start a thread for every block of the grid (" +
                               std::to_string(workers) + " needed)");
    return out;
  }
  std::vector<std::pair<uint64_t, std::string>> all;
  uint64_t first_fault = ~0ull;
  for (auto& r : st.results) {
    out.instructions += r.instructions;
    for (auto& o : r.outputs) all.push_back(std::move(o));
    if (!r.fault.ok() && r.fault_cta < first_fault) {
      first_fault = r.fault_cta;
      out.status = r.fault;
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& o : all) out.printf_output += o.second;
  return out;
}

}  // namespace gpupool::emu::internal
