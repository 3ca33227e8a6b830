/* zero_byte_ops: zero-byte copies and memsets on a NULL device pointer, and frees of NULL, through the driver API
 * alone, as numba's empty arrays and cuda.core's buffers make them. The driver treats them as no-ops that succeed
 * (CUDA_SUCCESS), and leaves no error behind for the next synchronising call; copies of one byte or more through
 * NULL are still refused, and real work before and after them still computes. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

static const char* Name(CUresult r) {
  const char* s = 0;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

/* EXPECT_RESULT(call, want): the call answers `want`. */
#define EXPECT_RESULT(call, want)                                                                      \
  do {                                                                                                 \
    CUresult r_ = (call);                                                                              \
    if (r_ != (want)) {                                                                                \
      printf("zero_byte_ops: %s answered %s, expected %s\n", #call, Name(r_), Name(want));             \
      ++failures;                                                                                      \
    }                                                                                                  \
  } while (0)
#define CHECK(call) EXPECT_RESULT(call, CUDA_SUCCESS)

int main(void) {
  enum { N = 4096 };
  static unsigned char host[N], back[N];
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUdeviceptr d = 0, d2 = 0;
  const CUdeviceptr null_device = 0;
  for (int i = 0; i < N; ++i) host[i] = (unsigned char)(i * 7 + 1);
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAlloc(&d, N));
  CHECK(cuMemAlloc(&d2, N));

  /* Zero bytes through NULL: every flavour the frameworks use, synchronous and stream-ordered. */
  CHECK(cuMemcpyHtoDAsync(null_device, host, 0, stream));
  CHECK(cuMemcpyHtoDAsync(null_device, NULL, 0, stream));
  CHECK(cuMemcpyHtoD(null_device, host, 0));
  CHECK(cuMemcpyDtoHAsync(back, null_device, 0, stream));
  CHECK(cuMemcpyDtoHAsync(NULL, null_device, 0, stream));
  CHECK(cuMemcpyDtoH(back, null_device, 0));
  CHECK(cuMemcpyDtoD(null_device, null_device, 0));
  CHECK(cuMemcpyDtoD(d, null_device, 0));
  CHECK(cuMemcpyDtoDAsync(null_device, d, 0, stream));
  CHECK(cuMemcpy(null_device, null_device, 0));
  CHECK(cuMemcpyAsync(null_device, d, 0, stream));
  CHECK(cuMemsetD8(null_device, 0x5a, 0));
  CHECK(cuMemsetD16(null_device, 0x5a5a, 0));
  CHECK(cuMemsetD32(null_device, 0x5a5a5a5a, 0));
  CHECK(cuMemsetD8Async(null_device, 0x5a, 0, stream));
  CHECK(cuMemsetD32Async(null_device, 0x5a5a5a5a, 0, stream));
  CHECK(cuMemsetD2D8(null_device, 64, 0x5a, 0, 4));
  /* Zero bytes at the end of an allocation (an empty slice of a buffer). */
  CHECK(cuMemcpyHtoDAsync(d + N, host, 0, stream));
  CHECK(cuMemcpyDtoHAsync(back, d + N, 0, stream));
  CHECK(cuMemsetD8Async(d + N, 0x5a, 0, stream));
  /* Frees of NULL. */
  CHECK(cuMemFree(null_device));
  CHECK(cuMemFreeAsync(null_device, stream));
  CHECK(cuMemFreeAsync(null_device, 0));

  /* Nothing is left behind: the stream and the context synchronise cleanly. */
  CHECK(cuStreamSynchronize(stream));
  CHECK(cuCtxSynchronize());

  /* One byte or more through NULL is still refused, and refused by the call. */
  EXPECT_RESULT(cuMemcpyHtoD(null_device, host, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_RESULT(cuMemcpyDtoH(back, null_device, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_RESULT(cuMemsetD8(null_device, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_RESULT(cuMemcpyHtoD(d, host, N + 1), CUDA_ERROR_INVALID_VALUE);

  /* Real work still computes: host -> d -> d2 -> back, and a memset of d2's second half. */
  CHECK(cuMemcpyHtoDAsync(d, host, N, stream));
  CHECK(cuMemcpyDtoDAsync(d2, d, N, stream));
  CHECK(cuMemsetD8Async(d2 + N / 2, 0xee, N / 2, stream));
  CHECK(cuMemcpyDtoHAsync(back, d2, N, stream));
  CHECK(cuStreamSynchronize(stream));
  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += back[i] != (i < N / 2 ? host[i] : 0xee);
  if (wrong != 0) {
    printf("zero_byte_ops: %d of %d bytes wrong after the copies\n", wrong, N);
    ++failures;
  }
  CHECK(cuMemFree(d));
  CHECK(cuMemFreeAsync(d2, stream));
  CHECK(cuStreamSynchronize(stream));
  CHECK(cuStreamDestroy(stream));
  printf("zero_byte_ops: %d failure(s): %s\n", failures, failures ? "FAILED" : "PASSED");
  return failures != 0;
}
