// Managed memory (cudaMallocManaged) on a gpupool slice, with the coherence CUDA defines for a device without
// concurrent managed access: the host's writes reach kernels, kernels' writes reach the host, copies and memsets
// see both, and allocations attached to one stream (or to the host) stay the host's while other streams run.
//
// usage: managed_memory [all | fork | lost]
//   all   every check below; exits 0 with "PASS" when all hold.
//   fork  a child forked after CUDA's initialisation touches managed memory: it dies with gpupool's message
//         (SIGBUS), and the parent, untouched, goes on.
//   handler  the program's own SIGSEGV handler, installed before and after gpupool's: managed memory works, and a
//         fault that is not gpupool's (a wild pointer) still reaches the program's handler.
//   lost  a child (forked before CUDA's initialisation) kills its agent (RUN_REMOTE_AGENT_PID, run_remote.sh) after
//         a kernel, then touches the managed memory the kernel wrote: it must die with gpupool's message (SIGBUS),
//         neither hanging nor reading a stale page; the parent checks that and exits 0 with "PASS".
#include <cuda_runtime.h>
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define PROGRAM_NAME "managed_memory"
#include "program_checks.h"

__global__ void Scale(float* a, size_t n, float k) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a[i] *= k;
}

__global__ void AddOne(int* a, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a[i] += 1;
}

// Busy for a while, then writes: long enough that host work on other memory overlaps it.
__global__ void SlowFill(int* a, size_t n, int v, int spins) {
  volatile int sink = 0;
  for (int s = 0; s < spins; ++s) sink = sink + s;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a[i] = v + (sink & 0);
}

static cudaMemLocation Device(int ordinal) {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeDevice;
  l.id = ordinal;
  return l;
}

static cudaMemLocation Host() {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeHost;
  return l;
}

static void Attributes() {
  int managed = -1, concurrent = -1;
  REQUIRE_OK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
  REQUIRE_OK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
  REQUIRE(managed == 1, "managedMemory = %d", managed);
  // On a slice (gp-run sets GPUPOOL_LEASE): a remote device cannot offer concurrent access. Run natively, the
  // program checks itself against the GPU's own driver, which may.
  if (OnSlice()) {
    REQUIRE(concurrent == 0, "concurrentManagedAccess = %d (a remote device cannot offer it)", concurrent);
  }
}

// Host writes, a kernel, host reads, several rounds, on an allocation large enough to be fetched in parts.
static void RoundTrips() {
  const size_t n = (size_t{6} << 20) / sizeof(float) + 123;  // 6 MiB and a bit: read-ahead, not whole.
  float* a = nullptr;
  size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE_OK(cudaMemGetInfo(&free_before, &total));
  REQUIRE_OK(cudaMallocManaged(&a, n * sizeof(float)));
  REQUIRE_OK(cudaMemGetInfo(&free_after, &total));
  // A slice counts managed memory when it is allocated; a GPU's driver places it at first touch (an H100: free
  // memory unchanged).
  if (OnSlice()) {
    REQUIRE(free_before - free_after >= n * sizeof(float), "the slice's free memory fell by %zu only",
            free_before - free_after);
  }
  for (size_t i = 0; i < n; ++i) REQUIRE(a[i] == 0.0f, "fresh managed memory at %zu is %f", i, a[i]);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<float>(i % 1000);
  Scale<<<64, 256>>>(a, n, 2.0f);
  REQUIRE_OK(cudaDeviceSynchronize());
  for (size_t i = 0; i < n; ++i) REQUIRE(a[i] == 2.0f * (i % 1000), "after one kernel a[%zu] = %f", i, a[i]);
  // Sparse host writes: a few pages dirty, the rest as the device left them.
  for (size_t i = 0; i < n; i += 4099) a[i] = -1.0f;
  Scale<<<64, 256>>>(a, n, 3.0f);
  REQUIRE_OK(cudaDeviceSynchronize());
  auto want = [](size_t i) { return i % 4099 == 0 ? -3.0f : 6.0f * (i % 1000); };
  for (size_t i = n; i-- > 0;) {  // Backwards: read-ahead must serve a descending sweep too.
    REQUIRE(a[i] == want(i), "after the second kernel a[%zu] = %f, want %f", i, a[i], want(i));
  }
  // A kernel the host never waited for: on a slice the host's touch waits for it. A GPU with concurrent managed
  // access lets the host read while the kernel runs (an H100 read the old value): natively the program waits.
  Scale<<<64, 256>>>(a, n, 0.5f);
  if (!OnSlice()) REQUIRE_OK(cudaDeviceSynchronize());
  for (size_t i = 0; i < n; ++i) REQUIRE(a[i] == 0.5f * want(i), "a[%zu] = %f with no synchronise", i, a[i]);
  REQUIRE_OK(cudaFree(a));
  REQUIRE_OK(cudaMemGetInfo(&free_after, &total));
  // On a slice exactly; a GPU's driver also takes memory for the kernels it loads at their first launch.
  if (OnSlice()) {
    REQUIRE(free_after == free_before, "free memory %zu after cudaFree, %zu before", free_after, free_before);
  }
}

