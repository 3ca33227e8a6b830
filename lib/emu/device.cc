#include "emu/device.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>

#include "core/mapping.h"
#include "core/range_allocator.h"
#include "core/range_map.h"
#include "emu/exec.h"
#include "emu/fatbin.h"
#include "emu/program.h"
#include "emu/ptx_link.h"
#include "emu/ptx_parser.h"

namespace gpupool::emu {

class Module {
 public:
  internal::Program program;
  std::vector<uint64_t> allocations;  // Module variables, freed on unload.
  std::map<std::string, Function*> functions;
  std::vector<std::unique_ptr<Function>> owned;
};

class Function {
 public:
  Module* module = nullptr;
  int index = -1;
  std::string name;
  std::vector<ParamInfo> params;
};

class Stream {
 public:
  // The ticket of its last queued work (guarded by the queue's mutex): the device runs one queue in order, so the
  // stream is idle once the queue is past it.
  uint64_t last_ticket = 0;
};

class Event {
 public:
  bool recorded = false;
  uint64_t ticket = 0;  // Completes when the device queue passes this ticket.
  bool done = true;
  std::chrono::steady_clock::time_point when;
};

namespace {

constexpr uint64_t kAlignment = 256;
constexpr uint64_t kHeapBytes = 8ull << 20;  // Device malloc heap, like cudaLimitMallocHeapSize's default.

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

struct Device::Impl : public internal::MemoryMap {
  DeviceOptions options;
  DeviceProperties props;
  int workers = 1;

  // ---- Memory: one reserved range of host address space; device pointers are host pointers into it. ----
  uint8_t* arena = nullptr;
  uint64_t arena_size = 0;
  mutable std::mutex mem_mu;
  std::map<uint64_t, uint64_t> live;   // base -> size (as requested).
  RangeAllocator free_;  // Free ranges of the arena.
  uint64_t used = 0;
  uint64_t module_bytes = 0;  // Of used: the modules' variables.
  uint64_t heap_used = 0;
  std::set<uint64_t> heap_blocks;
  mutable std::shared_ptr<const std::vector<std::pair<uint64_t, uint64_t>>> ranges_cache;
  // Texture and surface objects (texture.h). The host's books, guarded by mem_mu: per slot handed out, the
  // generation of its object (live or last), whether it is live, and the free slots, longest free first.
  std::vector<uint32_t> texture_generations;
  std::vector<bool> texture_live;
  std::deque<uint32_t> texture_free;
  // What kernels read: written only by the queue's executor (CreateTextureObject and DestroyTextureObject queue
  // the change), or by ResetContext once the queue is idle.
  TextureTable texture_table;

  // ---- Virtual memory: reservations in [vmm_base, vmm_base + vmm_size), kept PROT_NONE until mapped; physical
  // memory is one memfd (created at first use) whose ranges are the physical allocations. ----
  uint8_t* vmm_base = nullptr;
  uint64_t vmm_size = 0;
  RangeAllocator vmm_free_;
  int physical_fd = -1;
  RangeAllocator physical_free_;
  uint64_t next_physical = 1;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> physical;  // handle -> (offset in the memfd, bytes)
  std::map<uint64_t, uint64_t> mapped;                         // address -> bytes

  // ---- Work queue: one in-order executor for every stream (see the note in StreamWaitEvent). ----
  // A queued piece of work: a kernel launch, held inline so that queueing one allocates nothing, or anything else
  // as a callable.
  struct Task {
    Stream* stream = nullptr;
    uint64_t ticket = 0;
    std::function<void()> run;  // Empty for a kernel launch.
    // `run` only says that the work before it is done (CallWhenDone): the task counts as done before it runs, so
    // that whoever it tells finds the stream idle. A program's host function counts as the stream's work.
    bool notice = false;
    internal::Launch launch;
  };
  // A ring of tasks that grows to the deepest queue seen, so that queueing allocates only when the queue gets
  // deeper than ever before; it gives the memory of a burst back once drained.
  class TaskQueue {
   public:
    bool empty() const { return count_ == 0; }
    void Push(Task&& task) {
      if (count_ == slots_.size()) Resize(std::max<size_t>(kKeptSlots, 2 * slots_.size()));
      slots_[(head_ + count_) % slots_.size()] = std::move(task);
      ++count_;
    }
    // REQUIRES: !empty().
    void Pop(Task* task) {
      *task = std::move(slots_[head_]);
      head_ = (head_ + 1) % slots_.size();
      if (--count_ == 0 && slots_.size() > kKeptSlots) Resize(kKeptSlots);
    }

   private:
    static constexpr size_t kKeptSlots = 256;
    void Resize(size_t slots) {
      std::vector<Task> grown(slots);
      for (size_t i = 0; i < count_; ++i) grown[i] = std::move(slots_[(head_ + i) % slots_.size()]);
      slots_.swap(grown);
      head_ = 0;
    }
    std::vector<Task> slots_;
    size_t head_ = 0, count_ = 0;
  };

  std::mutex q_mu;
  std::condition_variable q_cv, done_cv;
  TaskQueue queue;
  uint64_t next_ticket = 1, done_ticket = 0;
  // The earliest ticket a waiter waits for: the executor wakes waiters only when it gets there, not after every
  // piece of work (a client waiting behind thousands of small launches would otherwise wake for each one).
  static constexpr uint64_t kNoWaiter = ~uint64_t{0};
  uint64_t wake_ticket = kNoWaiter;
  // The executor sleeps only when it finds the queue empty; Submit wakes it only then, so a busy executor drains
  // the queue without a wakeup per piece of work.
  bool executor_sleeping = false;
  // How long the executor waited for work the last few times it ran out (AwaitWork). Used by the executor only.
  std::array<std::chrono::nanoseconds, 4> idle_gaps{};
  size_t idle_gap_next = 0;
  std::atomic<uint64_t> queued_ticket{1};  // next_ticket, for AwaitWork's polling without the mutex.
  // Waiters to wake ahead of their work's end (WhenNearlyReached), in ticket order.
  struct SoonNotice {
    uint64_t ticket;  // The last piece of work the waiter waits for.
    std::chrono::nanoseconds lead;
    std::function<void()> soon;
  };
  std::deque<SoonNotice> soon_notices;
  // How long a piece of work has taken lately (a moving average, in nanoseconds), to tell how far a waiter's end is.
  // Written by the executor only.
  std::atomic<int64_t> piece_estimate{0};
  bool stopping = false;
  std::thread executor;
  std::unique_ptr<internal::LaunchRunner> runner;  // Used by the executor only.
  Stream default_stream;
  std::set<Stream*> streams;
  std::set<Event*> events;
  std::set<Module*> modules;

  std::mutex sticky_mu;
  CallStatus sticky;
  // Whether `sticky` holds an error: every call checks, and almost always finds none, without the mutex.
  std::atomic<bool> faulted{false};
  std::mutex sink_mu;
  std::function<void(std::string_view)> sink;
  std::atomic<uint32_t> grid_ids{0};
  std::atomic<uint64_t> instructions{0};

  // Busy time, for Utilization(): what the queue's executor has spent running kernels and running copies and
  // memsets, plus the work it is running now (kind and start), so that a long kernel counts while it runs.
  enum BusyKind : int { kIdle = 0, kKernelBusy = 1, kMemoryBusy = 2 };
  std::atomic<uint64_t> kernel_nanos{0}, memory_nanos{0};
  std::atomic<int> busy_kind{kIdle};
  std::atomic<int64_t> busy_since{0};
  std::mutex utilization_mu;
  struct UtilizationSample {
    int64_t at = 0;
    uint64_t kernel = 0, memory = 0;
    unsigned gpu = 0, memory_percent = 0;
  } last_sample;  // Guarded by utilization_mu.

  static int64_t MonotonicNanos() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Runs `op` on the executor, counting its time as `kind`.
  template <typename Op>
  void Busy(BusyKind kind, Op&& op) {
    int64_t start = MonotonicNanos();
    busy_since.store(start);
    busy_kind.store(kind);
    op();
    uint64_t spent = static_cast<uint64_t>(std::max<int64_t>(0, MonotonicNanos() - start));
    // Counted before the work stops showing as running, so that a reader never sees it in neither.
    (kind == kKernelBusy ? kernel_nanos : memory_nanos) += spent;
    busy_kind.store(kIdle);
  }
  // Busy nanoseconds of `kind` so far, including work of that kind still running.
  uint64_t BusyNanos(BusyKind kind, int64_t now) {
    uint64_t done = (kind == kKernelBusy ? kernel_nanos : memory_nanos).load();
    if (busy_kind.load() == kind) done += static_cast<uint64_t>(std::max<int64_t>(0, now - busy_since.load()));
    return done;
  }
  std::atomic<bool> cancel{false};  // Stops running kernels (reset, destruction).
  // The arena is a shared memory file's (DeviceOptions::memory_fd): freed pages are given back by punching them out
  // of the file (MADV_REMOVE), as unmapping them here (MADV_DONTNEED) would leave them in it.
  bool arena_shared = false;

