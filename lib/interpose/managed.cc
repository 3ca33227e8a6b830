#include "managed.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/log.h"
#include "driver.h"
#include "forward_spec.h"
#include "remote.h"

namespace gpupool::interpose {
namespace {

// kFresh: a page of an allocation that no device work has used yet, read-write without tracking so that system
// calls (read(2) into a new buffer) can fill it: the slice holds zeros there, and only the pages that hold anything
// else go to the slice before the first device work.
enum PageState : uint8_t { kInvalid = 0, kClean = 1, kDirty = 2, kFresh = 3 };

// A host touch of an invalid page fetches this much of the allocation around it, and twice as much (up to the
// maximum) each time the next touch lands where the last fetch ended: a sequential sweep costs a few round trips,
// a scattered one moves little. Allocations up to kWholeBytes come back whole on their first touch.
constexpr size_t kFirstReadAhead = 64 * 1024;
constexpr size_t kMaxReadAhead = 16 * 1024 * 1024;
constexpr size_t kWholeBytes = 1024 * 1024;
// A write to a clean page makes it (and, while writes go on sequentially, up to this much after it, doubling from
// one page) dirty at once: a sequential overwrite takes a few faults, a scattered one is counted in pages.
constexpr size_t kMaxWriteAhead = 2 * 1024 * 1024;

// CU_DEVICE_INVALID: no answer common to the whole range (cuMemRangeGetAttribute).
constexpr int kNoLocation = -2;
constexpr int kCpuAccessBit = 15;  // accessed_by: bits 0..14 devices, this one the CPU.

struct PageAdvice {
  int16_t preferred = kNoLocation;
  int16_t last_prefetch = kNoLocation;
  uint16_t accessed_by = 0;
  uint8_t read_mostly = 0;
};

struct ManagedRange {
  uint64_t base = 0;             // Page aligned; the program's pointer.
  uint64_t bytes = 0;            // As asked.
  uint64_t mapped = 0;           // Whole pages.
  uint64_t remote_base = 0;      // The slice's allocation (up to a page below base: slices align less than pages).
  std::set<const void*> owners;  // Module variables' pages: the modules whose variables lie there; else empty.
  // What of [base, base + mapped) is the slice's memory to copy: the whole range for an allocation; each variable's
  // own bytes for module variables (the slice refuses a copy beyond one).
  std::vector<std::pair<uint64_t, uint64_t>> extents;  // (address, bytes), by address.
  bool outside_window = false;  // Module variables a GPU's driver placed outside the slice's window.
  int device = 0;
  int fd = -1;
  uint8_t* view = nullptr;  // gpupool's own view of the pages: never faults.
  unsigned int attach = CU_MEM_ATTACH_GLOBAL;
  uint64_t attach_stream = 0;              // For CU_MEM_ATTACH_SINGLE.
  std::vector<uint8_t> pages;              // PageState each.
  size_t valid = 0, dirty = 0, fresh = 0;  // Pages clean, dirty or fresh; pages dirty; pages fresh.
  std::vector<PageAdvice> advice;
  // Device work that may write the allocation: the device's work epoch of the newest, the streams it went on since
  // the host last waited for it, and the epoch up to which the host has waited.
  uint64_t invalidated_at = 0, synced_at = 0;
  std::set<uint64_t> writers;
  // Read-ahead: where the last fetch began and ended; a touch just past either end continues that sweep.
  size_t next_read = SIZE_MAX, read_from = SIZE_MAX, read_ahead = kFirstReadAhead;
  size_t next_write = SIZE_MAX, write_ahead = 0;
};

struct DeviceState {
  uint64_t work_epoch = 0;   // Bumped by each piece of device work that may write managed memory.
  uint64_t synced_upto = 0;  // Work before this epoch is known done (a whole-device wait).
  // Host writes reach the slice in order on the stream of the work that needs them; work on another stream must
  // wait for them too. Each flush is followed by a record of this event, and each stream waits on it once per
  // flush before its next work on managed memory (a flush waits for the previous one first, so the last record
  // covers them all).
  uint64_t flush_event = 0;
  uint64_t flush_epoch = 0;
  std::map<uint64_t, uint64_t> stream_seen;  // Remote stream -> flush epoch it waited for.
};

struct State {
  std::mutex mu;
  std::map<uint64_t, std::unique_ptr<ManagedRange>> allocations;  // By base.
  std::map<int, DeviceState> devices;
  std::atomic<uint64_t> bytes_to_device{0}, bytes_to_host{0}, faults{0};
  struct sigaction previous {};
  bool handler_installed = false;
};

State& S() {
  static State* state = new State();  // Leaked: faults may come from atexit handlers and other threads at exit.
  return *state;
}

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Set while this thread holds State::mu: a fault then is gpupool's own bug, never to be waited on (it would
// deadlock).
thread_local bool t_holding = false;

class Hold {
 public:
  Hold() : lock_(S().mu) { t_holding = true; }
  ~Hold() { t_holding = false; }

