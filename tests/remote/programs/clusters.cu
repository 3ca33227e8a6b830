// clusters: a thread block cluster launch (cudaLaunchKernelEx with a cluster dimension) whose blocks read each
// other's shared memory (distributed shared memory). Needs a GPU of compute capability 9.0 or newer; the emulated
// device refuses clusters with cudaErrorNotSupported, which this program reports and exits 2 for.
#include <cooperative_groups.h>

#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;

// Each block stores its cluster rank in shared memory; after the cluster barrier, each reads its neighbour's.
__global__ void NeighbourRank(int* out) {
  __shared__ int rank;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) rank = static_cast<int>(cluster.block_rank());
  cluster.sync();
  const unsigned int next = (cluster.block_rank() + 1) % cluster.num_blocks();
  int* remote = cluster.map_shared_rank(&rank, next);
  if (threadIdx.x == 0) out[blockIdx.x] = *remote;
  cluster.sync();  // No block may exit while another still reads its shared memory.
}

int main() {
  const int blocks = 64, cluster_size = 4;
  int* out;
  if (cudaMalloc(&out, blocks * sizeof(int)) != cudaSuccess) return 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(128);
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster_size;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int resident = 0;
  cudaError_t err = cudaOccupancyMaxActiveClusters(&resident, NeighbourRank, &config);
  if (err == cudaSuccess && resident <= 0) {
    std::printf("clusters: cudaOccupancyMaxActiveClusters answered %d\n", resident);
    return 1;
  }
  if (err == cudaSuccess) err = cudaLaunchKernelEx(&config, NeighbourRank, out);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("clusters: %s\n", cudaGetErrorString(err));
    return err == cudaErrorNotSupported ? 2 : 1;
  }
  std::vector<int> got(blocks);
  cudaMemcpy(got.data(), out, blocks * sizeof(int), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int b = 0; b < blocks; ++b) wrong += got[b] != (b % cluster_size + 1) % cluster_size;
  std::printf("clusters: %d resident clusters of %d at most; %d blocks in clusters of %d, %d wrong: %s\n", resident,
              cluster_size, blocks, cluster_size, wrong,
              wrong == 0 ? "PASSED" : "FAILED");
  return wrong == 0 ? 0 : 1;
}
