// Host functions (cuLaunchHostFunc, cuStreamAddCallback, graph host nodes) as the driver runs them: the call returns
// at once, and the function runs on a callback thread of this library once the work queued before it on its stream
// is done. Work the program queues on that stream afterwards must not overtake it, so until it has run, later calls
// on the stream wait (Remote::ResolveStream), as do calls on any stream of the device when it sits on the default
// stream, and every call on the default stream when one is pending on any stream: the default stream is ordered
// with the others. A host function must not call CUDA (the driver's rule too).
#ifndef GPUPOOL_INTERPOSE_HOST_FUNCTIONS_H_
#define GPUPOOL_INTERPOSE_HOST_FUNCTIONS_H_

#include <cuda.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace gpupool::interpose {

class HostFunctions {
 public:
  static HostFunctions& Get();

  // Queues `fn` behind the work on stream `sid` of `device`; it is called with that work's outcome.
  void Enqueue(int device, uint64_t sid, std::function<void(CUresult)> fn);
  // Blocks while a host function that work on stream `sid` of `device` must follow has not run.
  void WaitBefore(int device, uint64_t sid);
  // Whether such a host function is pending (cuStreamQuery answers CUDA_ERROR_NOT_READY then).
  bool PendingBefore(int device, uint64_t sid);
  // Blocks until every host function of `device` has run (cuCtxSynchronize).
  void WaitDevice(int device);

 private:
  HostFunctions() = default;
  struct Entry {
    int device;
    uint64_t sid;
    std::function<void(CUresult)> fn;
  };
  bool BlocksLocked(int device, uint64_t sid) const;
  void Run();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Entry> queue_;
  // (device, stream) -> host functions queued and not yet run; streams with none have no entry.
  std::map<std::pair<int, uint64_t>, int> pending_;
  bool started_ = false;
};

}  // namespace gpupool::interpose

#endif  // GPUPOOL_INTERPOSE_HOST_FUNCTIONS_H_