 private:
  std::lock_guard<std::mutex> lock_;
};

ManagedRange* FindLocked(uint64_t address) {
  auto& table = S().allocations;
  auto it = table.upper_bound(address);
  if (it == table.begin()) return nullptr;
  --it;
  ManagedRange* a = it->second.get();
  return address - a->base < a->mapped ? a : nullptr;
}

void Protect(const ManagedRange& a, size_t first, size_t count, int prot) {
  if (count == 0) return;
  const size_t page = PageBytes();
  if (mprotect(reinterpret_cast<void*>(a.base + first * page), count * page, prot) != 0) {
    GP_ERROR("interpose", "managed memory: mprotect({:#x}, {}) failed: {}", a.base + first * page, count * page,
             std::strerror(errno));
  }
}

// Calls f(first, count) for each run of pages in [first, last) whose state is `state`.
template <typename F>
void ForRuns(const ManagedRange& a, size_t first, size_t last, uint8_t state, F&& f) {
  size_t i = first;
  while (i < last) {
    if (a.pages[i] != state) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < last && a.pages[j] == state) ++j;
    f(i, j - i);
    i = j;
  }
}

void SetPages(ManagedRange& a, size_t first, size_t count, uint8_t state) {
  for (size_t i = first; i < first + count; ++i) {
    uint8_t old = a.pages[i];
    if (old == state) continue;
    if (old == kInvalid) ++a.valid;
    if (old == kDirty) --a.dirty;
    if (old == kFresh) --a.fresh;
    if (state == kInvalid) --a.valid;
    if (state == kDirty) ++a.dirty;
    if (state == kFresh) ++a.fresh;
    a.pages[i] = state;
  }
}

// Calls f(address, bytes) for each part of pages [first, first + count) that is the slice's memory (extents).
template <typename F>
int ForCopies(const ManagedRange& a, size_t first, size_t count, F&& f) {
  const size_t page = PageBytes();
  const uint64_t begin = a.base + first * page, end = begin + count * page;
  for (const auto& [address, bytes] : a.extents) {
    const uint64_t lo = std::max(begin, address), hi = std::min(end, address + bytes);
    if (lo >= hi) continue;
    if (int code = f(lo, hi - lo); code != 0) return code;
  }
  return 0;
}

// Makes `stream` wait for every flush sent on other streams before (see DeviceState).
int CatchUp(DeviceState& d, RemoteSession* session, uint64_t stream) {
  uint64_t& seen = d.stream_seen[stream];
  if (d.flush_epoch <= seen) return 0;
  seen = d.flush_epoch;
  return session->StreamWaitEvent(stream, d.flush_event);
}

// Sends the dirty pages of [first, last), and the fresh ones that are not all zeros, to the slice on `stream`; they
// become clean (read-only again, so that a write racing the send faults and waits).
int Flush(ManagedRange& a, DeviceState& d, RemoteSession* session, uint64_t stream, size_t first, size_t last) {
  if (a.dirty == 0 && a.fresh == 0) return 0;
  const size_t page = PageBytes();
  int code = 0;
  bool sent = false;
  auto send = [&](size_t run, size_t count) {
    code = ForCopies(a, run, count, [&](uint64_t address, uint64_t bytes) {
      S().bytes_to_device += bytes;
      return session->CopyToDevice(address, a.view + (address - a.base), bytes, stream);
    });
    sent = sent || code == 0;
  };
  ForRuns(a, first, last, kDirty, [&](size_t run, size_t count) {
    if (code != 0) return;
    Protect(a, run, count, PROT_READ);
    send(run, count);
    if (code == 0) SetPages(a, run, count, kClean);
  });
  ForRuns(a, first, last, kFresh, [&](size_t run, size_t count) {
    if (code != 0) return;
    Protect(a, run, count, PROT_READ);
    // Only what holds data (pages never written are holes of the memfd: not even read here), and of that only the
    // pages that are not all zeros, as the slice's copy is.
    const off_t begin = static_cast<off_t>(run * page), end = static_cast<off_t>((run + count) * page);
    for (off_t data = lseek(a.fd, begin, SEEK_DATA); data >= 0 && data < end && code == 0;) {
      off_t hole = lseek(a.fd, data, SEEK_HOLE);
      if (hole < 0 || hole > end) hole = end;
      size_t p = static_cast<size_t>(data) / page;
      const size_t stop = (static_cast<size_t>(hole) + page - 1) / page;
      while (p < stop && code == 0) {
        auto zero = [&](size_t q) {
          const uint64_t* words = reinterpret_cast<const uint64_t*>(a.view + q * page);
          for (size_t w = 0; w < page / sizeof(uint64_t); ++w) {
            if (words[w] != 0) return false;
          }
          return true;
        };
        if (zero(p)) {
          ++p;
          continue;
        }
        size_t q = p + 1;
        while (q < stop && !zero(q)) ++q;
        send(p, q - p);
        p = q;
      }
      if (hole >= end) break;
      data = lseek(a.fd, hole, SEEK_DATA);
    }
    if (code == 0) SetPages(a, run, count, kClean);
  });
  if (code != 0 || !sent) return code;
  if (d.flush_event == 0) {
    if ((code = session->EventCreate(&d.flush_event)) != 0) return code;
  }
  if ((code = session->EventRecord(d.flush_event, stream)) != 0) return code;
  d.stream_seen[stream] = ++d.flush_epoch;
  return 0;
}

// The host's writes to [first, last), ahead of device work on `stream`: after the flushes other streams sent, and
// then its own.
int SendHostWrites(ManagedRange& a, DeviceState& d, RemoteSession* session, uint64_t stream, size_t first,
                   size_t last) {
  if (int code = CatchUp(d, session, stream); code != 0) return code;
  return Flush(a, d, session, stream, first, last);
}

// Device work on `stream` may write [first, last): the host's copy of those pages is no longer to be trusted.
void Invalidate(ManagedRange& a, DeviceState& d, uint64_t stream, size_t first, size_t last) {
  if (a.valid != 0) {
    // One call for the range: cheaper than per run, and PROT_NONE is right for every page in it.
    Protect(a, first, last - first, PROT_NONE);
    SetPages(a, first, last - first, kInvalid);
  }
  a.invalidated_at = ++d.work_epoch;
  a.writers.insert(stream);
  a.next_read = a.read_from = SIZE_MAX;
}

bool SeenBy(const ManagedRange& a, uint64_t stream) {
  if (a.attach == CU_MEM_ATTACH_HOST) return false;
  if (a.attach == CU_MEM_ATTACH_SINGLE) return a.attach_stream == stream;
  return true;
}

// Waits until the device work that may have written `a` is done: its own stream when only the stream it is attached
// to wrote it, else the whole device.
void WaitForWriters(ManagedRange& a, DeviceState& d, RemoteSession* session) {
  if (a.invalidated_at <= std::max(a.synced_at, d.synced_upto)) return;
  int code;
  if (a.attach == CU_MEM_ATTACH_SINGLE && a.writers.size() == 1 && *a.writers.begin() == a.attach_stream &&
      a.attach_stream != 0) {
    code = session->StreamSynchronize(a.attach_stream);
  } else {
    const uint64_t epoch = d.work_epoch;
    code = session->Synchronize();
    if (code == 0) d.synced_upto = std::max(d.synced_upto, epoch);
  }
  // The device's own error (a kernel's fault, say) is the program's to see at its next synchronising call; the
  // pages are fetched all the same, and only a fetch that fails (a lost lease) ends the access.
  if (code != 0) session->KeepAsyncError(code);
  a.synced_at = a.invalidated_at;
  a.writers.clear();
}

// Fetches the invalid pages of [first, last) from the slice; they become clean.
int Fetch(ManagedRange& a, DeviceState& d, size_t first, size_t last) {
  RemoteSession* session = Remote::Get().session(a.device);
  WaitForWriters(a, d, session);
  const uint64_t stream = a.attach == CU_MEM_ATTACH_SINGLE ? a.attach_stream : 0;
  int code = 0;
  ForRuns(a, first, last, kInvalid, [&](size_t run, size_t count) {
    if (code != 0) return;
    code = ForCopies(a, run, count, [&](uint64_t address, uint64_t bytes) {
      S().bytes_to_host += bytes;
      return session->CopyFromDevice(a.view + (address - a.base), address, bytes, stream);
    });
    if (code != 0) return;
    SetPages(a, run, count, kClean);
    Protect(a, run, count, PROT_READ);
  });
  return code;
}

[[noreturn]] void FatalFault(uint64_t address, const std::string& why) {
  // The program touched memory gpupool cannot give it: there is no error to return from a load or store, and a
  // stale page would be a silent wrong answer. Named, then the signal a failed file mapping gives.
  std::string line = fmt::format("gpupool: managed memory at {:#x}: {}\n", address, why);
  (void)!write(STDERR_FILENO, line.data(), line.size());
  signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);
  _exit(135);
}

