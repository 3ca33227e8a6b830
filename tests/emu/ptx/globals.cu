// Parser test input: module variables with initializers, including one holding another global's address.
__constant__ float coeffs[4] = {1.0f, 0.5f, -2.0f, 3.25f};
__constant__ int table[2][3] = {{1, 2, 3}, {4, 5, 6}};
__device__ int counter = 42;
__device__ long long big_value = -5;
__device__ double pi = 3.14159;
__device__ int* counter_ptr = &counter;
__device__ int target[8];
__device__ int* target_ptr = &target[2];
extern "C" __global__ void use_globals(float* out) {
  int i = threadIdx.x;
  out[i] = coeffs[i % 4] * table[i % 2][i % 3] + *counter_ptr + *target_ptr + big_value + pi;
}