  explicit Impl(DeviceOptions o) : options(std::move(o)) {
    props = PropertiesOfCapability(options.cc_major, options.cc_minor);
    props.name = options.name;
    props.total_memory = options.memory_bytes;
    workers = options.worker_threads > 0 ? options.worker_threads
                                         : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    arena_size = AlignUp(options.memory_bytes + kHeapBytes, 1 << 20);
    void* p = nullptr;
    struct stat held {};
    if (options.memory_fd >= 0 && options.base_address) {
      // Sparse either way: only what is touched takes pages.
      if (fstat(options.memory_fd, &held) == 0 &&
          (static_cast<uint64_t>(held.st_size) >= arena_size || ftruncate(options.memory_fd, arena_size) == 0)) {
        p = MapSharedAt(options.base_address, arena_size, PROT_READ | PROT_WRITE, options.memory_fd);
        arena_shared = p != nullptr;
      }
    } else if (options.base_address) {
      p = MapAnonymousAt(options.base_address, arena_size, PROT_READ | PROT_WRITE);
    } else {
      p = mmap(nullptr, arena_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) p = nullptr;
    }
    arena = static_cast<uint8_t*>(p);
    if (arena) free_.Reset(arena_size);
    // A device of a remote slice sits in a window of its own, GiB-aligned and disjoint from the program's other
    // windows: the GiB its memory starts in tells its texture handles from theirs (texture.h).
    texture_table = TextureTable(static_cast<uint16_t>(reinterpret_cast<uint64_t>(arena) >> 30));
    ReserveVirtualRegion();
    // A stable, distinct UUID per device object.
    uint64_t seed = reinterpret_cast<uint64_t>(this) ^ static_cast<uint64_t>(getpid()) * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 16; ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      props.uuid[i] = static_cast<uint8_t>(seed >> 56);
    }
    sink = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
    runner = std::make_unique<internal::LaunchRunner>(workers, props.multiprocessor_count);
    executor = std::thread([this] { Loop(); });
  }

  ~Impl() override {
    {
      std::lock_guard<std::mutex> lock(q_mu);
      stopping = true;
    }
    q_cv.notify_all();
    executor.join();
    if (arena) munmap(arena, arena_size);
    if (vmm_base) munmap(vmm_base, vmm_size);
    if (physical_fd >= 0) close(physical_fd);
  }

  // Bytes the device lets its users hold: its capacity, or (when its owner enforces the limit) its whole arena.
  uint64_t Limit() const { return options.enforce_capacity ? options.memory_bytes : arena_size; }
  uint64_t FreeBytesLocked() const { return Limit() - std::min(Limit(), used); }
  // Whether an allocation of `bytes` fits what is left; *need: what it takes, aligned. Compared before aligning: a
  // size near 2^64 would wrap to 0 and "fit".
  CallStatus RoomLocked(uint64_t bytes, uint64_t* need) const {
    const uint64_t limit = Limit(), free_bytes = FreeBytesLocked();
    *need = bytes > limit ? bytes : AlignUp(bytes, kAlignment);
    if (*need <= free_bytes) return CallStatus::Ok();
    return CallStatus(cu::kOutOfMemory, "out of memory: " + std::to_string(bytes) + " bytes requested, " +
                                            std::to_string(free_bytes) + " bytes free of " + std::to_string(limit));
  }
  // Frees a module variable's memory. REQUIRES: mem_mu held; `address` one of ArenaAllocator's.
  void FreeModuleBytesLocked(uint64_t address) {
    const uint64_t bytes = AlignUp(std::max<uint64_t>(live[address], 1), kAlignment);
    used -= bytes;
    module_bytes -= bytes;
    FreeLocked(address);
  }

  // The address space beyond the arena, for reservations: PROT_NONE, so a stray access faults.
  void ReserveVirtualRegion() {
    if (!arena) return;
    uint64_t start = AlignUp(arena_size, Device::kMappingGranularity);
    if (options.address_space_bytes <= start + Device::kMappingGranularity) return;
    uint64_t size = (options.address_space_bytes - start) / Device::kMappingGranularity * Device::kMappingGranularity;
    void* p = MapAnonymousAt(reinterpret_cast<uint64_t>(arena + start), size, PROT_NONE);
    if (p == nullptr) return;
    vmm_base = static_cast<uint8_t*>(p);
    vmm_size = size;
    vmm_free_.Reset(size);
  }

  // Puts the reservation back over [address, address + bytes) (unmapping whatever was mapped there).
  bool Unreserve(uint64_t address, uint64_t bytes) {
    void* p = mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p != MAP_FAILED;
  }

  bool InVirtualRegion(uint64_t address, uint64_t bytes) const {
    uint64_t base = reinterpret_cast<uint64_t>(vmm_base);
    return vmm_base && address >= base && bytes <= vmm_size && address - base <= vmm_size - bytes;
  }

  // -- Allocation. --
  uint64_t AllocateLocked(uint64_t bytes, uint64_t align) {
    uint64_t need = AlignUp(std::max<uint64_t>(bytes, 1), kAlignment);
    uint64_t offset = 0;
    if (!free_.Take(need, align, &offset)) return 0;
    uint64_t address = reinterpret_cast<uint64_t>(arena) + offset;
    live[address] = bytes;
    ranges_cache.reset();
    return address;
  }

  // Takes exactly [address, address + bytes) of the arena (aligned as AllocateLocked aligns): 0 when any of it is
  // outside the arena or taken.
  uint64_t AllocateAtLocked(uint64_t address, uint64_t bytes) {
    const uint64_t base = reinterpret_cast<uint64_t>(arena);
    const uint64_t need = AlignUp(std::max<uint64_t>(bytes, 1), kAlignment);
    if (!arena || address < base || address % kAlignment != 0 || address - base > arena_size ||
        need > arena_size - (address - base) || !free_.TakeAt(address - base, need)) {
      return 0;
    }
    live[address] = bytes;
    ranges_cache.reset();
    return address;
  }

  void FreeLocked(uint64_t address) {
    auto it = live.find(address);
    uint64_t offset = address - reinterpret_cast<uint64_t>(arena);
    uint64_t size = AlignUp(std::max<uint64_t>(it->second, 1), kAlignment);
    live.erase(it);
    ranges_cache.reset();
    // Give the pages back so freed memory does not stay resident: only the pages wholly inside the allocation, as
    // its neighbours may share its first and last page (allocations are 256-byte aligned, pages are not).
    if (size >= (1 << 20)) {
      const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
      uint64_t first = AlignUp(offset, page), end = (offset + size) / page * page;
      if (end > first) madvise(arena + first, end - first, arena_shared ? MADV_REMOVE : MADV_DONTNEED);
    }
    free_.Give(offset, size);
  }

  std::shared_ptr<const std::vector<std::pair<uint64_t, uint64_t>>> Ranges() const override {
    std::lock_guard<std::mutex> lock(mem_mu);
    if (!ranges_cache) {
      auto v = std::make_shared<std::vector<std::pair<uint64_t, uint64_t>>>();
      for (const auto& [base, size] : live) v->push_back({base, base + std::max<uint64_t>(size, 1)});
      // Adjacent mappings are one range: an access may span two of them, as on a GPU.
      for (const auto& [base, size] : mapped) {
        if (!v->empty() && v->back().second == base && base > reinterpret_cast<uint64_t>(arena) + arena_size) {
          v->back().second = base + size;
        } else {
          v->push_back({base, base + size});
        }
      }
      std::sort(v->begin(), v->end());
      ranges_cache = v;
    }
    return ranges_cache;
  }

  uint64_t HeapAlloc(uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mem_mu);
    if (bytes == 0 || heap_used + bytes > kHeapBytes) return 0;
    uint64_t a = AllocateLocked(bytes, 16);
    if (a) {
      heap_used += AlignUp(bytes, kAlignment);
      heap_blocks.insert(a);
    }
    return a;
  }

  const TextureTable& Textures() const override { return texture_table; }

  void HeapFree(uint64_t address) override {
    std::lock_guard<std::mutex> lock(mem_mu);
    if (!heap_blocks.erase(address)) return;  // Not from malloc: ignore, as the CUDA heap does not check.
    heap_used -= AlignUp(std::max<uint64_t>(live[address], 1), kAlignment);
    FreeLocked(address);
  }

  // Whether [addr, addr+bytes) lies inside one live allocation, or inside adjacent mappings.
  bool Contains(uint64_t addr, uint64_t bytes) const {
    std::lock_guard<std::mutex> lock(mem_mu);
    if (addr + bytes < addr) return false;
    auto it = live.upper_bound(addr);
    if (it != live.begin()) {
      --it;
      if (addr >= it->first && addr + bytes <= it->first + std::max<uint64_t>(it->second, 1)) return true;
    }
    return InsideAdjacentRanges(mapped, addr, bytes, [](uint64_t size) { return size; });
  }

