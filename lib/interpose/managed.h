// Managed memory (cuMemAllocManaged) on remote slices, which report concurrentManagedAccess = 0: CUDA's rules for
// such devices (the host may touch managed memory only while no kernel that may use it runs) are what make a
// remote copy coherent without a GPU's page faults.
//
// An allocation is device memory of its slice at a window address, and the same address is host memory in this
// process: a memfd mapped there over the window's reservation (plus a second, private view of the same pages through
// which gpupool itself reads and writes them, so that its own accesses never fault). Each page is, on the host:
//   fresh    (PROT_READ|WRITE) no device work used it yet: the slice holds zeros, the host what it wrote (system
//                              calls included: read(2) may fill a new allocation);
//   clean    (PROT_READ)       the host copy equals the device's;
//   dirty    (PROT_READ|WRITE) the host wrote it since; the device copy is stale;
//   invalid  (PROT_NONE)       device work that may have written it was sent since the host last had it.
// The host's first write to a clean page faults and marks it dirty; a touch of an invalid page faults, waits for
// the device work that may write it, and fetches the page (with read-ahead) from the slice. Before device work
// that may use an allocation (a kernel or graph on a stream that sees it; a copy or memset on its range), the dirty
// pages it covers (and the fresh ones that are not all zeros) go to the slice, in order on that work's stream, and
// pages that work may write become invalid. A stream sees an allocation attached CU_MEM_ATTACH_GLOBAL (on its device),
// or attached CU_MEM_ATTACH_SINGLE to it (cuStreamAttachMemAsync); an allocation attached CU_MEM_ATTACH_HOST is seen by
// no kernel.
//
// An allocation lives on the slice that was current when it was made (a remote device cannot reach another
// server's memory): kernels of other slices cannot use it; copies can. A system call that writes into a page the
// device may have written since the host last touched it (read(2) into an invalid page) fails with EFAULT: the
// kernel does not raise the fault gpupool resolves; touch the memory or prefetch it to the host first.
#ifndef GPUPOOL_INTERPOSE_MANAGED_H_
#define GPUPOOL_INTERPOSE_MANAGED_H_

#include <atomic>
#include <cstdint>

#include "api.h"

namespace gpupool::interpose {

class ManagedMemory {
 public:
  static ManagedMemory& Get();

  // Whether any managed allocation exists (the hooks below cost nothing until one does).
  bool Any() const { return live_.load(std::memory_order_acquire) > 0; }

  // cuMemAllocManaged on `device`: `flags` CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST. Counted against the slice's
  // memory like any allocation (rounded up to whole host pages).
  CUresult Allocate(int device, size_t bytes, unsigned int flags, CUdeviceptr* out);
  // A module's __managed__ variable at [address, address + bytes) of `device`'s window (cuLibraryGetManaged), which
  // already holds its initial value: its pages become managed like an allocation's (shared with neighbouring
  // variables, whose device writes pass through the same hooks). `owner` (the module) keeps them until
  // ForgetOwner.
  CUresult AdoptVariable(int device, uint64_t address, uint64_t bytes, const void* owner);
  // The module `owner` is unloaded: its variables' pages are the window's reservation again.
  void ForgetOwner(const void* owner);
  // Frees the managed allocation at `base` (after the device work queued before), answering true in *handled; or
  // *handled = false when `base` is no managed allocation's base.
  CUresult Free(CUdeviceptr base, bool* handled);
  // Whether `address` lies in a managed allocation; *base and *bytes (either may be null) then describe it.
  bool Find(uint64_t address, uint64_t* base = nullptr, uint64_t* bytes = nullptr) const;

  // Kernel work (a launch, a graph launch) about to be sent on `stream` of `device`.
  CUresult BeforeKernel(int device, uint64_t stream);
  // A copy or memset about to be sent on `stream` of `device` that reads (write = false) or writes [address,
  // address + bytes), which may lie in a managed allocation.
  CUresult BeforeDeviceAccess(int device, uint64_t stream, uint64_t address, uint64_t bytes, bool write);
  // The program synchronised `device` (cuCtxSynchronize): device work sent before `epoch`, which WorkEpoch
  // answered before that wait began, is done, and a later host touch need not wait for it again.
  uint64_t WorkEpoch(int device);
  void Synchronized(int device, uint64_t epoch);

  // cuStreamAttachMemAsync: `stream` resolved to (device, remote stream), `flags` CU_MEM_ATTACH_*.
  CUresult Attach(int device, uint64_t stream, CUdeviceptr address, size_t length, unsigned int flags);
  // cuMemPrefetchAsync: to the host (`to_host`), the pages come back now, after the stream's work; to the
  // allocation's device, the host's writes go now, in order on the stream.
  CUresult Prefetch(CUdeviceptr address, size_t count, bool to_host, int to_device, int device, uint64_t stream);
  // cuMemAdvise, recorded per page for cuMemRangeGetAttribute (`location`: a device ordinal or CU_DEVICE_CPU).
  CUresult Advise(CUdeviceptr address, size_t count, CUmem_advise advice, int location);
  CUresult RangeAttribute(void* data, size_t data_size, CUmem_range_attribute attribute, CUdeviceptr address,
                          size_t count);

  // What moved, for GPUPOOL_MANAGED_STATS and bench/managed_bench: bytes sent to the slices and fetched back, and
  // host page faults taken.
  struct Stats {
    uint64_t bytes_to_device = 0, bytes_to_host = 0, faults = 0;
  };
  Stats stats() const;

 private:
  ManagedMemory() = default;
  std::atomic<int> live_{0};
};

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_MANAGED_H_