enum class Access { kRead, kWrite, kUnknown };  // kUnknown: the architecture's fault context is not read.

// The SIGSEGV of a host access to a managed page: resolves it (true) or says it is not ours (false).
bool HandleFault(uint64_t address, Access access) {
  State& s = S();
  if (t_holding) {
    FatalFault(address, "touched while gpupool manages it on the same thread (a gpupool bug)");
  }
  if (ForkedAfterInit()) {
    // The parent's pages are not mapped in a child (MADV_DONTFORK): as with NVIDIA's driver, a child forked after
    // CUDA's initialisation cannot use it, managed memory included.
    // Without the lock, which the parent may have held when it forked: the child has one thread.
    if (FindLocked(address) == nullptr) return false;
    FatalFault(address, "not available in a process forked after CUDA was initialised (as with NVIDIA's driver)");
  }
  Hold hold;
  ManagedRange* a = FindLocked(address);
  if (a == nullptr) return false;
  s.faults++;
  DeviceState& d = s.devices[a->device];
  const size_t page = PageBytes(), pages = a->pages.size();
  const size_t p = (address - a->base) / page;
  if (a->pages[p] == kInvalid) {
    size_t first = p, last;
    if (a->mapped <= kWholeBytes) {
      first = 0;
      last = pages;
    } else {
      const bool ascending = p == a->next_read, descending = p + 1 == a->read_from;
      a->read_ahead = ascending || descending ? std::min(a->read_ahead * 2, kMaxReadAhead) : kFirstReadAhead;
      const size_t span = a->read_ahead / page;
      if (descending) {
        first = p + 1 > span ? p + 1 - span : 0;
        last = p + 1;
      } else {
        last = std::min(pages, p + span);
      }
      a->read_from = first;
      a->next_read = last;
    }
    if (int code = Fetch(*a, d, first, last); code != 0) {
      RemoteSession* session = Remote::Get().session(a->device);
      std::string message = session->last_error();
      if (message.empty()) message = ResultName(ToResult(code));
      FatalFault(address, fmt::format("could not be fetched from device {}: {}", a->device, message));
    }
    // A write not known as one faults again on the clean page, and is marked below then.
    if (access != Access::kWrite) return true;
  }
  if (a->pages[p] == kClean && access != Access::kRead) {
    a->write_ahead = p == a->next_write ? std::min(a->write_ahead * 2, kMaxWriteAhead / page) : 1;
    size_t last = p;
    while (last < pages && last < p + a->write_ahead && a->pages[last] == kClean) ++last;
    SetPages(*a, p, last - p, kDirty);
    Protect(*a, p, last - p, PROT_READ | PROT_WRITE);
    a->next_write = last;
  }
  return true;  // Otherwise another thread resolved it first: the access runs again.
}