  // -- Queue. --
  void Loop() {
    Task task;
    std::vector<std::function<void()>> due;
    std::unique_lock<std::mutex> lock(q_mu);
    for (;;) {
      if (queue.empty() && !stopping) {
        const auto idle_since = std::chrono::steady_clock::now();
        AwaitWork(lock);
        if (queue.empty() && !stopping) {
          executor_sleeping = true;
          q_cv.wait(lock, [this] { return stopping || !queue.empty(); });
          executor_sleeping = false;
        }
        idle_gaps[idle_gap_next++ % idle_gaps.size()] = std::chrono::steady_clock::now() - idle_since;
      }
      if (queue.empty()) return;  // Stopping, with everything queued done.
      queue.Pop(&task);
      if (!soon_notices.empty()) {
        TakeDueSoon(task, &due);
        lock.unlock();
        for (auto& soon : due) soon();
        due.clear();  // What the dropped ones hold is released outside the lock too.
        lock.lock();
      }
      if (task.notice) {
        MarkDone(lock, task.ticket);
        lock.unlock();
        task.run();
        task.run = nullptr;
        lock.lock();
        continue;
      }
      lock.unlock();
      const auto started = std::chrono::steady_clock::now();
      if (task.run) {
        task.run();
        task.run = nullptr;  // What it holds is released outside the lock, as it may call back into the device.
      } else {
        RunLaunch(task.launch);
      }
      const int64_t took = std::chrono::nanoseconds(std::chrono::steady_clock::now() - started).count();
      const int64_t estimate = piece_estimate.load(std::memory_order_relaxed);
      piece_estimate.store(estimate + (took - estimate) / 4, std::memory_order_relaxed);
      lock.lock();
      MarkDone(lock, task.ticket);
    }
  }

  // How long `pieces` pieces of work may take, judging by the last few. REQUIRES: q_mu.
  std::chrono::nanoseconds PiecesTake(uint64_t pieces) const {
    return std::chrono::nanoseconds(piece_estimate.load(std::memory_order_relaxed)) *
           static_cast<int64_t>(std::min<uint64_t>(pieces, 1u << 20));
  }

  // Takes into `due` the soon notices to act on as `task` starts: those whose work is expected to be done within
  // their lead, to be run, and those whose work is done by now (their waiters wake anyway), to be dropped (as
  // functions that do nothing, so that what they hold is released with `due`, outside the lock). REQUIRES: q_mu.
  void TakeDueSoon(const Task& task, std::vector<std::function<void()>>* due) {
    while (!soon_notices.empty()) {
      SoonNotice& n = soon_notices.front();
      if (n.ticket < task.ticket || (n.ticket == task.ticket && task.notice)) {
        due->push_back([dropped = std::move(n.soon)] {});
      } else {
        // Looked at as a piece starts, not again until it ends: the waiter is told as soon as the pieces after this
        // one (its last included) fit in its lead, which is no later than the lead and at most one piece earlier.
        if (PiecesTake(n.ticket - task.ticket) > n.lead) return;
        due->push_back(std::move(n.soon));
      }
      soon_notices.pop_front();
    }
  }

  // The queue is past `ticket`: wakes its waiters. REQUIRES: `lock` holds q_mu (released and taken again).
  void MarkDone(std::unique_lock<std::mutex>& lock, uint64_t ticket) {
    done_ticket = ticket;
    if (done_ticket >= wake_ticket) {
      wake_ticket = kNoWaiter;  // Every waiter wakes, and those still waiting name their ticket again.
      lock.unlock();
      done_cv.notify_all();
      lock.lock();
    }
  }

  // Polls the queue a while before the executor goes to sleep: waking it costs more than the work it is woken for
  // (a futex wake of an idle CPU; on a virtual machine an exit to the hypervisor, 20-50 us) when work comes in
  // small pieces, as a client's launches do one message at a time, or a training loop's next step does after its
  // synchronisation. The poll lasts kPoll, or as long as the last few idle gaps lasted when they were all short
  // (kMaxPoll at most): a client whose next work comes after a host-side pause of its own (checking a result,
  // preparing the next input) finds the executor awake. It yields the core at each turn, so that on a busy host it
  // costs the others little. REQUIRES: `lock` holds q_mu (released and taken again).
  void AwaitWork(std::unique_lock<std::mutex>& lock) {
    constexpr auto kPoll = std::chrono::microseconds(50), kMaxPoll = std::chrono::microseconds(400);
    const auto longest = *std::max_element(idle_gaps.begin(), idle_gaps.end());
    const auto fitting = longest + longest / 4;
    const auto poll = fitting <= kMaxPoll ? std::max<std::chrono::nanoseconds>(kPoll, fitting) : kPoll;
    const uint64_t seen = next_ticket;
    lock.unlock();
    const auto until = std::chrono::steady_clock::now() + poll;
    while (queued_ticket.load(std::memory_order_relaxed) == seen && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    lock.lock();
  }

  // Queues `task` on stream `s` and answers its ticket.
  uint64_t Submit(Stream* s, Task&& task) {
    std::lock_guard<std::mutex> lock(q_mu);
    return SubmitLocked(s, std::move(task));
  }
  uint64_t SubmitLocked(Stream* s, Task&& task) {
    uint64_t ticket = next_ticket++;
    queued_ticket.store(next_ticket, std::memory_order_relaxed);
    s->last_ticket = ticket;
    task.stream = s;
    task.ticket = ticket;
    queue.Push(std::move(task));
    if (executor_sleeping) {
      executor_sleeping = false;  // One wakeup is enough: a futex wake costs microseconds, and a batch queues many.
      q_cv.notify_one();
    }
    return ticket;
  }
  uint64_t Submit(Stream* s, std::function<void()> run) {
    Task task;
    task.run = std::move(run);
    return Submit(s, std::move(task));
  }

  // Whether all work queued so far has run. REQUIRES: q_mu.
  bool DrainedLocked() const { return done_ticket + 1 >= next_ticket; }

  // Runs `callback` once the queue is past all work queued so far: here and now if it already is, else queued on
  // `s` behind it, as a notice (done before it runs).
  CallStatus CallWhenDone(Stream* s, std::function<void()> callback) {
    if (CallStatus st = Sticky(); !st.ok()) return st;
    {
      std::lock_guard<std::mutex> lock(q_mu);
      if (!DrainedLocked()) {
        Task task;
        task.run = std::move(callback);
        task.notice = true;
        SubmitLocked(s, std::move(task));
        return Sticky();
      }
    }
    callback();
    return CallStatus::Ok();
  }

  // Waits until the queue is past `ticket`. REQUIRES: `lock` holds q_mu.
  void WaitDone(std::unique_lock<std::mutex>& lock, uint64_t ticket) {
    while (done_ticket < ticket) {
      wake_ticket = std::min(wake_ticket, ticket);
      done_cv.wait(lock);
    }
  }

  void WaitTicket(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(q_mu);
    WaitDone(lock, ticket);
  }

  void WaitStream(Stream* s) {
    std::unique_lock<std::mutex> lock(q_mu);
    WaitDone(lock, s->last_ticket);
  }

  void WaitAll() {
    std::unique_lock<std::mutex> lock(q_mu);
    WaitDone(lock, next_ticket - 1);
  }

  // Runs a kernel launch on the executor.
  void RunLaunch(internal::Launch& launch) {
    if (!Sticky().ok()) return;  // A faulted context runs nothing more.
    if (cancel.load()) return;
    ExecutionGate* gate = options.gate.get();
    if (launch.cooperative) {
      // Grid sync's workspace (cooperative_groups keeps its barrier there), from the device heap that kernels may
      // touch, zeroed for each launch.
      constexpr uint64_t kWorkspaceBytes = 256;
      launch.grid_workspace = HeapAlloc(kWorkspaceBytes);
      if (launch.grid_workspace == 0) {
        SetSticky(CallStatus(cu::kLaunchOutOfResources, "no device heap left for grid sync's workspace"));
        return;
      }
      std::memset(reinterpret_cast<void*>(launch.grid_workspace), 0, kWorkspaceBytes);
    }
    if (gate) gate->Enter(cancel);
    internal::LaunchOutcome out;
    Busy(kKernelBusy, [&] { out = runner->Run(launch, *this, &cancel, gate); });
    if (launch.grid_workspace != 0) HeapFree(launch.grid_workspace);
    if (gate) {
      bool more_queued;
      {
        std::lock_guard<std::mutex> lock(q_mu);
        more_queued = !queue.empty();
      }
      gate->Leave(more_queued);
    }
    instructions += out.instructions;
    Emit(out.printf_output);
    if (!out.status.ok()) SetSticky(out.status);
  }

  Stream* StreamOf(Stream* s) { return s ? s : &default_stream; }

  CallStatus Sticky() {
    if (!faulted.load(std::memory_order_acquire)) return CallStatus::Ok();
    std::lock_guard<std::mutex> lock(sticky_mu);
    return sticky;
  }
  void SetSticky(const CallStatus& s) {
    std::lock_guard<std::mutex> lock(sticky_mu);
    if (sticky.ok()) sticky = s;
    faulted.store(!sticky.ok(), std::memory_order_release);
  }

  void Emit(const std::string& text) {
    if (text.empty()) return;
    std::lock_guard<std::mutex> lock(sink_mu);
    sink(text);
  }
};

namespace {

// Places a module's variables in the device's memory: first fit, or (`placements`, a module restored elsewhere) at
// the addresses it had there, in the order the compiler asks for them.
class ArenaAllocator : public internal::GlobalAllocator {
 public:
  // `keep`: the memory holds the variables' values already (Device::LoadModuleAt's memory_kept): nothing is written.
  explicit ArenaAllocator(Device::Impl& impl, const std::vector<uint64_t>* placements = nullptr, bool keep = false)
      : impl_(impl), placements_(placements), keep_(keep) {}
  uint64_t Allocate(uint64_t bytes, uint64_t align) override {
    std::lock_guard<std::mutex> lock(impl_.mem_mu);
    uint64_t need = AlignUp(std::max<uint64_t>(bytes, 1), kAlignment);
    if (need > impl_.FreeBytesLocked()) return 0;
    uint64_t a = 0;
    if (placements_ == nullptr) {
      a = impl_.AllocateLocked(bytes, std::max<uint64_t>(align, kAlignment));
    } else if (made.size() < placements_->size() && (*placements_)[made.size()] % std::max<uint64_t>(align, 1) == 0) {
      a = impl_.AllocateAtLocked((*placements_)[made.size()], bytes);
      misplaced = misplaced || a == 0;
    } else {
      misplaced = true;
    }
    if (a) {
      impl_.used += need;
      impl_.module_bytes += need;
      made.push_back(a);
    }
    return a;
  }
  void Write(uint64_t address, const void* data, uint64_t bytes) override {
    if (!keep_) std::memcpy(reinterpret_cast<void*>(address), data, bytes);
  }
  void Zero(uint64_t address, uint64_t bytes) override {
    if (!keep_) std::memset(reinterpret_cast<void*>(address), 0, bytes);
  }
  std::vector<uint64_t> made;
  bool misplaced = false;  // A variable could not have its place: taken, misaligned, or beyond the placements.

