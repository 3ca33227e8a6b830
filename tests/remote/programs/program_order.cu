// program_order: what a CUDA program does in order takes effect in order, however gpupool carries its calls (posted
// without waiting for their answer, or waited for). Each check pairs a call the library may post with a call that
// waits, and requires the waited call to observe the posted call's effect, on the same thread and from another
// thread that the first one hands over to; errors surface where CUDA surfaces them, once. Then randomised
// interleavings of several threads, streams, posted and waited calls are checked against a model the program keeps
// on the host.
//
//   program_order [REPEATS [SEED]]   runs every check REPEATS times (default 3), the random part from SEED; it
//                                    starts itself again as a neighbour process of the same lease (its GPUPOOL_LEASE).
// Prints "program_order: N failure(s): PASSED" when every check held.
#include <cuda.h>
#include <cuda_runtime.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

#define PROGRAM_NAME "program_order"
#include "program_checks.h"

namespace {

std::mutex print_mu;
#define FAIL(...)                                 \
  do {                                            \
    std::lock_guard<std::mutex> lock_(print_mu);  \
    std::printf(PROGRAM_NAME ": " __VA_ARGS__);   \
    std::printf("\n");                            \
    ++failures;                                   \
  } while (0)

__global__ void Fill(int* out, size_t n, int value) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) out[i] = value;
}

__global__ void AddTo(int* out, size_t n, int value) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) out[i] += value;
}

// Runs for a while, then writes `value`: work a posted call queues behind.
__global__ void SlowFill(int* out, size_t n, int value, int spins) {
  volatile int sink = 0;
  for (int i = 0; i < spins; ++i) sink = sink + i;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) out[i] = value;
}

__global__ void WildWrite(int* out) { *reinterpret_cast<volatile int*>(out + (size_t{1} << 40)) = 1; }

// The first element of `n` ints at `dev` that is not `value`, or n.
size_t FirstNot(const int* dev, size_t n, int value) {
  std::vector<int> host(n, ~value);
  cudaError_t e = cudaMemcpy(host.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    FAIL("copy back failed: %s", cudaGetErrorString(e));
    return 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if (host[i] != value) return i;
  }
  return n;
}

// Runs `first` on this thread, then `second`: on this thread too, or (other_thread) on another thread that starts
// only once `first` returned (a handover the program orders, as a mutex or a queue would).
template <typename First, typename Second>
void Handover(bool other_thread, First first, Second second) {
  first();
  if (other_thread) {
    std::thread t(second);
    t.join();
  } else {
    second();
  }
}

size_t SliceBytes() {
  size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total));
  return total;
}

// ---- Posted call, then waited call: the waited one observes the posted one's effect. ----

// cudaFree returns with the memory free: an allocation right after may take it (PyTorch's empty_cache, then retry).
void FreeThenAlloc(bool other_thread) {
  const size_t slice = SliceBytes();
  const size_t half = slice / 2, more = half + (slice / 16);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, half));
  void* q = nullptr;
  auto free_it = [&] { CHECK(cudaFree(p)); };
  auto alloc_more = [&] {
    cudaError_t e = cudaMalloc(&q, more);
    if (e != cudaSuccess) {
      FAIL("free then alloc%s: cudaMalloc(%zu) after freeing %zu of %zu: %s", other_thread ? " (other thread)" : "",
           more, half, slice, cudaGetErrorString(e));
      cudaGetLastError();
    }
  };
  Handover(other_thread, free_it, alloc_more);
  if (q) CHECK(cudaFree(q));
}

// cudaFree then cudaMemGetInfo: the freed bytes count as free.
void FreeThenMemGetInfo(bool other_thread) {
  const size_t bytes = SliceBytes() / 4;
  size_t before = 0, after = 0, total = 0;
  CHECK(cudaMemGetInfo(&before, &total));
  void* p = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  auto free_it = [&] { CHECK(cudaFree(p)); };
  auto look = [&] {
    CHECK(cudaMemGetInfo(&after, &total));
    if (after < before) {
      FAIL("free then memGetInfo%s: %zu free before the allocation, %zu after its free", other_thread ? " (other thread)" : "",
           before, after);
    }
  };
  Handover(other_thread, free_it, look);
}