// A small allocation comes back whole on its first touch.
static void Small() {
  int* s = nullptr;
  REQUIRE_OK(cudaMallocManaged(&s, 16 * sizeof(int)));
  for (int i = 0; i < 16; ++i) s[i] = i;
  for (int round = 0; round < 3; ++round) {
    AddOne<<<1, 16>>>(s, 16);
    REQUIRE_OK(cudaDeviceSynchronize());
  }
  for (int i = 0; i < 16; ++i) REQUIRE(s[i] == i + 3, "s[%d] = %d", i, s[i]);
  cudaPointerAttributes attributes{};
  REQUIRE_OK(cudaPointerGetAttributes(&attributes, s + 3));
  REQUIRE(attributes.type == cudaMemoryTypeManaged, "type %d", static_cast<int>(attributes.type));
  REQUIRE(attributes.hostPointer == s + 3 && attributes.devicePointer == s + 3, "host %p device %p for %p",
         attributes.hostPointer, attributes.devicePointer, static_cast<void*>(s + 3));
  REQUIRE_OK(cudaFree(s));
}

// Copies and memsets see the host's writes and leave theirs for the host.
static void CopiesAndMemsets() {
  const size_t n = 300000;
  int *a = nullptr, *b = nullptr, *device = nullptr;
  REQUIRE_OK(cudaMallocManaged(&a, n * sizeof(int)));
  REQUIRE_OK(cudaMallocManaged(&b, n * sizeof(int)));
  REQUIRE_OK(cudaMalloc(&device, n * sizeof(int)));
  std::vector<int> host(n), back(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<int>(i * 7);
  REQUIRE_OK(cudaMemcpy(back.data(), a, n * sizeof(int), cudaMemcpyDefault));  // Host writes, read by the device side.
  for (size_t i = 0; i < n; ++i) REQUIRE(back[i] == static_cast<int>(i * 7), "copy out of a[%zu] = %d", i, back[i]);
  REQUIRE_OK(cudaMemcpy(device, a, n * sizeof(int), cudaMemcpyDefault));
  AddOne<<<64, 256>>>(device, n);
  REQUIRE_OK(cudaMemcpy(b, device, n * sizeof(int), cudaMemcpyDefault));  // Device memory into managed.
  for (size_t i = 0; i < n; ++i) REQUIRE(b[i] == static_cast<int>(i * 7 + 1), "b[%zu] = %d", i, b[i]);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<int>(n - i);
  REQUIRE_OK(cudaMemcpy(a + 5, host.data(), (n - 5) * sizeof(int), cudaMemcpyHostToDevice));  // Partial first page.
  for (size_t i = 0; i < 5; ++i) REQUIRE(a[i] == static_cast<int>(i * 7), "a[%zu] = %d (not copied over)", i, a[i]);
  for (size_t i = 5; i < n; ++i) REQUIRE(a[i] == static_cast<int>(n - (i - 5)), "a[%zu] = %d", i, a[i]);
  a[1] = -42;  // Dirty on the host, next to what the memset writes.
  REQUIRE_OK(cudaMemset(a + 2, 0, (n - 2) * sizeof(int)));
  REQUIRE(a[0] == 0 && a[1] == -42, "a[0] = %d, a[1] = %d around a memset", a[0], a[1]);
  for (size_t i = 2; i < n; ++i) REQUIRE(a[i] == 0, "a[%zu] = %d after the memset", i, a[i]);
  REQUIRE_OK(cudaMemcpy(b, a, n * sizeof(int), cudaMemcpyDefault));  // Managed to managed.
  REQUIRE(b[1] == -42 && b[n - 1] == 0, "b[1] = %d, b[n-1] = %d", b[1], b[n - 1]);
  REQUIRE_OK(cudaFree(a));
  REQUIRE_OK(cudaFree(b));
  REQUIRE_OK(cudaFree(device));
}

// A new allocation filled by a system call (read(2) into it, as a program loads a file): the kernel sees the data.
static void SystemCallFills() {
  const size_t n = 3 * 1024 * 1024 / sizeof(int) + 77;
  std::vector<int> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<int>(i * 3 + 1);
  char path[] = "/tmp/gpupool-managed-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0, "mkstemp");
  unlink(path);
  REQUIRE(write(fd, data.data(), n * sizeof(int)) == static_cast<ssize_t>(n * sizeof(int)), "write");
  REQUIRE(lseek(fd, 0, SEEK_SET) == 0, "lseek");
  int* a = nullptr;
  REQUIRE_OK(cudaMallocManaged(&a, n * sizeof(int)));
  ssize_t got = read(fd, a, n * sizeof(int));
  REQUIRE(got == static_cast<ssize_t>(n * sizeof(int)), "read(2) into new managed memory: %zd (errno %d)", got, errno);
  close(fd);
  AddOne<<<64, 256>>>(a, n);
  REQUIRE_OK(cudaDeviceSynchronize());
  for (size_t i = 0; i < n; ++i) REQUIRE(a[i] == static_cast<int>(i * 3 + 2), "a[%zu] = %d", i, a[i]);
  REQUIRE_OK(cudaFree(a));
}

// cudaMemAttachHost and cudaStreamAttachMemAsync: memory of an idle stream is the host's while another stream runs.
static void StreamAttachment() {
  const size_t n = 1 << 16;
  int *mine = nullptr, *theirs = nullptr;
  REQUIRE_OK(cudaMallocManaged(&mine, n * sizeof(int), cudaMemAttachHost));
  REQUIRE_OK(cudaMallocManaged(&theirs, n * sizeof(int)));
  cudaStream_t s1, s2;
  REQUIRE_OK(cudaStreamCreate(&s1));
  REQUIRE_OK(cudaStreamCreate(&s2));
  REQUIRE_OK(cudaStreamAttachMemAsync(s2, theirs, 0, cudaMemAttachSingle));
  REQUIRE_OK(cudaStreamAttachMemAsync(s1, mine, 0, cudaMemAttachSingle));
  REQUIRE_OK(cudaStreamSynchronize(s1));
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<int>(i);
  AddOne<<<32, 256, 0, s1>>>(mine, n);
  REQUIRE_OK(cudaStreamSynchronize(s1));
  SlowFill<<<8, 64, 0, s2>>>(theirs, n, 9, 20000);  // Runs on while the host works on `mine`.
  for (size_t i = 0; i < n; ++i) REQUIRE(mine[i] == static_cast<int>(i + 1), "mine[%zu] = %d", i, mine[i]);
  for (size_t i = 0; i < n; ++i) mine[i] *= 2;
  REQUIRE_OK(cudaStreamSynchronize(s2));
  for (size_t i = 0; i < n; ++i) REQUIRE(theirs[i] == 9, "theirs[%zu] = %d", i, theirs[i]);
  AddOne<<<32, 256, 0, s1>>>(mine, n);
  REQUIRE_OK(cudaStreamSynchronize(s1));
  for (size_t i = 0; i < n; ++i) REQUIRE(mine[i] == static_cast<int>(2 * i + 3), "mine[%zu] = %d", i, mine[i]);
  // Refused: part of an allocation, and one stream alone for the NULL stream.
  REQUIRE_REFUSED(cudaStreamAttachMemAsync(s1, mine + 1, 4, cudaMemAttachSingle), cudaErrorInvalidValue,
                  "partial attach");
  REQUIRE_REFUSED(cudaStreamAttachMemAsync(s1, mine, 0, 0x10), cudaErrorInvalidValue, "unknown flags");
  REQUIRE_OK(cudaStreamDestroy(s1));
  REQUIRE_OK(cudaStreamDestroy(s2));
  REQUIRE_OK(cudaFree(mine));
  REQUIRE_OK(cudaFree(theirs));
}

// A host thread works on managed memory while another launches kernels on other managed memory: CUDA forbids it on
// such a device (the host would fault); gpupool serialises it, and neither loses an update.
static void Threads() {
  const size_t n = 20000;
  const int rounds = 40;
  int *x = nullptr, *y = nullptr;
  REQUIRE_OK(cudaMallocManaged(&x, n * sizeof(int)));
  REQUIRE_OK(cudaMallocManaged(&y, n * sizeof(int)));
  std::thread host([&] {
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < n; ++i) x[i] += 1;
    }
  });
  std::thread launcher([&] {
    for (int r = 0; r < rounds; ++r) {
      AddOne<<<16, 128>>>(y, n);
      REQUIRE_OK(cudaDeviceSynchronize());
    }
  });
  host.join();
  launcher.join();
  for (size_t i = 0; i < n; ++i) REQUIRE(x[i] == rounds && y[i] == rounds, "x[%zu] = %d, y[%zu] = %d", i, x[i], i, y[i]);
  REQUIRE_OK(cudaFree(x));
  REQUIRE_OK(cudaFree(y));
}