 private:
  Device::Impl& impl_;
  const std::vector<uint64_t>* placements_;
  const bool keep_;
};

std::string HexAddress(uint64_t address) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

CallStatus BadValue(const std::string& m) { return CallStatus(cu::kInvalidValue, m); }

}  // namespace

Device::Device(DeviceOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Device::~Device() {
  impl_->cancel = true;  // A kernel that would never end must not hold up its device's destruction.
  impl_->WaitAll();
  for (Module* m : impl_->modules) delete m;
  for (Stream* s : impl_->streams) delete s;
  for (Event* e : impl_->events) delete e;
}

const DeviceProperties& Device::properties() const { return impl_->props; }

CallStatus Device::StartupStatus() const {
  if (impl_->arena) return CallStatus::Ok();
  return CallStatus(cu::kOutOfMemory, "the emulated device could not reserve " +
                                           std::to_string(impl_->arena_size) + " bytes of address space" +
                                           (impl_->options.base_address ? " at the requested address" : ""));
}

CallStatus Device::Malloc(uint64_t bytes, uint64_t* device_ptr) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (!device_ptr) return BadValue("null output pointer");
  *device_ptr = 0;
  if (!impl_->arena) return CallStatus(cu::kOutOfMemory, "the emulated device could not reserve its memory");
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  if (bytes == 0) return BadValue("cannot allocate 0 bytes");
  uint64_t need = 0;
  if (CallStatus s = impl_->RoomLocked(bytes, &need); !s.ok()) return s;
  uint64_t a = impl_->AllocateLocked(bytes, kAlignment);
  if (!a) return CallStatus(cu::kOutOfMemory, "out of memory (fragmented)");
  impl_->used += need;
  *device_ptr = a;
  return CallStatus::Ok();
}

CallStatus Device::MallocAt(uint64_t address, uint64_t bytes) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (bytes == 0) return BadValue("cannot allocate 0 bytes");
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  uint64_t need = 0;
  if (CallStatus s = impl_->RoomLocked(bytes, &need); !s.ok()) return s;
  if (impl_->AllocateAtLocked(address, bytes) == 0) {
    return BadValue("[" + HexAddress(address) + ", +" + std::to_string(bytes) + ") is not free memory of this device");
  }
  impl_->used += need;
  return CallStatus::Ok();
}

CallStatus Device::Free(uint64_t device_ptr) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (device_ptr == 0) return CallStatus::Ok();
  impl_->WaitAll();  // cudaFree synchronises: no running kernel may still use the memory.
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  auto it = impl_->live.find(device_ptr);
  if (it == impl_->live.end() || impl_->heap_blocks.count(device_ptr)) {
    return BadValue("free of an address that is not the start of an allocation");
  }
  impl_->used -= AlignUp(std::max<uint64_t>(it->second, 1), kAlignment);
  impl_->FreeLocked(device_ptr);
  return CallStatus::Ok();
}

CallStatus Device::FreeAsync(uint64_t device_ptr, Stream* stream) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (device_ptr == 0) return CallStatus::Ok();
  {
    std::lock_guard<std::mutex> lock(impl_->mem_mu);
    if (!impl_->live.count(device_ptr) || impl_->heap_blocks.count(device_ptr)) {
      return BadValue("free of an address that is not the start of an allocation");
    }
  }
  Impl* impl = impl_.get();
  impl->Submit(impl->StreamOf(stream), [impl, device_ptr] {
    std::lock_guard<std::mutex> lock(impl->mem_mu);
    auto it = impl->live.find(device_ptr);
    if (it == impl->live.end()) return;  // Freed twice: the first one won.
    impl->used -= AlignUp(std::max<uint64_t>(it->second, 1), kAlignment);
    impl->FreeLocked(device_ptr);
  });
  return CallStatus::Ok();
}

void Device::MemInfo(uint64_t* free_bytes, uint64_t* total_bytes) const {
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  if (total_bytes) *total_bytes = impl_->options.memory_bytes;
  if (free_bytes) *free_bytes = impl_->options.memory_bytes - std::min(impl_->options.memory_bytes, impl_->used);
}

uint64_t Device::ModuleBytes() const {
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  return impl_->module_bytes;
}

CallStatus Device::ReserveAddress(uint64_t bytes, uint64_t alignment, uint64_t hint, uint64_t* address) {
  Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mem_mu);
  if (!d.vmm_base) return CallStatus(cu::kOutOfMemory, "this emulated device has no address space for reservations");
  if (bytes == 0 || bytes % kMappingGranularity != 0) return BadValue("a reservation's size must be a multiple of 2 MiB");
  uint64_t base = reinterpret_cast<uint64_t>(d.vmm_base), offset = 0;
  if (hint != 0 && hint % kMappingGranularity == 0 && d.InVirtualRegion(hint, bytes) &&
      (alignment <= 1 || hint % alignment == 0) && d.vmm_free_.TakeAt(hint - base, bytes)) {
    *address = hint;
    return CallStatus::Ok();
  }
  if (!d.vmm_free_.Take(bytes, std::max(alignment, kMappingGranularity), &offset)) {
    return CallStatus(cu::kOutOfMemory, "no free address range of " + std::to_string(bytes) +
                                             " bytes left for reservations (" + std::to_string(d.vmm_size) +
                                             " bytes in all)");
  }
  *address = base + offset;
  return CallStatus::Ok();
}

CallStatus Device::FreeAddress(uint64_t address, uint64_t bytes) {
  Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mem_mu);
  if (!d.InVirtualRegion(address, bytes)) return BadValue("not a reservation of this device");
  d.vmm_free_.Give(address - reinterpret_cast<uint64_t>(d.vmm_base), bytes);
  return CallStatus::Ok();
}

CallStatus Device::CreatePhysical(uint64_t bytes, uint64_t* handle) {
  Impl& d = *impl_;
  if (CallStatus s = d.Sticky(); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(d.mem_mu);
  if (bytes == 0 || bytes % kMappingGranularity != 0) {
    return BadValue("physical memory comes in multiples of 2 MiB, not " + std::to_string(bytes) + " bytes");
  }
  uint64_t capacity = d.Limit();
  if (bytes > d.FreeBytesLocked()) {
    return CallStatus(cu::kOutOfMemory, "out of memory: " + std::to_string(bytes) + " bytes of physical memory "
                                         "requested, " + std::to_string(d.FreeBytesLocked()) + " bytes free");
  }
  if (d.physical_fd < 0) {
    d.physical_fd = memfd_create("gpupool-emu-physical", MFD_CLOEXEC);
    if (d.physical_fd < 0 || ftruncate(d.physical_fd, static_cast<off_t>(AlignUp(capacity, kMappingGranularity))) != 0) {
      if (d.physical_fd >= 0) close(d.physical_fd);
      d.physical_fd = -1;
      return CallStatus(cu::kOutOfMemory, "the emulated device could not create its physical memory (memfd)");
    }
    d.physical_free_.Reset(AlignUp(capacity, kMappingGranularity));
  }
  uint64_t offset = 0;
  if (!d.physical_free_.Take(bytes, kMappingGranularity, &offset)) {
    return CallStatus(cu::kOutOfMemory, "out of memory (physical memory fragmented)");
  }
  d.used += bytes;
  *handle = d.next_physical++;
  d.physical[*handle] = {offset, bytes};
  return CallStatus::Ok();
}

CallStatus Device::ReleasePhysical(uint64_t handle) {
  Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mem_mu);
  auto it = d.physical.find(handle);
  if (it == d.physical.end()) return BadValue("unknown physical memory handle");
  auto [offset, bytes] = it->second;
  // The pages go back to the host at once (a mapping, if the caller kept one, would read zeros).
  fallocate(d.physical_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(bytes));
  d.physical_free_.Give(offset, bytes);
  d.used -= bytes;
  d.physical.erase(it);
  return CallStatus::Ok();
}

