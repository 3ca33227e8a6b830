// export_table_survey LIBRARY: one call into an NVIDIA library that makes it start on device 0 (and, for cuBLAS and
// cuRAND, run a kernel), for scripts/export-table-survey.sh, which lists the private export tables and slots each
// library asks gpupool's driver for. Prints the library's status.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cufft.h>
#include <curand.h>
#include <cusolverDn.h>
#include <cusparse.h>
#include <nvJitLink.h>
#include <nvrtc.h>
#include <cstdio>
#include <cstring>
int main(int argc, char** argv) {
  const char* which = argv[1];
  cudaFree(nullptr);
  int r = -1;
  if (!strcmp(which, "cublas")) { cublasHandle_t h; r = cublasCreate(&h); float *a; cudaMalloc(&a, 64*64*4*3); float one=1; if (!r) r = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 64,64,64,&one,a,64,a+4096,64,&one,a+8192,64); cudaDeviceSynchronize(); }
  if (!strcmp(which, "cublaslt")) { cublasLtHandle_t h; r = cublasLtCreate(&h); }
  if (!strcmp(which, "cufft")) { cufftHandle p; r = cufftPlan1d(&p, 256, CUFFT_C2C, 1); }
  if (!strcmp(which, "curand")) { curandGenerator_t g; r = curandCreateGenerator(&g, CURAND_RNG_PSEUDO_XORWOW); float* d; cudaMalloc(&d, 4096); if (!r) r = curandGenerateUniform(g, d, 1024); cudaDeviceSynchronize(); }
  if (!strcmp(which, "cusparse")) { cusparseHandle_t h; r = cusparseCreate(&h); }
  if (!strcmp(which, "cusolver")) { cusolverDnHandle_t h; r = cusolverDnCreate(&h); }
  if (!strcmp(which, "nvrtc")) { nvrtcProgram p; r = nvrtcCreateProgram(&p, "__global__ void k(){}", "k.cu", 0, 0, 0); const char* o[] = {"-arch=compute_120"}; if (!r) r = nvrtcCompileProgram(p, 1, o); }
  if (!strcmp(which, "nvjitlink")) { nvJitLinkHandle h; const char* o[] = {"-arch=sm_120"}; r = nvJitLinkCreate(&h, 1, o); }
  printf("%s: %d\n", which, r);
  return 0;
}