// Prefetches move data ahead of need; advice is recorded and reported.
static void PrefetchAndAdvice() {
  const size_t n = 1 << 20;
  float* a = nullptr;
  REQUIRE_OK(cudaMallocManaged(&a, n * sizeof(float)));
  cudaStream_t s;
  REQUIRE_OK(cudaStreamCreate(&s));
  for (size_t i = 0; i < n; ++i) a[i] = 1.0f;
  REQUIRE_OK(cudaMemPrefetchAsync(a, n * sizeof(float), Device(0), 0, s));
  int last = -7;
  REQUIRE_OK(cudaMemRangeGetAttribute(&last, sizeof(last), cudaMemRangeAttributeLastPrefetchLocation, a, n * sizeof(float)));
  REQUIRE(last == 0, "last prefetch location %d after a prefetch to device 0", last);
  Scale<<<64, 256, 0, s>>>(a, n, 4.0f);
  REQUIRE_OK(cudaMemPrefetchAsync(a, n * sizeof(float), Host(), 0, s));
  REQUIRE_OK(cudaStreamSynchronize(s));
  REQUIRE_OK(cudaMemRangeGetAttribute(&last, sizeof(last), cudaMemRangeAttributeLastPrefetchLocation, a, n * sizeof(float)));
  REQUIRE(last == cudaCpuDeviceId, "last prefetch location %d after a prefetch to the host", last);
  for (size_t i = 0; i < n; ++i) REQUIRE(a[i] == 4.0f, "a[%zu] = %f", i, a[i]);

  REQUIRE_OK(cudaMemAdvise(a, n * sizeof(float), cudaMemAdviseSetReadMostly, Device(0)));
  REQUIRE_OK(cudaMemAdvise(a, 4096, cudaMemAdviseSetPreferredLocation, Host()));
  REQUIRE_OK(cudaMemAdvise(a, n * sizeof(float), cudaMemAdviseSetAccessedBy, Device(0)));
  int mostly = -1, preferred = -7, accessed[3] = {7, 7, 7};
  REQUIRE_OK(cudaMemRangeGetAttribute(&mostly, 4, cudaMemRangeAttributeReadMostly, a, n * sizeof(float)));
  REQUIRE(mostly == 1, "read mostly %d", mostly);
  REQUIRE_OK(cudaMemRangeGetAttribute(&preferred, 4, cudaMemRangeAttributePreferredLocation, a, 4096));
  REQUIRE(preferred == cudaCpuDeviceId, "preferred location of the first page %d", preferred);
  REQUIRE_OK(cudaMemRangeGetAttribute(&preferred, 4, cudaMemRangeAttributePreferredLocation, a, n * sizeof(float)));
  REQUIRE(preferred == cudaInvalidDeviceId, "preferred location of the whole range %d", preferred);
  REQUIRE_OK(cudaMemRangeGetAttribute(accessed, sizeof(accessed), cudaMemRangeAttributeAccessedBy, a, n * sizeof(float)));
  REQUIRE(accessed[0] == 0 && accessed[1] == cudaInvalidDeviceId && accessed[2] == cudaInvalidDeviceId,
         "accessed by {%d, %d, %d}", accessed[0], accessed[1], accessed[2]);
  REQUIRE_OK(cudaMemAdvise(a, n * sizeof(float), cudaMemAdviseUnsetReadMostly, Device(0)));
  REQUIRE_OK(cudaMemRangeGetAttribute(&mostly, 4, cudaMemRangeAttributeReadMostly, a, n * sizeof(float)));
  REQUIRE(mostly == 0, "read mostly %d after unset", mostly);
  // Advice keeps the data as it is.
  Scale<<<64, 256, 0, s>>>(a, n, 0.25f);
  REQUIRE_OK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < n; ++i) REQUIRE(a[i] == 1.0f, "a[%zu] = %f after advice", i, a[i]);

  // Refused: not managed memory, a range past the allocation, an unknown device.
  float* plain = nullptr;
  REQUIRE_OK(cudaMalloc(&plain, 4096));
  REQUIRE_REFUSED(cudaMemRangeGetAttribute(&mostly, 4, cudaMemRangeAttributeReadMostly, plain, 4096),
                  cudaErrorInvalidValue, "range attribute of device memory");
  REQUIRE_REFUSED(cudaMemPrefetchAsync(a, n * sizeof(float) + 4096, Host(), 0, s), cudaErrorInvalidValue,
                  "prefetch past the allocation");
  REQUIRE_REFUSED(cudaMemAdvise(a, 4096, cudaMemAdviseSetAccessedBy, Device(77)), cudaErrorInvalidValue,
                  "advice for device 77");  // As an H100's driver (580) answers it.
  REQUIRE_REFUSED(cudaMemRangeGetAttribute(&mostly, 3, cudaMemRangeAttributeReadMostly, a, 4096), cudaErrorInvalidValue,
                  "a 3-byte answer for a 4-byte attribute");
  char* small = nullptr;  // 100 bytes: the rest of its page is no part of it.
  REQUIRE_OK(cudaMallocManaged(&small, 100));
  REQUIRE_REFUSED(cudaMemPrefetchAsync(small + 200, 16, Host(), 0, s), cudaErrorInvalidValue,
                  "prefetch past 100 bytes");
  REQUIRE_REFUSED(cudaMemAdvise(small + 99, 2, cudaMemAdviseSetReadMostly, Device(0)), cudaErrorInvalidValue,
                  "advice across the allocation's end");
  REQUIRE_OK(cudaFree(small));
  REQUIRE_OK(cudaFree(plain));
  REQUIRE_OK(cudaStreamDestroy(s));
  REQUIRE_OK(cudaFree(a));
}