CallStatus Device::Map(uint64_t address, uint64_t bytes, uint64_t handle, uint64_t offset) {
  Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mem_mu);
  auto it = d.physical.find(handle);
  if (it == d.physical.end()) return BadValue("unknown physical memory handle");
  if (bytes == 0 || bytes % kMappingGranularity != 0 || offset % kMappingGranularity != 0 ||
      address % kMappingGranularity != 0) {
    return BadValue("mappings start and end on 2 MiB boundaries");
  }
  if (offset > it->second.second || bytes > it->second.second - offset) {
    return BadValue("the mapping runs past the end of its physical memory");
  }
  if (!d.InVirtualRegion(address, bytes)) return BadValue("the mapping lies outside the reserved address space");
  void* p = mmap(reinterpret_cast<void*>(address), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                 d.physical_fd, static_cast<off_t>(it->second.first + offset));
  if (p == MAP_FAILED) return CallStatus(cu::kOutOfMemory, "the emulated device could not map the memory");
  d.mapped[address] = bytes;
  d.ranges_cache.reset();
  return CallStatus::Ok();
}

CallStatus Device::Unmap(uint64_t address, uint64_t bytes) {
  Impl& d = *impl_;
  d.WaitAll();  // No running kernel or copy may lose its memory.
  std::lock_guard<std::mutex> lock(d.mem_mu);
  if (!d.InVirtualRegion(address, bytes)) return BadValue("the range lies outside the reserved address space");
  for (auto it = d.mapped.lower_bound(address); it != d.mapped.end() && it->first < address + bytes;) {
    it = d.mapped.erase(it);
  }
  d.ranges_cache.reset();
  if (!d.Unreserve(address, bytes)) return CallStatus(cu::kOutOfMemory, "the emulated device could not unmap");
  return CallStatus::Ok();
}

CallStatus Device::AddressRange(uint64_t device_ptr, uint64_t* base, uint64_t* size) const {
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  auto it = impl_->live.upper_bound(device_ptr);
  if (it == impl_->live.begin()) return BadValue("not a device address");
  --it;
  if (device_ptr >= it->first + std::max<uint64_t>(it->second, 1)) return BadValue("not a device address");
  if (base) *base = it->first;
  if (size) *size = it->second;
  return CallStatus::Ok();
}

namespace {

// Runs `op` on the stream (async) or in order and waits for it (sync).
template <typename Op>
CallStatus Enqueue(Device::Impl& impl, Stream* stream, bool async, Op op) {
  Stream* s = impl.StreamOf(stream);
  uint64_t ticket = impl.Submit(s, std::move(op));
  if (!async) impl.WaitTicket(ticket);
  return impl.Sticky();
}

// Enqueue for copies and memsets: their time counts as the device's memory activity (Utilization).
template <typename Op>
CallStatus EnqueueMemoryWork(Device::Impl& impl, Stream* stream, bool async, Op op) {
  Device::Impl* d = &impl;
  return Enqueue(impl, stream, async, [d, op] { d->Busy(Device::Impl::kMemoryBusy, op); });
}

}  // namespace

CallStatus Device::CopyToDevice(uint64_t dst, const void* src, size_t bytes, Stream* stream, bool async) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (bytes == 0) return CallStatus::Ok();
  if (!impl_->Contains(dst, bytes)) return BadValue("copy destination is not inside one device allocation");
  return EnqueueMemoryWork(*impl_, stream, async,
                           [=] { std::memcpy(reinterpret_cast<void*>(dst), src, bytes); });
}

CallStatus Device::CopyFromDevice(void* dst, uint64_t src, size_t bytes, Stream* stream, bool async) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (bytes == 0) return CallStatus::Ok();
  if (!impl_->Contains(src, bytes)) return BadValue("copy source is not inside one device allocation");
  return EnqueueMemoryWork(*impl_, stream, async,
                           [=] { std::memcpy(dst, reinterpret_cast<const void*>(src), bytes); });
}

CallStatus Device::CopyOnDevice(uint64_t dst, uint64_t src, size_t bytes, Stream* stream, bool async) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (bytes == 0) return CallStatus::Ok();
  if (!impl_->Contains(dst, bytes) || !impl_->Contains(src, bytes)) {
    return BadValue("device-to-device copy outside an allocation");
  }
  return EnqueueMemoryWork(*impl_, stream, async, [=] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  });
}

CallStatus Device::Memset(uint64_t dst, uint32_t value, size_t element_size, size_t count, Stream* stream,
                         bool async) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (element_size != 1 && element_size != 2 && element_size != 4) return BadValue("memset element size must be 1, 2 or 4");
  if (count == 0) return CallStatus::Ok();
  if (count > UINT64_MAX / element_size) return BadValue("memset size overflows");
  if (!impl_->Contains(dst, element_size * count)) return BadValue("memset outside a device allocation");
  return EnqueueMemoryWork(*impl_, stream, async, [=] {
    uint8_t* p = reinterpret_cast<uint8_t*>(dst);
    if (element_size == 1) {
      std::memset(p, static_cast<int>(value & 0xff), count);
    } else {
      for (size_t i = 0; i < count; ++i) std::memcpy(p + i * element_size, &value, element_size);
    }
  });
}

CallStatus Device::LoadModule(const void* image, size_t size, Module** module) {
  if (!image || !module) return BadValue("null image or output");
  auto ptx = PtxForDevice(image, size, impl_->props.cc_major * 10 + impl_->props.cc_minor);
  if (!ptx.ok()) return ptx.status();
  return LoadPtx(ptx.value(), module);
}

CallStatus Device::LoadPtx(std::string_view ptx, Module** module) { return LoadPtxPlaced(ptx, nullptr, module); }

CallStatus Device::LoadModuleAt(const void* image, size_t size, const std::vector<uint64_t>& placements,
                                Module** module, bool memory_kept) {
  if (!image || !module) return BadValue("null image or output");
  auto ptx = PtxForDevice(image, size, impl_->props.cc_major * 10 + impl_->props.cc_minor);
  if (!ptx.ok()) return ptx.status();
  return LoadPtxPlaced(ptx.value(), &placements, module, memory_kept);
}

std::vector<uint64_t> Device::ModulePlacements(const Module* module) const { return module->allocations; }

CallStatus Device::LoadPtxPlaced(std::string_view ptx, const std::vector<uint64_t>* placements, Module** module,
                                 bool memory_kept) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (!module) return BadValue("null output");
  // Several modules one after another are the translation units of a device link (-rdc=true): joined here.
  std::vector<ptx::Module> units;
  for (std::string_view unit : SplitPtxModules(ptx)) {
    auto parsed = ParsePtx(unit);
    if (!parsed.ok()) return parsed.status();
    units.push_back(std::move(parsed).value());
  }
  auto parsed = LinkPtxModules(std::move(units));
  if (!parsed.ok()) return parsed.status();
  ArenaAllocator alloc(*impl_, placements, memory_kept);
  auto program = internal::Compile(parsed.value(), alloc);
  if (alloc.misplaced) {
    program = CallStatus(cu::kInvalidValue, "variable " + std::to_string(alloc.made.size()) +
                                                " of the module cannot have the place it had when checkpointed");
  } else if (program.ok() && placements != nullptr && alloc.made.size() != placements->size()) {
    program = CallStatus(cu::kInvalidValue, "the module places " + std::to_string(alloc.made.size()) +
                                                " variable(s), not the " + std::to_string(placements->size()) +
                                                " it had where it was checkpointed");
  }
  if (!program.ok()) {
    std::lock_guard<std::mutex> lock(impl_->mem_mu);
    for (uint64_t a : alloc.made) impl_->FreeModuleBytesLocked(a);
    return program.status();
  }
  auto m = std::make_unique<Module>();
  m->program = std::move(program).value();
  m->allocations = alloc.made;
  for (size_t i = 0; i < m->program.functions.size(); ++i) {
    const internal::Function& f = m->program.functions[i];
    if (!f.is_entry || !f.defined) continue;
    auto fn = std::make_unique<Function>();
    fn->module = m.get();
    fn->index = static_cast<int>(i);
    fn->name = f.name;
    fn->params = f.kernel_params;
    m->functions[f.name] = fn.get();
    m->owned.push_back(std::move(fn));
  }
  *module = m.release();
  std::lock_guard<std::mutex> lock(impl_->q_mu);
  impl_->modules.insert(*module);
  return CallStatus::Ok();
}

CallStatus Device::UnloadModule(Module* module) {
  {
    std::lock_guard<std::mutex> lock(impl_->q_mu);
    if (!impl_->modules.erase(module)) return CallStatus(cu::kInvalidHandle, "unknown module");
  }
  impl_->WaitAll();
  {
    std::lock_guard<std::mutex> lock(impl_->mem_mu);
    for (uint64_t a : module->allocations) {
      if (impl_->live.count(a)) impl_->FreeModuleBytesLocked(a);
    }
  }
  delete module;
  return CallStatus::Ok();
}

CallStatus Device::GetFunction(Module* module, const std::string& name, Function** function) {
  if (!module || !function) return BadValue("null module or output");
  auto it = module->functions.find(name);
  if (it == module->functions.end()) return CallStatus(cu::kNotFound, "no kernel named '" + name + "' in the module");
  *function = it->second;
  return CallStatus::Ok();
}

