// Parser test input: a struct passed by value (an aligned .b8 array parameter).
struct Params {
  double scale;
  float offset;
  int count;
  float* data;
};
extern "C" __global__ void apply(Params p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.count) p.data[i] = static_cast<float>(p.data[i] * p.scale + p.offset);
}