// cudaMemsetAsync, then a copy back on the same stream (or after a stream synchronisation on another thread).
void MemsetThenCopyBack(bool other_thread, int value) {
  constexpr size_t n = 1 << 18;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  SlowFill<<<4, 128, 0, s>>>(d, n, 7, 2000);
  CHECK(cudaMemsetAsync(d, value, n * sizeof(int), s));
  auto check = [&] {
    std::vector<int> host(n);
    CHECK(cudaMemcpyAsync(host.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    int expect;
    std::memset(&expect, value, sizeof(expect));
    for (size_t i = 0; i < n; ++i) {
      if (host[i] != expect) {
        FAIL("memset then copy back%s: element %zu is %d, not %d", other_thread ? " (other thread)" : "", i, host[i],
             expect);
        break;
      }
    }
  };
  Handover(other_thread, [] {}, check);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
}

// An asynchronous copy to the device from pinned memory, then a synchronous copy back.
void CopyThenCopyBack(bool other_thread, int value) {
  constexpr size_t n = 1 << 18;
  int* d = nullptr;
  int* pinned = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMallocHost(&pinned, n * sizeof(int)));
  for (size_t i = 0; i < n; ++i) pinned[i] = value;
  SlowFill<<<4, 128>>>(d, n, value + 1, 2000);
  CHECK(cudaMemcpyAsync(d, pinned, n * sizeof(int), cudaMemcpyHostToDevice, 0));
  auto check = [&] {
    size_t wrong = FirstNot(d, n, value);
    if (wrong != n) FAIL("copy then copy back%s: element %zu", other_thread ? " (other thread)" : "", wrong);
  };
  Handover(other_thread, [] {}, check);
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(d));
}

// A kernel, then an event recorded after it: once the event is complete (queried in a loop or waited for), the
// kernel's writes are visible.
void KernelThenEvent(bool other_thread) {
  constexpr size_t n = 1 << 16;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMemset(d, 0, n * sizeof(int)));
  cudaEvent_t e;
  CHECK(cudaEventCreate(&e));
  SlowFill<<<2, 128>>>(d, n, 42, 20000);
  CHECK(cudaEventRecord(e, 0));
  auto check = [&] {
    cudaError_t q;
    while ((q = cudaEventQuery(e)) == cudaErrorNotReady) std::this_thread::yield();
    if (q != cudaSuccess) FAIL("kernel then event query: %s", cudaGetErrorString(q));
    std::vector<int> host(n);
    // A copy on another stream (non-blocking) does not wait for the kernel: only the event said it was done.
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMemcpyAsync(host.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    for (size_t i = 0; i < n; ++i) {
      if (host[i] != 42) {
        FAIL("kernel then event query%s: the event was complete but element %zu is %d", other_thread ? " (other thread)" : "",
             i, host[i]);
        break;
      }
    }
  };
  Handover(other_thread, [] {}, check);
  CHECK(cudaEventDestroy(e));
  CHECK(cudaFree(d));
}

// A stream-ordered free, the stream synchronised, then the pool trimmed: the memory is back in the slice.
void StreamOrderedFreeThenTrim(bool other_thread) {
  const size_t bytes = SliceBytes() / 4;
  int device = 0;
  CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  size_t before = 0, after = 0, total = 0;
  CHECK(cudaMemPoolTrimTo(pool, 0));
  CHECK(cudaMemGetInfo(&before, &total));
  void* p = nullptr;
  CHECK(cudaMallocAsync(&p, bytes, s));
  CHECK(cudaMemsetAsync(p, 1, bytes, s));
  CHECK(cudaFreeAsync(p, s));
  auto check = [&] {
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolTrimTo(pool, 0));
    CHECK(cudaMemGetInfo(&after, &total));
    if (after < before) {
      FAIL("stream-ordered free then trim%s: %zu free before, %zu after", other_thread ? " (other thread)" : "", before,
           after);
    }
  };
  Handover(other_thread, [] {}, check);
  CHECK(cudaStreamDestroy(s));
}

