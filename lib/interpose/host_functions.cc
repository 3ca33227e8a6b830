#include "host_functions.h"

#include "remote.h"

namespace gpupool::interpose {

HostFunctions& HostFunctions::Get() {
  static HostFunctions* functions = new HostFunctions();  // Never destroyed: its thread may outlive exit's destructors.
  return *functions;
}

void HostFunctions::Enqueue(int device, uint64_t sid, std::function<void(CUresult)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  ++pending_[{device, sid}];
  queue_.push_back({device, sid, std::move(fn)});
  if (!started_) {
    started_ = true;
    std::thread([this] { Run(); }).detach();
  }
  changed_.notify_all();
}

bool HostFunctions::BlocksLocked(int device, uint64_t sid) const {
  if (sid == 0) {  // Any stream of the device (pending_ holds only streams with a function pending).
    auto it = pending_.lower_bound({device, 0});
    return it != pending_.end() && it->first.first == device;
  }
  return pending_.count({device, sid}) > 0 || pending_.count({device, 0}) > 0;
}

void HostFunctions::WaitBefore(int device, uint64_t sid) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return !BlocksLocked(device, sid); });
}

bool HostFunctions::PendingBefore(int device, uint64_t sid) {
  std::lock_guard<std::mutex> lock(mu_);
  return BlocksLocked(device, sid);
}

void HostFunctions::WaitDevice(int device) { WaitBefore(device, 0); }

// One thread runs them in the order they were queued, as the driver's callback thread does.
void HostFunctions::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [&] { return !queue_.empty(); });
    Entry entry = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // Nothing later on this stream has been sent (its callers wait), so the stream's work is the work before it.
    Remote& remote = Remote::Get();
    RemoteSession* session = remote.session(entry.device);
    int code = session->StreamSynchronize(entry.sid);
    CUresult status = CUDA_SUCCESS;
    if (code != 0) {
      status = remote.Fail(entry.device, code, "the work before a host function");
      session->KeepAsyncError(code);  // The program's next synchronising call reports it, as on a GPU.
    }
    // After a kernel fault a GPU's driver runs none of the host functions queued behind it (seen on an H100 with
    // driver 580: neither a cuLaunchHostFunc function nor a cuStreamAddCallback callback runs); whoever waits for
    // one must notice the fault instead.
    if (!cu::IsStickyFault(code)) entry.fn(status);
    lock.lock();
    auto it = pending_.find({entry.device, entry.sid});
    if (--it->second == 0) pending_.erase(it);
    changed_.notify_all();
  }
}

}  // namespace gpupool::interpose