void ChainFault(int sig, siginfo_t* info, void* context) {
  const struct sigaction& previous = S().previous;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
    // Not a managed page: the access runs again and takes the default action (the program's own crash).
    signal(sig, SIG_DFL);
    return;
  }
  previous.sa_handler(sig);
}

// Set while a fault that is not ours runs the handler that was there before: that handler may call the one it
// replaced, which can be this one again (a handler installed after ours, and ours installed again after it).
thread_local bool t_chaining = false;

void OnSegv(int sig, siginfo_t* info, void* context) {
  if (t_chaining) {
    signal(sig, SIG_DFL);  // Not ours, and the chain came back: the default action.
    return;
  }
  const int saved_errno = errno;
  Access access = Access::kUnknown;
#if defined(__x86_64__)
  // The page-fault error code: bit 1 set for a write.
  access = (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) != 0 ? Access::kWrite : Access::kRead;
#endif
  const bool ours = HandleFault(reinterpret_cast<uint64_t>(info->si_addr), access);
  errno = saved_errno;
  if (!ours) {
    t_chaining = true;
    ChainFault(sig, info, context);
    t_chaining = false;
  }
}

// Installs the fault handler, again if the program (or a library: a crash reporter, Python's faulthandler) replaced
// it since the last allocation; the handler found there gets the faults that are not gpupool's.
void InstallFaultHandlerLocked() {
  State& s = S();
  struct sigaction current {};
  sigaction(SIGSEGV, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == OnSegv) return;
  struct sigaction action {};
  action.sa_sigaction = OnSegv;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &s.previous);
  if (s.handler_installed) return;
  s.handler_installed = true;
  if (const char* stats = std::getenv("GPUPOOL_MANAGED_STATS"); stats != nullptr && *stats != '\0') {
    std::atexit([] {
      ManagedMemory::Stats st = ManagedMemory::Get().stats();
      std::fprintf(stderr, "gpupool: managed memory: %llu bytes to the device, %llu bytes from it, %llu faults\n",
                   static_cast<unsigned long long>(st.bytes_to_device),
                   static_cast<unsigned long long>(st.bytes_to_host), static_cast<unsigned long long>(st.faults));
    });
  }
}

// Gives up a range's host pages and gpupool's view of them. In the window its pages are the window's reservation
// again, so that no host mapping lands where device pointers route; outside it (variables a driver placed there)
// nothing is left. REQUIRES: Hold.
void ReleaseHostPages(const ManagedRange& a) {
  if (a.outside_window) {
    munmap(reinterpret_cast<void*>(a.base), a.mapped);
  } else {
    mmap(reinterpret_cast<void*>(a.base), a.mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
         -1, 0);
  }
  munmap(a.view, a.mapped);
  close(a.fd);
}

// Whether [address, address + bytes) lies in `a`'s allocated bytes (not past them into its last page's tail).
bool RangeInside(const ManagedRange& a, uint64_t address, uint64_t bytes) {
  return address >= a.base && address - a.base < a.bytes && bytes <= a.bytes - (address - a.base);
}

// [first, last) pages of `a` covering [address, address + bytes), clipped to the allocation.
void PagesOf(const ManagedRange& a, uint64_t address, uint64_t bytes, size_t* first, size_t* last) {
  const size_t page = PageBytes();
  const uint64_t begin = std::max(address, a.base) - a.base;
  const uint64_t end = bytes >= a.mapped - begin ? a.mapped : begin + bytes;
  *first = begin / page;
  *last = (end + page - 1) / page;
}

}  // namespace

ManagedMemory& ManagedMemory::Get() {
  static ManagedMemory* managed = new ManagedMemory();
  return *managed;
}

