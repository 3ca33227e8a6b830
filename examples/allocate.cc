// Links libgpupool the way a user does (find_package(gpupool) or pkg-config) and holds a lease.
//   allocate [COUNT] [FRACTION]       e.g. GPUPOOL_SERVERS=gpu1:7450 ./allocate 2 0.5
#include <cstdio>
#include <cstdlib>

#include <gpupool/gpupool.h>

int main(int argc, char** argv) {
  auto pool = gpupool::Pool::Connect();
  if (!pool.ok()) {
    std::fprintf(stderr, "allocate: %s\n", pool.status().ToString().c_str());
    return 1;
  }
  gpupool::Request request;
  request.count = argc > 1 ? std::atoi(argv[1]) : 1;
  if (argc > 2) {
    auto fraction = gpupool::ParseFraction(argv[2]);
    if (!fraction.ok()) {
      std::fprintf(stderr, "allocate: %s\n", fraction.status().ToString().c_str());
      return 1;
    }
    request.fraction = *fraction;
  }
  auto lease = pool->Allocate(request);
  if (!lease.ok()) {
    std::fprintf(stderr, "allocate: %s\n", lease.status().ToString().c_str());
    return 1;
  }
  std::printf("lease %s: %s\n", lease->id().c_str(), gpupool::DescribeRequest(request).c_str());
  for (const gpupool::Slice& s : lease->slices()) {
    std::printf("  %s GPU %u (%s): %s, %.0f%% compute\n", s.server_name.c_str(), s.device, s.model.c_str(),
                gpupool::FormatMemorySize(s.memory_bytes).c_str(), s.compute_share * 100);
  }
  gpupool::Status released = lease->Release();  // The destructor would release too; this reports the outcome.
  std::printf("released: %s\n", released.ToString().c_str());
  return released.ok() ? 0 : 1;
}
