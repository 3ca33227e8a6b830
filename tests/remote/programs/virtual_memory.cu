// Virtual memory management on slices, as allocators (PyTorch's expandable segments) use it: reserve address space,
// create physical memory (counted against the slice), map two allocations back to back and use them as one range
// (copies and a kernel span the seam), alias one allocation at a second address, retain a handle from an address,
// release memory that is still mapped, and the refusals: partial unmaps, freeing a reservation that is still mapped,
// more physical memory than the slice, exporting a shareable handle, mapping one slice's memory into another's
// reservation (run with two slices). Prints "N failure(s): PASSED/FAILED".
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#define PROGRAM_NAME "virtual_memory"
#include "program_checks.h"

#define CU_EXPECT(call, expected)                                                                       \
  do {                                                                                                  \
    CUresult r_ = (call);                                                                               \
    if (r_ != (expected)) {                                                                             \
      const char* name_ = nullptr;                                                                      \
      cuGetErrorName(r_, &name_);                                                                       \
      std::printf(PROGRAM_NAME ": %s returned %s, expected %s\n", #call, name_ ? name_ : "?", #expected); \
      ++failures;                                                                                       \
    }                                                                                                   \
  } while (0)
#define CU(call) CU_EXPECT(call, CUDA_SUCCESS)

__global__ void AddOne(unsigned* p, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] += 1;
}

__global__ void SetTo(unsigned* p, size_t n, unsigned value) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = value;
}

int main() {
  CHECK(cudaFree(nullptr));  // The primary context of device 0, current.
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  int supported = 0;
  CU(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  EXPECT(supported == 1, "virtual memory management reported as supported");

  // A reservation at a far hint, once the program holds memory and a loaded kernel: what it holds stays (a slice
  // whose session looked unused through its direct connection moved its window there, and lost both).
  {
    unsigned* before = nullptr;
    CHECK(cudaMalloc(&before, 1024 * sizeof(unsigned)));
    SetTo<<<4, 256>>>(before, 1024, 1);
    CHECK(cudaDeviceSynchronize());
    CUdeviceptr far = 0;
    CU(cuMemAddressReserve(&far, 1ull << 30, 0, 0x200000000000ull, 0));
    AddOne<<<4, 256>>>(before, 1024);
    CHECK(cudaGetLastError());
    std::vector<unsigned> back(1024, 0);
    CHECK(cudaMemcpy(back.data(), before, back.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (unsigned v : back) wrong += v != 2;
    EXPECT(wrong == 0, "memory and a kernel of the program from before a far reservation still work after it");
    if (far != 0) CU(cuMemAddressFree(far, 1ull << 30));
    CHECK(cudaFree(before));
  }

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // As PyTorch asks; export is refused.
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  EXPECT(gran == (2u << 20), "a 2 MiB granularity");
  if (gran == 0) gran = 2u << 20;

  size_t free0 = 0, total = 0, free1 = 0;
  CU(cuMemGetInfo(&free0, &total));
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, 8 * gran, 0, 0, 0));
  size_t after_reserve = 0;
  CU(cuMemGetInfo(&after_reserve, &total));
  EXPECT(after_reserve == free0, "a reservation takes no memory");

  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  CU(cuMemCreate(&h1, 2 * gran, &prop, 0));
  CU(cuMemCreate(&h2, 2 * gran, &prop, 0));
  CU(cuMemGetInfo(&free1, &total));
  EXPECT(free0 - free1 == 4 * gran, "physical memory counted against the slice");

  CU(cuMemMap(va, 2 * gran, 0, h1, 0));
  CU(cuMemMap(va + 2 * gran, 2 * gran, 0, h2, 0));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, 4 * gran, &access, 1));
  unsigned long long flags = 0;
  CU(cuMemGetAccess(&flags, &prop.location, va + gran));
  EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "read-write access reported");

  // One range across the seam of two mappings: a copy in, a kernel, a copy out.
  size_t n = 4 * gran / sizeof(unsigned);
  std::vector<unsigned> host(n), back(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned>(i * 2654435761u);
  auto* p = reinterpret_cast<unsigned*>(va);
  CHECK(cudaMemcpy(p, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  AddOne<<<static_cast<unsigned>((n + 255) / 256), 256>>>(p, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(back.data(), p, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += back[i] != host[i] + 1;
  EXPECT(wrong == 0, "a kernel and copies across two mappings see one range");

  // The same physical memory at a second address reads the same bytes.
  CU(cuMemMap(va + 4 * gran, 2 * gran, 0, h1, 0));
  std::vector<unsigned> alias(2 * gran / sizeof(unsigned));
  CHECK(cudaMemcpy(alias.data(), reinterpret_cast<void*>(va + 4 * gran), 2 * gran, cudaMemcpyDeviceToHost));
  wrong = 0;
  for (size_t i = 0; i < alias.size(); ++i) wrong += alias[i] != host[i] + 1;
  EXPECT(wrong == 0, "an aliased mapping shows the same memory");

  CUmemGenericAllocationHandle retained = 0;
  CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + gran)));
  EXPECT(retained == h1, "the handle retained from an address is the one mapped there");
  CU(cuMemRelease(retained));
  CUmemAllocationProp got = {};
  CU(cuMemGetAllocationPropertiesFromHandle(&got, h2));
  EXPECT(got.location.id == 0 && got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
         "allocation properties as created");

  // Refusals.
  int fd = -1;
  CU_EXPECT(cuMemExportToShareableHandle(&fd, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_NOT_SUPPORTED);
  CU_EXPECT(cuMemUnmap(va, gran), CUDA_ERROR_INVALID_VALUE);               // Half a mapping.
  CU_EXPECT(cuMemAddressFree(va, 8 * gran), CUDA_ERROR_INVALID_VALUE);     // Still mapped.
  CU_EXPECT(cuMemMap(va + gran, 2 * gran, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);  // Overlaps a mapping.
  CUmemGenericAllocationHandle huge = 0;
  CU_EXPECT(cuMemCreate(&huge, (total / gran + 1) * gran, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);

  // Unmapped whole (two mappings in one call), released: the slice's memory is back.
  CU(cuMemUnmap(va, 4 * gran));
  CU(cuMemRelease(h2));
  // Released while still mapped: the memory stays usable until its last mapping goes.
  CU(cuMemRelease(h1));
  CHECK(cudaMemcpy(alias.data(), reinterpret_cast<void*>(va + 4 * gran), 2 * gran, cudaMemcpyDeviceToHost));
  EXPECT(alias[7] == host[7] + 1, "released memory stays readable while mapped");
  CU(cuMemUnmap(va + 4 * gran, 2 * gran));
  CU(cuMemAddressFree(va, 8 * gran));
  size_t free2 = 0;
  CU(cuMemGetInfo(&free2, &total));
  EXPECT(free2 == free0, "everything returned to the slice");

  // With a second slice: its memory cannot be mapped into the first slice's address space.
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  if (count > 1) {
    CUmemAllocationProp other = prop;
    other.location.id = 1;
    CUmemGenericAllocationHandle h3 = 0;
    CU(cuMemCreate(&h3, gran, &other, 0));  // Device 0 stays current: made on the device the properties name.
    CUdeviceptr va0 = 0;
    CU(cuMemAddressReserve(&va0, 2 * gran, 0, 0, 0));
    CU_EXPECT(cuMemMap(va0, gran, 0, h3, 0), CUDA_ERROR_NOT_SUPPORTED);
    CU(cuMemRelease(h3));
    CU(cuMemAddressFree(va0, 2 * gran));
  }

  std::printf("virtual_memory: %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