CUresult ManagedMemory::Allocate(int device, size_t bytes, unsigned int flags, CUdeviceptr* out) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  RemoteSession* session = remote.session(device);
  const size_t page = PageBytes();
  if (bytes > session->window_bytes()) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t mapped = (bytes + page - 1) / page * page;
  uint64_t remote_base = 0;
  if (int code = session->MemAlloc(mapped + page, &remote_base); code != 0) {
    if (code == CUDA_ERROR_OUT_OF_MEMORY) return CUDA_ERROR_OUT_OF_MEMORY;
    return remote.Fail(device, code, "a managed allocation");
  }
  auto a = std::make_unique<ManagedRange>();
  a->base = (remote_base + page - 1) / page * page;
  a->bytes = bytes;
  a->mapped = mapped;
  a->remote_base = remote_base;
  a->device = device;
  a->attach = flags;
  // What a failure gives back: the view, the memfd, the slice's memory.
  auto release = [&] {
    if (a->view != nullptr) munmap(a->view, mapped);
    if (a->fd >= 0) close(a->fd);
    session->MemFree(remote_base);
  };
  auto undo = [&](const char* what) {
    GP_ERROR("interpose", "managed memory: {} failed: {}", what, std::strerror(errno));
    release();
    return CUDA_ERROR_OUT_OF_MEMORY;
  };
  a->fd = memfd_create("gpupool-managed", MFD_CLOEXEC);
  if (a->fd < 0) return undo("memfd_create");
  if (ftruncate(a->fd, static_cast<off_t>(mapped)) != 0) return undo("ftruncate");
  void* view = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
  if (view == MAP_FAILED) return undo("mmap");
  a->view = static_cast<uint8_t*>(view);
  // The device copy starts as zeros, like the host's fresh pages: both copies agree until the host writes.
  if (int code = session->Memset(a->base, 0, 1, mapped, 0); code != 0) {
    release();
    return remote.Fail(device, code, "zeroing a managed allocation");
  }
  {
    Hold hold;
    // Over the window's reservation (MAP_FIXED replaces it there; Free puts it back).
    void* at = mmap(reinterpret_cast<void*>(a->base), mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a->fd, 0);
    if (at == MAP_FAILED) return undo("mmap at the device address");
    // A child forked later gets neither view: writes of its own could otherwise reach the parent's pages.
    madvise(at, mapped, MADV_DONTFORK);
    madvise(a->view, mapped, MADV_DONTFORK);
    a->pages.assign(mapped / page, kFresh);
    a->valid = a->fresh = a->pages.size();
    a->extents = {{a->base, mapped}};
    a->advice.assign(a->pages.size(), PageAdvice{});
    InstallFaultHandlerLocked();
    *out = a->base;
    S().allocations[a->base] = std::move(a);
  }
  live_.fetch_add(1, std::memory_order_release);
  std::lock_guard<std::mutex> lock(remote.mu());
  remote.allocations[*out] = Allocation{bytes, device};
  return CUDA_SUCCESS;
}

CUresult ManagedMemory::Free(CUdeviceptr base, bool* handled) {
  *handled = false;
  if (!Any()) return CUDA_SUCCESS;
  std::unique_ptr<ManagedRange> a;
  {
    Hold hold;
    auto it = S().allocations.find(base);
    if (it == S().allocations.end() || !it->second->owners.empty()) return CUDA_SUCCESS;
    a = std::move(it->second);
    S().allocations.erase(it);
    *handled = true;
    ReleaseHostPages(*a);
  }
  live_.fetch_sub(1, std::memory_order_release);
  Remote& remote = Remote::Get();
  {
    std::lock_guard<std::mutex> lock(remote.mu());
    remote.allocations.erase(base);
  }
  if (int code = remote.session(a->device)->MemFree(a->remote_base); code != 0) {
    return remote.Fail(a->device, code, "cuMemFree of managed memory");
  }
  return CUDA_SUCCESS;
}

namespace {}  // namespace