// A graph's kernels see the host's writes on every launch (its recorded launches included).
static void Graphs() {
  const size_t n = 4096;
  int* flag = nullptr;
  REQUIRE_OK(cudaMallocManaged(&flag, n * sizeof(int)));
  cudaStream_t s;
  REQUIRE_OK(cudaStreamCreate(&s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  REQUIRE_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  AddOne<<<4, 256, 0, s>>>(flag, n);
  REQUIRE_OK(cudaStreamEndCapture(s, &graph));
  REQUIRE_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 4; ++round) {
    for (size_t i = 0; i < n; ++i) flag[i] = round * 10;
    REQUIRE_OK(cudaGraphLaunch(exec, s));
    REQUIRE_OK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; ++i) REQUIRE(flag[i] == round * 10 + 1, "round %d flag[%zu] = %d", round, i, flag[i]);
  }
  REQUIRE_OK(cudaGraphExecDestroy(exec));
  REQUIRE_OK(cudaGraphDestroy(graph));
  REQUIRE_OK(cudaStreamDestroy(s));
  REQUIRE_OK(cudaFree(flag));
}

static void Refusals() {
  void* p = nullptr;
  REQUIRE_REFUSED(cudaMallocManaged(&p, 64, 0x7), cudaErrorInvalidValue, "flags 7");
  size_t free_bytes = 0, total = 0;
  REQUIRE_OK(cudaMemGetInfo(&free_bytes, &total));
  REQUIRE_REFUSED(cudaMallocManaged(&p, total * 2), cudaErrorMemoryAllocation, "twice the slice");
}