// A graph whose kernel's value is changed in the executable graph: the next launch uses the new value.
void GraphUpdateThenLaunch(bool other_thread, int value) {
  constexpr size_t n = 4096;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  Fill<<<4, 128, 0, s>>>(d, n, value);
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s));
  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  cudaKernelNodeParams params;
  CHECK(cudaGraphKernelNodeGetParams(nodes[0], &params));
  int updated = value + 1;
  void* args[] = {&d, const_cast<size_t*>(&n), &updated};
  params.kernelParams = args;
  CHECK(cudaGraphExecKernelNodeSetParams(exec, nodes[0], &params));
  auto launch_and_check = [&] {
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    size_t wrong = FirstNot(d, n, updated);
    if (wrong != n) FAIL("graph update then launch%s: element %zu is not %d", other_thread ? " (other thread)" : "", wrong, updated);
  };
  Handover(other_thread, [] {}, launch_and_check);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
}

// Module unload, then load (driver API), many times over: each unloaded module's memory (a 1/8 of the slice in
// module variables) is back before the next load asks for it, and each new module works.
const char kModulePtx[] = R"(.version 7.0
.target sm_50
.address_size 64
.visible .global .align 4 .b8 ballast[BALLAST];
.visible .entry mark(.param .u64 out, .param .u32 value)
{
  .reg .b64 %rd<2>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u32 %r1, [value];
  st.global.u32 [%rd1], %r1;
  ret;
}
)";

void ModuleUnloadThenLoad(bool other_thread) {
  std::string ptx = kModulePtx;
  ptx.replace(ptx.find("BALLAST"), 7, std::to_string(SliceBytes() / 8));
  int* d = nullptr;
  CHECK(cudaMalloc(&d, sizeof(int)));
  CUmodule module = nullptr;
  for (int i = 0; i < 12; ++i) {
    auto load_and_run = [&] {
      CHECK(cudaFree(nullptr));  // The runtime makes the device's primary context current on this thread.
      CUresult r = cuModuleLoadData(&module, ptx.c_str());
      if (r != CUDA_SUCCESS) {
        const char* name = nullptr;
        cuGetErrorName(r, &name);
        FAIL("module unload then load%s, round %d: cuModuleLoadData: %s", other_thread ? " (other thread)" : "", i,
             name ? name : "?");
        module = nullptr;
        return;
      }
      CUfunction f;
      if (cuModuleGetFunction(&f, module, "mark") != CUDA_SUCCESS) FAIL("cuModuleGetFunction(mark)");
      CUdeviceptr out = reinterpret_cast<CUdeviceptr>(d);
      unsigned value = 100u + static_cast<unsigned>(i);
      void* args[] = {&out, &value};
      if (cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr) != CUDA_SUCCESS) FAIL("cuLaunchKernel(mark)");
      int back = 0;
      CHECK(cudaMemcpy(&back, d, sizeof(int), cudaMemcpyDeviceToHost));
      if (back != static_cast<int>(value)) FAIL("module round %d: the kernel wrote %d, not %u", i, back, value);
    };
    Handover(other_thread, [] {}, load_and_run);
    if (module != nullptr && cuModuleUnload(module) != CUDA_SUCCESS) FAIL("cuModuleUnload");
  }
  CHECK(cudaFree(d));
}

// cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize and host functions include every call posted
// before them.
void SynchronisationsIncludePostedCalls(bool other_thread) {
  constexpr size_t n = 1 << 14;
  constexpr int kLaunches = 64;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMemset(d, 0, n * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaEvent_t e;
  CHECK(cudaEventCreate(&e));
  std::vector<int> host(n);
  for (int kind = 0; kind < 4; ++kind) {
    for (int i = 0; i < kLaunches; ++i) AddTo<<<2, 128, 0, s>>>(d, n, 1);
    std::atomic<int> seen{-1};
    if (kind == 3) {
      // A host function after the launches, and the copy in it: copies are not allowed in host functions, so it
      // only marks that it ran; the copy back after the stream's synchronisation shows what it came after.
      CHECK(cudaLaunchHostFunc(s, [](void* p) { static_cast<std::atomic<int>*>(p)->store(1); }, &seen));
    }
    auto sync_and_check = [&] {
      if (kind == 0) CHECK(cudaDeviceSynchronize());
      if (kind == 1) CHECK(cudaStreamSynchronize(s));
      if (kind == 2) {
        CHECK(cudaEventRecord(e, s));
        CHECK(cudaEventSynchronize(e));
      }
      if (kind == 3) {
        CHECK(cudaStreamSynchronize(s));
        if (seen.load() != 1) FAIL("the host function had not run when its stream was synchronised");
      }
      CHECK(cudaMemcpy(host.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
      const int expect = (kind + 1) * kLaunches;
      for (size_t i = 0; i < n; ++i) {
        if (host[i] != expect) {
          FAIL("synchronisation kind %d%s: element %zu is %d, not %d", kind, other_thread ? " (other thread)" : "", i,
               host[i], expect);
          break;
        }
      }
    };
    Handover(other_thread && kind != 1 && kind != 3, [] {}, sync_and_check);
  }
  CHECK(cudaEventDestroy(e));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
}

// ---- Errors: where CUDA reports them, once. ----

// A non-sticky error of a call: reported by that call (or the next synchronising call for a launch), then cleared.
void NonStickyErrorsAreReportedOnce() {
  // An invalid launch configuration fails the launch itself, and cudaGetLastError reports it once. (Which of the two
  // codes cudart reports depends on whether it checks the shape itself or maps the driver's CUDA_ERROR_INVALID_VALUE:
  // either says "this launch", which is the point here.)
  Fill<<<1, 4096>>>(nullptr, 0, 0);
  cudaError_t first = cudaGetLastError();
  cudaError_t second = cudaGetLastError();
  if (first != cudaErrorInvalidConfiguration && first != cudaErrorInvalidValue) {
    FAIL("a block of 4096 threads: %s", cudaGetErrorString(first));
  }
  if (second != cudaSuccess) FAIL("the launch error was reported twice: %s", cudaGetErrorString(second));
  cudaError_t sync = cudaDeviceSynchronize();
  if (sync != cudaSuccess) FAIL("a synchronisation after a refused launch: %s", cudaGetErrorString(sync));
  // Freeing something never allocated: an error of that call, not sticky.
  int dummy = 0;
  cudaError_t bad = cudaFree(&dummy);
  if (bad == cudaSuccess) FAIL("cudaFree of a host address succeeded");
  cudaGetLastError();
  // A posted call on memory past the end of an allocation: CUDA refuses it in the call (the driver knows its
  // allocations); the error is that call's, and the next synchronisation is clean.
  char* p = nullptr;
  CHECK(cudaMalloc(&p, 4096));
  cudaError_t memset = cudaMemsetAsync(p + 2048, 0, 4096, 0);
  if (memset == cudaSuccess) FAIL("a memset past the end of its allocation was accepted");
  cudaGetLastError();
  std::vector<char> host(4096);
  cudaError_t copy = cudaMemcpyAsync(p + 4000, host.data(), 4096, cudaMemcpyHostToDevice, 0);
  if (copy == cudaSuccess) FAIL("a copy past the end of its allocation was accepted");
  cudaGetLastError();
  cudaError_t after = cudaDeviceSynchronize();
  if (after != cudaSuccess) FAIL("the synchronisation after refused calls reports %s", cudaGetErrorString(after));
  CHECK(cudaFree(p));
  CHECK(cudaDeviceSynchronize());
}

// A kernel's fault is sticky: every later call of the context reports it (the program ends after this).
void StickyErrorsStay() {
  int* d = nullptr;
  CHECK(cudaMalloc(&d, sizeof(int)));
  WildWrite<<<1, 1>>>(d);
  cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess) FAIL("the wild kernel's launch itself failed: %s", cudaGetErrorString(launch));
  int back = 0;
  cudaError_t copy = cudaMemcpy(&back, d, sizeof(int), cudaMemcpyDeviceToHost);
  if (copy != cudaErrorIllegalAddress) FAIL("the copy after a faulting kernel: %s", cudaGetErrorString(copy));
  for (int i = 0; i < 3; ++i) {
    cudaError_t again = cudaDeviceSynchronize();
    if (again != cudaErrorIllegalAddress) FAIL("synchronisation %d after the fault: %s", i, cudaGetErrorString(again));
  }
  void* p = nullptr;
  cudaError_t alloc = cudaMalloc(&p, 4096);
  if (alloc != cudaErrorIllegalAddress) FAIL("an allocation after the fault: %s", cudaGetErrorString(alloc));
}

// ---- Another process of the same lease: the slice's memory is the lease's, and a free is back in it for the
// neighbour as soon as cudaFree returned.

// The neighbour's side (`program_order neighbour READ_FD WRITE_FD`): for each byte it reads, allocates `slice/2`
// and answers 'y' (it got it, and freed it again) or 'n' (out of memory).
int Neighbour(int in, int out) {
  const size_t half = SliceBytes() / 2;
  for (char c; read(in, &c, 1) == 1;) {
    void* p = nullptr;
    const bool got = cudaMalloc(&p, half) == cudaSuccess;
    cudaGetLastError();
    if (got) CHECK(cudaFree(p));
    const char answer = got ? 'y' : 'n';
    if (write(out, &answer, 1) != 1) return 1;
  }
  return failures == 0 ? 0 : 1;
}

void FreeThenNeighbourAllocates(const char* self) {
  // Close-on-exec, so that the neighbour holds only its own ends (and sees the end of its input when this process
  // closes its end); its ends are given to it as descriptors 100 and 101.
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
    FAIL("pipe");
    return;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], 100);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], 101);
  char* argv[] = {const_cast<char*>(self), const_cast<char*>("neighbour"), const_cast<char*>("100"),
                  const_cast<char*>("101"), nullptr};
  pid_t child = 0;
  const int spawned = posix_spawn(&child, self, &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    FAIL("cannot start the neighbour process");
    return;
  }
  close(to_child[0]);
  close(from_child[1]);
  auto ask = [&]() -> char {
    char c = 'a', answer = '?';
    if (write(to_child[1], &c, 1) != 1 || read(from_child[0], &answer, 1) != 1) return '?';
    return answer;
  };
  const size_t most = SliceBytes() * 3 / 4;
  for (int round = 0; round < 5; ++round) {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, most));
    const char while_held = ask();
    if (while_held != 'n') FAIL("neighbour, round %d: it allocated half the slice while this process held 3/4 (%c)", round, while_held);
    CHECK(cudaFree(p));
    const char after_free = ask();
    if (after_free != 'y') FAIL("neighbour, round %d: it could not allocate half the slice after this process freed its 3/4 (%c)", round, after_free);
  }
  close(to_child[1]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAIL("the neighbour process ended with status %d", status);
  close(from_child[0]);
}