CUresult ManagedMemory::AdoptVariable(int device, uint64_t address, uint64_t bytes, const void* owner) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  RemoteSession* session = remote.session(device);
  // Inside the window the pages are the reservation's to replace; outside (a GPU's driver placed the variables
  // there) only where nothing of this process is mapped yet.
  const bool inside = session->Owns(address) && session->Owns(address + bytes - 1);
  const size_t page = PageBytes();
  uint64_t lo = address / page * page, hi = (address + bytes + page - 1) / page * page;
  Hold hold;
  State& s = S();
  DeviceState& d = s.devices[device];
  // Already managed (another variable of its page): one more owner.
  if (ManagedRange* a = FindLocked(address);
      a != nullptr && !a->owners.empty() && a->device == device && address + bytes <= a->base + a->mapped) {
    a->owners.insert(owner);
    if (std::find(a->extents.begin(), a->extents.end(), std::make_pair(address, bytes)) == a->extents.end()) {
      a->extents.emplace_back(address, bytes);
      std::sort(a->extents.begin(), a->extents.end());
    }
    return CUDA_SUCCESS;
  }
  // Variables on pages of this one: merged into one range, after their host writes went to the slice.
  std::set<const void*> owners{owner};
  std::vector<std::pair<uint64_t, uint64_t>> extents{{address, bytes}};
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    ManagedRange& a = *it->second;
    if (a.base >= hi || a.base + a.mapped <= lo) {
      ++it;
      continue;
    }
    // Never an allocation's pages (they are its own), nor another device's variables (windows are disjoint, and a
    // driver places a device's variables in that device's address range).
    if (a.owners.empty() || a.device != device || a.outside_window == inside) return CUDA_ERROR_NOT_SUPPORTED;
    if (int code = Flush(a, d, session, 0, 0, a.pages.size()); code != 0) {
      return remote.Fail(device, code, "sending managed variables to the device");
    }
    lo = std::min(lo, a.base);
    hi = std::max(hi, a.base + a.mapped);
    owners.insert(a.owners.begin(), a.owners.end());
    extents.insert(extents.end(), a.extents.begin(), a.extents.end());
    ReleaseHostPages(a);
    it = s.allocations.erase(it);
    live_.fetch_sub(1, std::memory_order_release);
  }
  auto a = std::make_unique<ManagedRange>();
  a->base = lo;
  a->bytes = a->mapped = hi - lo;
  a->device = device;
  a->outside_window = !inside;
  a->owners = std::move(owners);
  std::sort(extents.begin(), extents.end());
  a->extents = std::move(extents);
  a->fd = memfd_create("gpupool-managed-variables", MFD_CLOEXEC);
  void* view = MAP_FAILED;
  if (a->fd >= 0 && ftruncate(a->fd, static_cast<off_t>(a->mapped)) == 0) {
    view = mmap(nullptr, a->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
  }
  void* at = MAP_FAILED;
  if (view != MAP_FAILED) {
    // No access until fetched: the slice holds the variables' initial values.
    at = mmap(reinterpret_cast<void*>(lo), a->mapped, PROT_NONE,
              MAP_SHARED | (inside ? MAP_FIXED : MAP_FIXED_NOREPLACE), a->fd, 0);
    if (at != MAP_FAILED && at != reinterpret_cast<void*>(lo)) {  // A kernel without MAP_FIXED_NOREPLACE.
      munmap(at, a->mapped);
      at = MAP_FAILED;
      errno = EEXIST;
    }
  }
  if (at == MAP_FAILED) {
    GP_ERROR("interpose",
             "managed variables at {:#x} ({} bytes) on device {} cannot have host pages at the same "
             "address: {}",
             lo, a->mapped, device, errno == EEXIST ? "this process has other memory there" : std::strerror(errno));
    if (view != MAP_FAILED) munmap(view, a->mapped);
    if (a->fd >= 0) close(a->fd);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  a->view = static_cast<uint8_t*>(view);
  madvise(at, a->mapped, MADV_DONTFORK);
  madvise(a->view, a->mapped, MADV_DONTFORK);
  a->pages.assign(a->mapped / page, kInvalid);
  a->advice.assign(a->pages.size(), PageAdvice{});
  a->invalidated_at = ++d.work_epoch;  // The module's load wrote them: the first touch waits for it.
  InstallFaultHandlerLocked();
  s.allocations[lo] = std::move(a);
  live_.fetch_add(1, std::memory_order_release);
  return CUDA_SUCCESS;
}

void ManagedMemory::ForgetOwner(const void* owner) {
  if (!Any()) return;
  Hold hold;
  auto& table = S().allocations;
  for (auto it = table.begin(); it != table.end();) {
    ManagedRange& a = *it->second;
    if (a.owners.erase(owner) == 0 || !a.owners.empty()) {
      ++it;
      continue;
    }
    ReleaseHostPages(a);
    it = table.erase(it);
    live_.fetch_sub(1, std::memory_order_release);
  }
}

bool ManagedMemory::Find(uint64_t address, uint64_t* base, uint64_t* bytes) const {
  if (!Any()) return false;
  Hold hold;
  const ManagedRange* a = FindLocked(address);
  if (a == nullptr || address - a->base >= a->bytes) return false;
  if (base != nullptr) *base = a->base;
  if (bytes != nullptr) *bytes = a->bytes;
  return true;
}

CUresult ManagedMemory::BeforeKernel(int device, uint64_t stream) {
  if (!Any()) return CUDA_SUCCESS;
  Remote& remote = Remote::Get();
  RemoteSession* session = remote.session(device);
  Hold hold;
  DeviceState& d = S().devices[device];
  for (auto& [base, a] : S().allocations) {
    if (a->device != device || !SeenBy(*a, stream)) continue;
    // Read-only first, then sent, then no access: a write racing the launch faults and waits for the kernel.
    if (int code = SendHostWrites(*a, d, session, stream, 0, a->pages.size()); code != 0) {
      return remote.Fail(device, code, "sending managed memory to the device");
    }
    Invalidate(*a, d, stream, 0, a->pages.size());
  }
  return CUDA_SUCCESS;
}

CUresult ManagedMemory::BeforeDeviceAccess(int device, uint64_t stream, uint64_t address, uint64_t bytes, bool write) {
  if (!Any() || bytes == 0) return CUDA_SUCCESS;
  Remote& remote = Remote::Get();
  RemoteSession* session = remote.session(device);
  Hold hold;
  ManagedRange* a = FindLocked(address);
  if (a == nullptr || a->device != device) return CUDA_SUCCESS;
  DeviceState& d = S().devices[device];
  size_t first, last;
  PagesOf(*a, address, bytes, &first, &last);
  if (int code = SendHostWrites(*a, d, session, stream, first, last); code != 0) {
    return remote.Fail(device, code, "sending managed memory to the device");
  }
  if (write) Invalidate(*a, d, stream, first, last);
  return CUDA_SUCCESS;
}

uint64_t ManagedMemory::WorkEpoch(int device) {
  if (!Any()) return 0;
  Hold hold;
  return S().devices[device].work_epoch;
}

void ManagedMemory::Synchronized(int device, uint64_t epoch) {
  if (!Any()) return;
  Hold hold;
  DeviceState& d = S().devices[device];
  d.synced_upto = std::max(d.synced_upto, epoch);
}

CUresult ManagedMemory::Attach(int device, uint64_t stream, CUdeviceptr address, size_t length, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!Any()) return CUDA_ERROR_INVALID_VALUE;
  Hold hold;
  ManagedRange* a = FindLocked(address);
  // The whole allocation: length 0, or its base and size (a device without concurrent managed access attaches
  // allocations, not parts of them).
  if (a == nullptr || (length != 0 && (address != a->base || length != a->bytes))) return CUDA_ERROR_INVALID_VALUE;
  if (flags == CU_MEM_ATTACH_SINGLE && device != a->device) return CUDA_ERROR_INVALID_VALUE;
  a->attach = flags;
  a->attach_stream = flags == CU_MEM_ATTACH_SINGLE ? stream : 0;
  return CUDA_SUCCESS;
}