static int Fork() {
  int* a = nullptr;
  REQUIRE_OK(cudaMallocManaged(&a, 1 << 20));
  for (int i = 0; i < (1 << 18); ++i) a[i] = i;
  AddOne<<<64, 256>>>(a, 1 << 18);
  REQUIRE_OK(cudaDeviceSynchronize());
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    volatile int v = a[5];  // Not the parent's pages: gpupool's message, then SIGBUS.
    std::printf("child read %d\n", v);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS, "the child ended with status %#x", status);
  for (int i = 0; i < (1 << 18); ++i) REQUIRE(a[i] == i + 1, "parent's a[%d] = %d after the fork", i, a[i]);
  AddOne<<<64, 256>>>(a, 1 << 18);
  REQUIRE_OK(cudaDeviceSynchronize());
  REQUIRE(a[7] == 9, "a[7] = %d", a[7]);
  REQUIRE_OK(cudaFree(a));
  std::printf("PASS\n");
  return 0;
}

// The program's crash handler: 42 for the wild pointer it expects, 43 for any other fault (a managed page's,
// which gpupool's handler should have taken).
static volatile sig_atomic_t g_wild = 0;
static void ProgramsHandler(int) { _exit(g_wild ? 42 : 43); }

static int Handler() {
  std::fflush(stdout);
  pid_t child = fork();  // Before CUDA's initialisation: the child is a program of its own.
  if (child == 0) {
    signal(SIGSEGV, ProgramsHandler);
    int* a = nullptr;
    REQUIRE_OK(cudaMallocManaged(&a, 1 << 20));
    signal(SIGSEGV, ProgramsHandler);  // Installed again after gpupool's, as a crash reporter may be.
    int* b = nullptr;
    REQUIRE_OK(cudaMallocManaged(&b, 1 << 20));
    for (int i = 0; i < (1 << 18); ++i) a[i] = b[i] = i;
    AddOne<<<64, 256>>>(a, 1 << 18);
    AddOne<<<64, 256>>>(b, 1 << 18);
    REQUIRE_OK(cudaDeviceSynchronize());
    REQUIRE(a[77] == 78 && b[99] == 100, "a[77] = %d, b[99] = %d", a[77], b[99]);
    volatile int* wild = reinterpret_cast<volatile int*>(uintptr_t{16});
    g_wild = 1;
    *wild = 1;  // Not managed memory: the program's handler exits 42.
    _exit(3);
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 42, "the child ended with status %#x", status);
  std::printf("PASS\n");
  return 0;
}