// ---- Randomised interleavings: threads, streams, posted and waited calls, against a host model. ----

// Each thread owns one buffer and one stream and applies random operations to it, keeping the expected contents on
// the host; waited calls check the model at random points. Threads run at once, so that the library's posting
// (batches, flusher thread, several threads sharing one connection) meets every interleaving the OS gives it.
void RandomInterleavings(unsigned seed, int threads, int steps) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([seed, t, steps] {
      std::mt19937 rng(seed * 7919u + static_cast<unsigned>(t));
      constexpr size_t n = 1 << 12;
      int* d = nullptr;
      cudaStream_t s;
      if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) {
        FAIL("thread %d: cannot set up", t);
        return;
      }
      std::vector<int> model(n, 0), host(n);
      CHECK(cudaMemsetAsync(d, 0, n * sizeof(int), s));
      std::vector<void*> extra;  // Allocations made and freed at random, to move the allocator.
      for (int step = 0; step < steps; ++step) {
        const int v = static_cast<int>(rng() % 1000);
        switch (rng() % 9) {
          case 0:  // Posted kernel.
            Fill<<<2, 128, 0, s>>>(d, n, v);
            std::fill(model.begin(), model.end(), v);
            break;
          case 1:
            AddTo<<<2, 128, 0, s>>>(d, n, v);
            for (int& x : model) x += v;
            break;
          case 2: {  // Posted memset of a byte pattern.
            const int byte = v & 0xff;
            CHECK(cudaMemsetAsync(d, byte, n * sizeof(int), s));
            int word;
            std::memset(&word, byte, sizeof(word));
            std::fill(model.begin(), model.end(), word);
            break;
          }
          case 3: {  // Posted copy of part of the buffer, from pageable memory.
            const size_t at = rng() % n, count = 1 + rng() % (n - at);
            std::vector<int> src(count, v);
            CHECK(cudaMemcpyAsync(d + at, src.data(), count * sizeof(int), cudaMemcpyHostToDevice, s));
            CHECK(cudaStreamSynchronize(s));  // Pageable memory: the copy must be done before `src` goes.
            std::fill(model.begin() + at, model.begin() + at + count, v);
            break;
          }
          case 4: {  // Waited: copy back and compare.
            CHECK(cudaMemcpyAsync(host.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
            CHECK(cudaStreamSynchronize(s));
            for (size_t i = 0; i < n; ++i) {
              if (host[i] != model[i]) {
                FAIL("random thread %d step %d: element %zu is %d, the model says %d", t, step, i, host[i], model[i]);
                break;
              }
            }
            break;
          }
          case 5: {  // Allocate and free (posted free), then allocate again.
            void* p = nullptr;
            if (cudaMalloc(&p, 1 << 20) == cudaSuccess) extra.push_back(p);
            if (!extra.empty() && rng() % 2) {
              CHECK(cudaFree(extra.back()));
              extra.pop_back();
            }
            break;
          }
          case 6: {  // Event record, then query until done: the work before it is visible.
            cudaEvent_t e;
            CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            CHECK(cudaEventRecord(e, s));
            CHECK(cudaEventSynchronize(e));
            CHECK(cudaEventDestroy(e));
            break;
          }
          case 7:  // Device-wide synchronisation from this thread.
            CHECK(cudaDeviceSynchronize());
            break;
          default:
            std::this_thread::yield();
        }
      }
      CHECK(cudaMemcpyAsync(host.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
      CHECK(cudaStreamSynchronize(s));
      for (size_t i = 0; i < n; ++i) {
        if (host[i] != model[i]) {
          FAIL("random thread %d at the end: element %zu is %d, the model says %d", t, i, host[i], model[i]);
          break;
        }
      }
      for (void* p : extra) CHECK(cudaFree(p));
      CHECK(cudaStreamDestroy(s));
      CHECK(cudaFree(d));
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "neighbour") == 0) return Neighbour(std::atoi(argv[2]), std::atoi(argv[3]));
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 3;
  const unsigned seed = argc > 2 ? static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)) : 1;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // Each failure and progress line as it happens (runs are long).
  CHECK(cudaFree(nullptr));
  for (int r = 0; r < repeats; ++r) {
    if (r > 0 && r % 10 == 0) std::printf("program_order: %d repeat(s) done, %d failure(s) so far\n", r, failures);
    for (bool other : {false, true}) {
      FreeThenAlloc(other);
      FreeThenMemGetInfo(other);
      MemsetThenCopyBack(other, 0x11 + r);
      CopyThenCopyBack(other, 1000 + r);
      KernelThenEvent(other);
      StreamOrderedFreeThenTrim(other);
      GraphUpdateThenLaunch(other, 3 * r);
      SynchronisationsIncludePostedCalls(other);
      ModuleUnloadThenLoad(other);
    }
    NonStickyErrorsAreReportedOnce();
    FreeThenNeighbourAllocates(argv[0]);
    RandomInterleavings(seed + static_cast<unsigned>(r), 3, 60);
  }
  StickyErrorsStay();
  std::printf("program_order: %d failure(s): %s\n", failures, failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