CallStatus Device::GetGlobal(Module* module, const std::string& name, uint64_t* device_ptr, size_t* bytes) {
  if (!module) return BadValue("null module");
  auto it = module->program.globals.find(name);
  if (it == module->program.globals.end()) {
    return CallStatus(cu::kNotFound, "no global or constant variable named '" + name + "' in the module");
  }
  if (device_ptr) *device_ptr = it->second.address;
  if (bytes) *bytes = it->second.size;
  return CallStatus::Ok();
}

const std::vector<ParamInfo>& Device::Params(const Function* function) { return function->params; }
const std::string& Device::Name(const Function* function) { return function->name; }

namespace {

// Registers per thread that let `blocks` blocks of `threads` threads share `register_file` registers, allocated
// per warp in units of 256 as GPUs of compute capability 5.0 to 12.x allocate them (NVIDIA's occupancy calculator,
// cuda_occupancy.h), in the whole multiples of 8 a warp's 256-register unit divides into.
uint32_t RegistersThatFit(uint64_t register_file, uint64_t threads, uint64_t blocks) {
  constexpr uint64_t kWarpAllocationUnit = 256, kLanes = 32;
  const uint64_t warps = (threads + kLanes - 1) / kLanes * std::max<uint64_t>(blocks, 1);
  const uint64_t per_warp = register_file / std::max<uint64_t>(warps, 1) / kWarpAllocationUnit * kWarpAllocationUnit;
  return static_cast<uint32_t>(std::min<uint64_t>(per_warp / kLanes, UINT32_MAX));
}

}  // namespace

int Device::PtxVersion(const Function* function) { return function->module->program.target; }

void Device::Attributes(const Function* function, int* static_shared_bytes, int* local_bytes, int* num_regs) const {
  const internal::Function& f = function->module->program.functions[static_cast<size_t>(function->index)];
  if (static_shared_bytes) *static_shared_bytes = static_cast<int>(f.static_shared_bytes);
  if (local_bytes) *local_bytes = static_cast<int>(f.local_area);
  if (!num_regs) return;
  constexpr uint32_t kMinRegisters = 16, kMaxRegisters = 255;  // What ptxas gives a thread, at least and at most.
  uint32_t registers = std::min(kMaxRegisters, std::max(kMinRegisters, f.num_regs));
  // A bounded kernel always launches at its bounds on a GPU: ptxas spills rather than exceed them. Reporting the
  // virtual count instead makes the occupancy calculator find no block fits (CUB then divides by zero blocks).
  const DeviceProperties& p = impl_->props;
  if (f.bound_threads != 0) {
    const uint64_t threads = std::min<uint64_t>(f.bound_threads, static_cast<uint64_t>(p.max_threads_per_block));
    registers = std::min(registers, RegistersThatFit(static_cast<uint64_t>(p.registers_per_block), threads, 1));
    if (f.bound_blocks_per_sm != 0) {
      registers = std::min(registers, RegistersThatFit(static_cast<uint64_t>(p.registers_per_multiprocessor), threads,
                                                       f.bound_blocks_per_sm));
    }
  }
  if (f.bound_registers != 0) registers = std::min(registers, f.bound_registers);
  if (f.bound_threads == 0 && f.bound_blocks_per_sm == 0 && f.bound_registers == 0) {
    // No bounds: what ptxas would allocate is unknown here (the PTX's virtual registers are many more than a GPU
    // thread's live values), and the interpreter holds any number. The count at which a block of the device's
    // largest size fits keeps occupancy calculations from refusing launches a GPU takes (a cooperative grid sized
    // by cudaOccupancyMaxActiveBlocksPerMultiprocessor had no block per SM at 255).
    registers = std::min(registers, RegistersThatFit(static_cast<uint64_t>(p.registers_per_block),
                                                     static_cast<uint64_t>(p.max_threads_per_block), 1));
  }
  *num_regs = static_cast<int>(std::max(registers, kMinRegisters));
}

int Device::MaxThreadsPerBlock(const Function* function) const {
  const internal::Program& prog = function->module->program;
  const internal::Function& f = prog.functions[static_cast<size_t>(function->index)];
  uint32_t most = static_cast<uint32_t>(impl_->props.max_threads_per_block);
  if (f.bound_threads > 0) most = std::min(most, f.bound_threads);
  // The footprint grows with the block's warps: the largest that fits, found by bisection, in whole warps unless
  // not even one warp fits.
  auto fits = [&](uint32_t threads) {
    internal::BlockLayout layout;
    return internal::LayBlock(prog, function->index, Dim3{threads, 1, 1}, 0, f.kernel_param_bytes, &layout);
  };
  if (fits(most)) return static_cast<int>(most);
  uint32_t low = 0, high = most;  // fits(low) or low == 0; !fits(high).
  while (high - low > 1) {
    uint32_t mid = low + (high - low) / 2;
    (fits(mid) ? low : high) = mid;
  }
  const uint32_t warp = static_cast<uint32_t>(impl_->props.warp_size);
  return static_cast<int>(low >= warp ? low / warp * warp : low);
}

CallStatus Device::Launch(Function* function, const LaunchConfig& config, void** params) {
  if (!function) return CallStatus(cu::kInvalidHandle, "null function");
  const auto& layout = function->params;
  const internal::Function& f = function->module->program.functions[static_cast<size_t>(function->index)];
  // Packed on the stack when it fits (nearly always), so that a launch allocates nothing.
  uint8_t small[internal::ParamBuffer::kInlineBytes];
  std::vector<uint8_t> large;
  uint8_t* buffer = small;
  if (f.kernel_param_bytes > sizeof(small)) {
    large.resize(f.kernel_param_bytes);
    buffer = large.data();
  }
  std::memset(buffer, 0, f.kernel_param_bytes);
  if (!layout.empty() && !params) return BadValue("kernel takes parameters but none were given");
  for (size_t i = 0; i < layout.size(); ++i) {
    if (!params[i]) return BadValue("kernel parameter " + std::to_string(i) + " is a null pointer");
    std::memcpy(buffer + layout[i].offset, params[i], layout[i].size);
  }
  return LaunchPacked(function, config, buffer, f.kernel_param_bytes);
}

CallStatus Device::LaunchPacked(Function* function, const LaunchConfig& config, const void* buffer, size_t bytes) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (!function) return CallStatus(cu::kInvalidHandle, "null function");
  const DeviceProperties& p = impl_->props;
  const Dim3& b = config.block;
  const Dim3& g = config.grid;
  uint64_t threads = static_cast<uint64_t>(b.x) * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0) {
    return BadValue("grid and block dimensions must be at least 1");
  }
  if (threads > static_cast<uint64_t>(p.max_threads_per_block) || b.x > p.max_block_dim.x ||
      b.y > p.max_block_dim.y || b.z > p.max_block_dim.z) {
    return BadValue("block of " + std::to_string(threads) + " threads exceeds the device's limits");
  }
  if (g.x > p.max_grid_dim.x || g.y > p.max_grid_dim.y || g.z > p.max_grid_dim.z) {
    return BadValue("grid dimensions exceed the device's limits");
  }
  const internal::Program& prog = function->module->program;
  if (uint32_t bound = prog.functions[static_cast<size_t>(function->index)].bound_threads;
      bound > 0 && threads > bound) {
    return CallStatus(cu::kLaunchOutOfResources,
                     "too many resources requested for launch: a block of " + std::to_string(threads) +
                         " threads of '" + function->name + "', whose launch bounds (.maxntid/.reqntid) allow " +
                         std::to_string(bound));
  }
  const internal::Function& entry = prog.functions[static_cast<size_t>(function->index)];
  // The kernel's own static shared memory (not the module's), as a GPU counts it.
  const uint64_t block_shared = uint64_t{entry.static_shared_bytes} + config.shared_bytes;
  if (block_shared > static_cast<uint64_t>(p.shared_memory_per_block_optin)) {
    return CallStatus(cu::kLaunchOutOfResources,
                     "shared memory of " + std::to_string(block_shared) + " bytes for '" + function->name +
                         "' exceeds the per-block limit of " + std::to_string(p.shared_memory_per_block_optin));
  }
  if (bytes > std::max<uint64_t>(entry.kernel_param_bytes, internal::kMaxKernelParamBytes)) {
    return BadValue("a parameter buffer of " + std::to_string(bytes) + " bytes for '" + function->name +
                    "', which takes " + std::to_string(entry.kernel_param_bytes) + "; a GPU takes at most " +
                    std::to_string(internal::kMaxKernelParamBytes));
  }
  internal::BlockLayout layout;
  if (!internal::LayBlock(prog, function->index, b, config.shared_bytes, bytes, &layout)) {
    return CallStatus(cu::kLaunchOutOfResources,
                     "too many resources requested for launch: a block of " + std::to_string(threads) +
                         " threads of '" + function->name + "' needs " + std::to_string(layout.footprint) +
                         " bytes of emulator memory (registers, local and parameter stacks, shared memory); the "
                         "emulator holds at most " + std::to_string(internal::kMaxBlockFootprintBytes) +
                         " per block: use smaller blocks");
  }
  if (config.cooperative) {
    // Blocks one multiprocessor holds at once, by threads (the emulated device has no register limit) and shared
    // memory, times the multiprocessors: what cudaOccupancyMaxActiveBlocksPerMultiprocessor answers for it.
    uint64_t shared = block_shared + static_cast<uint64_t>(p.reserved_shared_memory_per_block);
    uint64_t per_sm = std::min<uint64_t>(p.max_blocks_per_multiprocessor,
                                         static_cast<uint64_t>(p.max_threads_per_multiprocessor) / threads);
    if (shared > 0) per_sm = std::min<uint64_t>(per_sm, p.shared_memory_per_multiprocessor / shared);
    uint64_t ctas = static_cast<uint64_t>(g.x) * g.y * g.z;
    // Every block is held at once, each in a context of its own (exec.h).
    if (ctas * layout.footprint > internal::kMaxLaunchFootprintBytes) {
      return CallStatus(cu::kCooperativeLaunchTooLarge,
                       "a cooperative grid of " + std::to_string(ctas) + " blocks of " +
                           std::to_string(layout.footprint) + " bytes of emulator memory each does not fit the " +
                           std::to_string(internal::kMaxLaunchFootprintBytes) + " the emulator holds at once");
    }
    if (ctas > per_sm * static_cast<uint64_t>(p.multiprocessor_count)) {
      return CallStatus(cu::kCooperativeLaunchTooLarge,
                       "a cooperative grid of " + std::to_string(ctas) + " blocks does not fit the device at once (" +
                           std::to_string(per_sm * static_cast<uint64_t>(p.multiprocessor_count)) + " at most)");
    }
  }
  Impl::Task task;
  internal::Launch& launch = task.launch;
  launch.program = &prog;
  launch.cooperative = config.cooperative;
  launch.warp_major = impl_->options.warp_major;
  launch.function = function->index;
  launch.grid = g;
  launch.block = b;
  launch.dynamic_shared = config.shared_bytes;
  const internal::Function& f = prog.functions[static_cast<size_t>(function->index)];
  launch.params.Assign(buffer, bytes, f.kernel_param_bytes);
  launch.grid_id = ++impl_->grid_ids;
  impl_->Submit(impl_->StreamOf(config.stream), std::move(task));
  return impl_->Sticky();
}