static int Lost() {
  const char* agent = std::getenv("RUN_REMOTE_AGENT_PID");
  REQUIRE(agent != nullptr, "RUN_REMOTE_AGENT_PID is not set (run under run_remote.sh)");
  int out[2];
  REQUIRE(pipe(out) == 0, "pipe");
  pid_t child = fork();
  if (child == 0) {
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    alarm(60);  // A hang ends as SIGALRM, which the parent reports.
    int* a = nullptr;
    REQUIRE_OK(cudaMallocManaged(&a, 4 << 20));
    for (int i = 0; i < (1 << 20); ++i) a[i] = i;
    AddOne<<<64, 256>>>(a, 1 << 20);
    REQUIRE_OK(cudaDeviceSynchronize());
    kill(static_cast<pid_t>(std::atoi(agent)), SIGKILL);
    sleep(1);
    volatile int v = a[12345];  // Written by the kernel, on a slice that is gone.
    std::fprintf(stderr, "read %d: a stale page\n", v);
    _exit(0);
  }
  close(out[1]);
  std::string said;
  char buffer[4096];
  for (ssize_t got; (got = read(out[0], buffer, sizeof(buffer))) > 0;) said.append(buffer, static_cast<size_t>(got));
  int status = 0;
  waitpid(child, &status, 0);
  std::fprintf(stderr, "%s", said.c_str());
  REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS, "the child ended with status %#x", status);
  REQUIRE(said.find("could not be fetched from device 0") != std::string::npos, "the child said no why");
  std::printf("PASS\n");
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "all";
  if (std::strcmp(mode, "fork") == 0) return Fork();
  if (std::strcmp(mode, "lost") == 0) return Lost();
  if (std::strcmp(mode, "handler") == 0) return Handler();
  Attributes();
  RoundTrips();
  Small();
  CopiesAndMemsets();
  SystemCallFills();
  StreamAttachment();
  Threads();
  PrefetchAndAdvice();
  Graphs();
  Refusals();
  std::printf("PASS\n");
  return 0;
}