CUresult ManagedMemory::Prefetch(CUdeviceptr address, size_t count, bool to_host, int to_device, int device,
                                 uint64_t stream) {
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!Any()) return CUDA_ERROR_INVALID_VALUE;
  Remote& remote = Remote::Get();
  Hold hold;
  ManagedRange* a = FindLocked(address);
  if (a == nullptr || !RangeInside(*a, address, count)) return CUDA_ERROR_INVALID_VALUE;
  if (!to_host && (to_device < 0 || static_cast<size_t>(to_device) >= remote.device_count())) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  size_t first, last;
  PagesOf(*a, address, count, &first, &last);
  DeviceState& d = S().devices[a->device];
  RemoteSession* session = remote.session(a->device);
  // The stream orders the prefetch only on its own slice; elsewhere the slice's default stream does.
  const uint64_t on = device == a->device ? stream : 0;
  int code = 0;
  if (to_host) {
    code = Fetch(*a, d, first, last);  // After the device work that may write it.
  } else {
    code = SendHostWrites(*a, d, session, on, first, last);
  }
  if (code != 0) return remote.Fail(a->device, code, "prefetching managed memory");
  for (size_t i = first; i < last; ++i) {
    a->advice[i].last_prefetch = static_cast<int16_t>(to_host ? CU_DEVICE_CPU : to_device);
  }
  return CUDA_SUCCESS;
}