CallStatus Device::LaunchHostFunc(Stream* stream, std::function<void()> callback) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  return Enqueue(*impl_, stream, true, std::move(callback));
}

CallStatus Device::WhenReached(Stream* stream, std::function<void()> callback) {
  // Past all work queued so far, not only the stream's: a callback queued behind it ran after everything before it
  // (one queue for every stream), and callers count on that (memory a free on the default stream gives back is
  // back once a wait on another stream returns).
  return impl_->CallWhenDone(impl_->StreamOf(stream), std::move(callback));
}

void Device::WhenNearlyReached(Stream* stream, std::chrono::nanoseconds lead, std::function<void()> soon) {
  (void)stream;  // One queue for every stream: the work queued so far is the stream's and whatever came before.
  {
    std::lock_guard<std::mutex> lock(impl_->q_mu);
    if (impl_->DrainedLocked()) return;
    const uint64_t last = impl_->next_ticket - 1, left = last - impl_->done_ticket;  // The running piece included.
    // The executor looks only as it starts each piece: work whose end may be within the lead once the running piece
    // is done (a copy's wait, a few small kernels) is near now.
    if (impl_->PiecesTake(left - 1) > lead) {
      impl_->soon_notices.push_back({last, lead, std::move(soon)});
      return;
    }
  }
  soon();
}

// Boilerplate by nature, with the events' and modules' below: an object made or ended under the queue's lock.
CallStatus Device::CreateStream(Stream** stream) {
  if (!stream) return BadValue("null output");
  *stream = new Stream();
  std::lock_guard<std::mutex> lock(impl_->q_mu);
  impl_->streams.insert(*stream);
  return CallStatus::Ok();
}

CallStatus Device::DestroyStream(Stream* stream) {
  if (!stream) return CallStatus(cu::kInvalidHandle, "null stream");
  {
    std::lock_guard<std::mutex> lock(impl_->q_mu);
    if (!impl_->streams.count(stream)) return CallStatus(cu::kInvalidHandle, "unknown stream");
  }
  impl_->WaitStream(stream);  // Pending work completes; then the handle goes.
  std::lock_guard<std::mutex> lock(impl_->q_mu);
  impl_->streams.erase(stream);
  delete stream;
  return CallStatus::Ok();
}

CallStatus Device::StreamSynchronize(Stream* stream) {
  impl_->WaitStream(impl_->StreamOf(stream));
  return impl_->Sticky();
}

CallStatus Device::StreamQuery(Stream* stream) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  Stream* s = impl_->StreamOf(stream);
  std::lock_guard<std::mutex> lock(impl_->q_mu);
  return impl_->done_ticket >= s->last_ticket ? CallStatus::Ok() : CallStatus(cu::kNotReady, "stream busy");
}

CallStatus Device::StreamWaitEvent(Stream* stream, Event* event) {
  // Every stream shares one in-order queue, so work submitted after the event's record already runs after it.
  // TODO(perf): independent streams could overlap on separate queues.
  if (!event) return CallStatus(cu::kInvalidHandle, "null event");
  return impl_->Sticky();
}

CallStatus Device::WaitValue(Stream* stream, uint64_t address, uint64_t value, unsigned width, uint32_t condition) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if ((width != 4 && width != 8) || address % width != 0 || condition > 3) {
    return BadValue("stream wait: 4 or 8 aligned bytes and a condition of 0..3");
  }
  if (!impl_->Contains(address, width)) return BadValue("stream wait address is not inside one device allocation");
  Impl* impl = impl_.get();
  return Enqueue(*impl_, stream, true, [impl, address, value, width, condition] {
    uint64_t now = width == 4 ? __atomic_load_n(reinterpret_cast<const uint32_t*>(address), __ATOMIC_ACQUIRE)
                              : __atomic_load_n(reinterpret_cast<const uint64_t*>(address), __ATOMIC_ACQUIRE);
    bool met = false;
    switch (condition) {
      case 0: met = width == 4 ? static_cast<int32_t>(static_cast<uint32_t>(now) - static_cast<uint32_t>(value)) >= 0
                               : static_cast<int64_t>(now - value) >= 0;
        break;
      case 1: met = now == value; break;
      case 2: met = (now & value) != 0; break;
      case 3: met = (~(now | value) & (width == 4 ? 0xffffffffull : ~0ull)) != 0; break;
    }
    if (met) return;
    static constexpr const char* kNames[] = {"GEQ", "EQ", "AND", "NOR"};
    char message[320];
    std::snprintf(message, sizeof(message),
                  "stream wait on 0x%llx (%s 0x%llx) found 0x%llx: the emulated device runs every stream in one "
                  "order, so no work queued after the wait can change it; it would wait forever",
                  static_cast<unsigned long long>(address), kNames[condition], static_cast<unsigned long long>(value),
                  static_cast<unsigned long long>(now));
    impl->SetSticky(CallStatus(cu::kLaunchTimeout, message));
  });
}

CallStatus Device::CreateEvent(Event** event) {
  if (!event) return BadValue("null output");
  *event = new Event();
  std::lock_guard<std::mutex> lock(impl_->q_mu);
  impl_->events.insert(*event);
  return CallStatus::Ok();
}

CallStatus Device::DestroyEvent(Event* event) {
  {
    std::lock_guard<std::mutex> lock(impl_->q_mu);
    if (!impl_->events.count(event)) return CallStatus(cu::kInvalidHandle, "unknown event");
  }
  if (event->recorded) impl_->WaitTicket(event->ticket);  // A pending record still writes to it.
  {
    std::lock_guard<std::mutex> lock(impl_->q_mu);
    impl_->events.erase(event);
  }
  delete event;
  return CallStatus::Ok();
}

CallStatus Device::RecordEvent(Event* event, Stream* stream) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (!event) return CallStatus(cu::kInvalidHandle, "null event");
  Impl::Task task;
  task.run = [event] {
    event->when = std::chrono::steady_clock::now();
    event->done = true;
  };
  // Marked under the queue's mutex with the submission, so that a query never sees the record half made.
  std::lock_guard<std::mutex> lock(impl_->q_mu);
  event->recorded = true;
  event->done = false;
  event->ticket = impl_->SubmitLocked(impl_->StreamOf(stream), std::move(task));
  return CallStatus::Ok();
}

CallStatus Device::EventSynchronize(Event* event) {
  if (!event) return CallStatus(cu::kInvalidHandle, "null event");
  if (event->recorded) impl_->WaitTicket(event->ticket);
  return impl_->Sticky();
}

CallStatus Device::EventQuery(Event* event) {
  if (!event) return CallStatus(cu::kInvalidHandle, "null event");
  std::lock_guard<std::mutex> lock(impl_->q_mu);
  if (!event->recorded || impl_->done_ticket >= event->ticket) return impl_->Sticky();
  return CallStatus(cu::kNotReady, "event not reached yet");
}

CallStatus Device::ElapsedMs(Event* start, Event* end, float* ms) {
  if (!start || !end || !ms) return BadValue("null event or output");
  std::lock_guard<std::mutex> lock(impl_->q_mu);
  if (!start->recorded || !end->recorded) return CallStatus(cu::kInvalidHandle, "event was never recorded");
  if (impl_->done_ticket < start->ticket || impl_->done_ticket < end->ticket) {
    return CallStatus(cu::kNotReady, "event not reached yet");
  }
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return CallStatus::Ok();
}

CallStatus Device::Synchronize() {
  impl_->WaitAll();
  return impl_->Sticky();
}

bool Device::Idle() const {
  std::lock_guard<std::mutex> lock(impl_->q_mu);
  return impl_->DrainedLocked() && !impl_->faulted.load(std::memory_order_acquire);
}

uint64_t Device::InstructionsExecuted() const { return impl_->instructions.load(); }

void Device::Utilization(unsigned* gpu_percent, unsigned* memory_percent) {
  Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.utilization_mu);
  int64_t now = Impl::MonotonicNanos();
  Impl::UtilizationSample& last = d.last_sample;
  uint64_t kernel = d.BusyNanos(Impl::kKernelBusy, now), memory = d.BusyNanos(Impl::kMemoryBusy, now);
  // Polled faster than this, the previous answer stands (a window of a few microseconds says nothing).
  constexpr int64_t kMinWindowNanos = 10'000'000;
  if (last.at != 0 && now - last.at >= kMinWindowNanos) {
    double window = static_cast<double>(now - last.at);
    // A reader between the two stores of Busy() may count a running piece twice, once: never below the last.
    auto percent = [window](uint64_t now_busy, uint64_t then_busy) {
      double delta = now_busy > then_busy ? static_cast<double>(now_busy - then_busy) : 0.0;
      return static_cast<unsigned>(std::min(100.0, std::round(100.0 * delta / window)));
    };
    last.gpu = percent(kernel, last.kernel);
    last.memory_percent = percent(memory, last.memory);
  }
  if (last.at == 0 || now - last.at >= kMinWindowNanos) {
    last.at = now;
    last.kernel = kernel;
    last.memory = memory;
  }
  *gpu_percent = last.gpu;
  *memory_percent = last.memory_percent;
}

CallStatus Device::StickyError() const { return impl_->Sticky(); }

void Device::ResetContext() {
  impl_->cancel = true;
  impl_->WaitAll();
  impl_->cancel = false;
  std::set<Module*> modules;
  {
    std::lock_guard<std::mutex> lock(impl_->q_mu);
    modules.swap(impl_->modules);
  }
  for (Module* m : modules) delete m;
  {
    std::lock_guard<std::mutex> lock(impl_->mem_mu);
    impl_->live.clear();
    impl_->free_.Reset(impl_->arena_size);
    impl_->used = 0;
    impl_->heap_used = 0;
    impl_->heap_blocks.clear();
    // Every object goes; the generations stay, so that no handle from before the reset names a later object.
    for (uint32_t slot = 0; slot < impl_->texture_live.size(); ++slot) {
      if (!impl_->texture_live[slot]) continue;
      impl_->texture_live[slot] = false;
      impl_->texture_free.push_back(slot);
    }
    impl_->texture_table.Reset();  // The queue is idle: nothing reads it now.
    impl_->ranges_cache.reset();
    madvise(impl_->arena, impl_->arena_size, impl_->arena_shared ? MADV_REMOVE : MADV_DONTNEED);
    // Virtual memory: every mapping, reservation and physical allocation goes.
    for (const auto& [address, bytes] : impl_->mapped) impl_->Unreserve(address, bytes);
    impl_->mapped.clear();
    impl_->vmm_free_.Reset(impl_->vmm_size);
    for (const auto& [handle, range] : impl_->physical) {
      fallocate(impl_->physical_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(range.first),
                static_cast<off_t>(range.second));
      impl_->physical_free_.Give(range.first, range.second);
    }
    impl_->physical.clear();
  }
  std::lock_guard<std::mutex> lock(impl_->sticky_mu);
  impl_->sticky = CallStatus::Ok();
  impl_->faulted.store(false, std::memory_order_release);
}

// ---- Texture and surface objects (texture.h). ----

CallStatus Device::CreateTextureObject(const TextureDesc& desc, uint64_t* handle) {
  if (!handle) return BadValue("null output pointer");
  *handle = 0;
  return MakeTextureObject(desc, false, handle);
}

CallStatus Device::CreateTextureObjectAt(const TextureDesc& desc, uint64_t handle) {
  return MakeTextureObject(desc, true, &handle);
}

CallStatus Device::MakeTextureObject(const TextureDesc& desc, bool at_handle, uint64_t* handle) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  if (desc.dims < 1 || desc.dims > 3 || (desc.layers && desc.dims == 3)) {
    return BadValue("a texture has 1, 2 or 3 dimensions (layered: 1 or 2)");
  }
  if (desc.channels != 1 && desc.channels != 2 && desc.channels != 4) return BadValue("a texel has 1, 2 or 4 channels");
  if (static_cast<uint8_t>(desc.format) > static_cast<uint8_t>(TexFormat::kF32)) return BadValue("unknown texel format");
  for (TexAddress a : desc.address) {
    if (static_cast<uint8_t>(a) > static_cast<uint8_t>(TexAddress::kBorder)) return BadValue("unknown address mode");
  }
  if ((desc.dims < 2 && desc.height != 1) || (desc.dims < 3 && desc.depth != 1)) {
    return BadValue("extents beyond the texture's dimensions must be 1");
  }
  const uint64_t span = desc.SpanBytes();
  if (span == 0) return BadValue("empty or oversized texture extents");
  if (desc.height > 1 && desc.pitch < uint64_t{desc.width} * desc.ElementBytes()) {
    return BadValue("texture pitch shorter than a row");
  }
  if (desc.Slices() > 1 && desc.slice_pitch < desc.pitch * desc.height) {
    return BadValue("texture slice pitch shorter than a slice");
  }
  // The texels must lie inside one allocation, or inside memory mapped through ReserveAddress/Map (adjacent
  // mappings count as one range), as a GPU takes a texture over virtual memory (PyTorch's expandable segments make
  // all of a program's memory so). Memory unmapped later faults at the read, as any access to it does.
  if (!impl_->Contains(desc.base, span)) {
    return BadValue("the texture's texels do not lie inside one allocation or mapping of this device");
  }
  Impl* impl = impl_.get();
  uint32_t slot = 0, generation = 0;
  {
    std::lock_guard<std::mutex> lock(impl->mem_mu);
    if (at_handle) {
      // A restored session's object, under the handle its program holds: that slot and generation, free here.
      if (!impl->texture_table.Decode(*handle, &slot, &generation) || generation == 0 ||
          slot >= TextureTable::kCapacity) {
        return BadValue("not a texture or surface handle of this device's window");
      }
      while (impl->texture_generations.size() <= slot) {  // The fresh slots before it become free ones.
        if (impl->texture_generations.size() < slot) {
          impl->texture_free.push_back(static_cast<uint32_t>(impl->texture_generations.size()));
        }
        impl->texture_generations.push_back(0);
        impl->texture_live.push_back(false);
      }
      if (impl->texture_live[slot]) return BadValue("that texture or surface handle is taken");
      impl->texture_free.erase(std::remove(impl->texture_free.begin(), impl->texture_free.end(), slot),
                               impl->texture_free.end());
      impl->texture_generations[slot] = generation;
      impl->texture_live[slot] = true;
    } else if (impl->texture_generations.size() < TextureTable::kCapacity) {
      // Fresh slots first, then the one free longest: a slot's generation wraps as late as it can.
      slot = static_cast<uint32_t>(impl->texture_generations.size());
      impl->texture_generations.push_back(0);
      impl->texture_live.push_back(false);
    } else if (!impl->texture_free.empty()) {
      slot = impl->texture_free.front();
      impl->texture_free.pop_front();
    } else {
      return CallStatus(cu::kOutOfMemory, "too many texture and surface objects: a device holds at most " +
                                               std::to_string(TextureTable::kCapacity) + " at once");
    }
    if (!at_handle) {
      generation = (impl->texture_generations[slot] & TextureTable::kGenerationMask) + 1;
      if (generation > TextureTable::kGenerationMask) generation = 1;
      impl->texture_generations[slot] = generation;
      impl->texture_live[slot] = true;
    }
  }
  // In stream order: a kernel queued after this call sees the object, one queued before does not.
  impl->Submit(&impl->default_stream, [impl, slot, generation, desc] {
    impl->texture_table.Set(slot, generation, desc);
  });
  *handle = TextureTable::Handle(impl->texture_table.salt(), slot, generation);
  return CallStatus::Ok();
}

CallStatus Device::DestroyTextureObject(uint64_t handle) {
  if (CallStatus s = impl_->Sticky(); !s.ok()) return s;
  Impl* impl = impl_.get();
  uint32_t slot = 0, generation = 0;
  {
    std::lock_guard<std::mutex> lock(impl->mem_mu);
    if (!impl->texture_table.Decode(handle, &slot, &generation) || slot >= impl->texture_live.size() ||
        !impl->texture_live[slot] || impl->texture_generations[slot] != generation) {
      return BadValue("not a texture or surface object of this device");
    }
    impl->texture_live[slot] = false;
    impl->texture_free.push_back(slot);
  }
  // In stream order: kernels queued before may still sample the object.
  impl->Submit(&impl->default_stream, [impl, slot, generation] { impl->texture_table.Clear(slot, generation); });
  return CallStatus::Ok();
}

void Device::SetPrintfSink(std::function<void(std::string_view)> sink) {
  std::lock_guard<std::mutex> lock(impl_->sink_mu);
  impl_->sink = std::move(sink);
}

}  // namespace gpupool::emu