CUresult ManagedMemory::Advise(CUdeviceptr address, size_t count, CUmem_advise advice, int location) {
  if (count == 0 || !Any()) return CUDA_ERROR_INVALID_VALUE;
  const bool needs_location = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ||
                              advice == CU_MEM_ADVISE_SET_ACCESSED_BY || advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  // A device the program does not have is an invalid value, as NVIDIA's driver answers it (an H100's, driver 580,
  // for cudaMemAdvise's location of device 77).
  if (needs_location && location != CU_DEVICE_CPU &&
      (location < 0 || static_cast<size_t>(location) >= Remote::Get().device_count() || location >= kCpuAccessBit)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Hold hold;
  ManagedRange* a = FindLocked(address);
  if (a == nullptr || !RangeInside(*a, address, count)) return CUDA_ERROR_INVALID_VALUE;
  size_t first, last;
  PagesOf(*a, address, count, &first, &last);
  const uint16_t bit = static_cast<uint16_t>(1u << (location == CU_DEVICE_CPU ? kCpuAccessBit : location));
  for (size_t i = first; i < last; ++i) {
    PageAdvice& p = a->advice[i];
    switch (advice) {
      case CU_MEM_ADVISE_SET_READ_MOSTLY: p.read_mostly = 1; break;
      case CU_MEM_ADVISE_UNSET_READ_MOSTLY: p.read_mostly = 0; break;
      case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: p.preferred = static_cast<int16_t>(location); break;
      case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: p.preferred = kNoLocation; break;
      case CU_MEM_ADVISE_SET_ACCESSED_BY: p.accessed_by |= bit; break;
      case CU_MEM_ADVISE_UNSET_ACCESSED_BY: p.accessed_by &= static_cast<uint16_t>(~bit); break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

CUresult ManagedMemory::RangeAttribute(void* data, size_t data_size, CUmem_range_attribute attribute,
                                       CUdeviceptr address, size_t count) {
  if (data == nullptr || count == 0 || !Any()) return CUDA_ERROR_INVALID_VALUE;
  const bool list = attribute == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY;
  if (list ? (data_size == 0 || data_size % 4 != 0) : data_size != 4) return CUDA_ERROR_INVALID_VALUE;
  std::vector<int> answer;
  {
    Hold hold;
    ManagedRange* a = FindLocked(address);
    if (a == nullptr || !RangeInside(*a, address, count)) return CUDA_ERROR_INVALID_VALUE;
    size_t first, last;
    PagesOf(*a, address, count, &first, &last);
    // The value every page of the range agrees on, or kNoLocation.
    auto common = [&](int16_t PageAdvice::*field) {
      int16_t v = a->advice[first].*field;
      for (size_t i = first; i < last; ++i) {
        if (a->advice[i].*field != v) return kNoLocation;
      }
      return static_cast<int>(v);
    };
    auto type_of = [](int location) {
      return location == kNoLocation     ? CU_MEM_LOCATION_TYPE_INVALID
             : location == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST
                                         : CU_MEM_LOCATION_TYPE_DEVICE;
    };
    switch (attribute) {
      case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: {
        int all = 1;
        for (size_t i = first; i < last; ++i) all &= a->advice[i].read_mostly;
        answer.push_back(all);
        break;
      }
      case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: answer.push_back(common(&PageAdvice::preferred)); break;
      case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: answer.push_back(common(&PageAdvice::last_prefetch)); break;
      case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
        answer.push_back(type_of(common(&PageAdvice::preferred)));
        break;
      case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
        answer.push_back(type_of(common(&PageAdvice::last_prefetch)));
        break;
      case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
        answer.push_back(std::max(common(&PageAdvice::preferred), 0));
        break;
      case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
        answer.push_back(std::max(common(&PageAdvice::last_prefetch), 0));
        break;
      case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
        uint16_t all = 0xffff;
        for (size_t i = first; i < last; ++i) all &= a->advice[i].accessed_by;
        for (int bit = 0; bit <= kCpuAccessBit; ++bit) {
          if ((all & (1u << bit)) != 0) answer.push_back(bit == kCpuAccessBit ? CU_DEVICE_CPU : bit);
        }
        answer.resize(std::max(answer.size(), data_size / 4), kNoLocation);
        answer.resize(data_size / 4);
        break;
      }
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // Written outside the lock: `data` may itself be managed memory, whose fault takes the lock.
  std::memcpy(data, answer.data(), answer.size() * sizeof(int));
  return CUDA_SUCCESS;
}

ManagedMemory::Stats ManagedMemory::stats() const {
  Stats st;
  st.bytes_to_device = S().bytes_to_device.load();
  st.bytes_to_host = S().bytes_to_host.load();
  st.faults = S().faults.load();
  return st;
}

// ---- Entry points (forward_spec.h, GP_MANAGED_FORWARDS). --------------------------------------------------------

namespace {

// The location of the CUDA 8 entry points' CUdevice argument (CU_DEVICE_CPU: the host).
CUmemLocation DeviceLocation(CUdevice device) {
  CUmemLocation l{};
  l.type = device == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  l.id = device == CU_DEVICE_CPU ? 0 : device;
  return l;
}

// A location as cuMemAdvise and cuMemPrefetchAsync take it: CU_DEVICE_CPU for the host (any NUMA node: the host
// copy is one), a device ordinal, or false.
bool LocationOrdinal(const CUmemLocation& l, int* ordinal) {
  switch (l.type) {
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: *ordinal = CU_DEVICE_CPU; return true;
    case CU_MEM_LOCATION_TYPE_DEVICE: *ordinal = l.id; return true;
    default: return false;
  }
}

}  // namespace

CUresult MemAllocManaged(CUdeviceptr* p, size_t n, unsigned int flags) {
  int dev;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Remote::Get().CurrentDevice(&dev); r != CUDA_SUCCESS) return r;
  return ManagedMemory::Get().Allocate(dev, n, flags, p);
}

CUresult StreamAttachMem(CUstream stream, CUdeviceptr p, size_t n, unsigned int flags) {
  int dev;
  uint64_t sid;
  if (CUresult r = Remote::Get().ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  // One stream alone: the NULL stream (legacy or per-thread) is every stream's partner, not one stream.
  const bool default_stream = stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
  if (flags == CU_MEM_ATTACH_SINGLE && default_stream) return CUDA_ERROR_INVALID_VALUE;
  return ManagedMemory::Get().Attach(dev, sid, p, n, flags);
}

CUresult MemPrefetch(CUdeviceptr p, size_t n, CUmemLocation location, unsigned int flags, CUstream stream) {
  int dev, to;
  uint64_t sid;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;  // None defined.
  if (CUresult r = Remote::Get().ResolveStream(stream, &dev, &sid); r != CUDA_SUCCESS) return r;
  if (!LocationOrdinal(location, &to)) return CUDA_ERROR_INVALID_VALUE;
  return ManagedMemory::Get().Prefetch(p, n, to == CU_DEVICE_CPU, to, dev, sid);
}

CUresult MemPrefetchTo(CUdeviceptr p, size_t n, CUdevice device, CUstream stream) {
  return MemPrefetch(p, n, DeviceLocation(device), 0, stream);
}

CUresult MemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation location) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  int to = CU_DEVICE_CPU;
  const bool located = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION || advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
                       advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  if (located && !LocationOrdinal(location, &to)) return CUDA_ERROR_INVALID_VALUE;
  return ManagedMemory::Get().Advise(p, n, advice, to);
}

CUresult MemAdviseFor(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice device) {
  return MemAdvise(p, n, advice, DeviceLocation(device));
}

CUresult MemRangeGetAttribute(void* data, size_t bytes, CUmem_range_attribute attribute, CUdeviceptr p, size_t n) {
  if (CUresult r = Driver::Get().CheckInitialized(); r != CUDA_SUCCESS) return r;
  return ManagedMemory::Get().RangeAttribute(data, bytes, attribute, p, n);
}

CUresult MemRangeGetAttributes(void** data, size_t* bytes, CUmem_range_attribute* attributes, size_t count,
                               CUdeviceptr p, size_t n) {
  if (data == nullptr || bytes == nullptr || attributes == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (CUresult r = MemRangeGetAttribute(data[i], bytes[i], attributes[i], p, n); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace gpupool::interpose

GP_MANAGED_FORWARDS(GP_DEFINE_FORWARD)
