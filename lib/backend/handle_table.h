// Session-local handles (modules, functions, streams, events): small numbers the client holds instead of
// backend pointers, so a client can only name objects of its own session. 0 is never a handle (it means the
// default stream). Handles are never reused, so a stale handle names nothing; numbers of another session name
// nothing of this one (or, by coincidence, this session's own object).
#ifndef GPUPOOL_BACKEND_HANDLE_TABLE_H_
#define GPUPOOL_BACKEND_HANDLE_TABLE_H_

#include <cstdint>
#include <iterator>
#include <map>
#include <utility>

namespace gpupool::backend {

template <typename T>
class HandleTable {
 public:
  using Map = std::map<uint64_t, T>;

  // Stores `value` under a new handle and returns the handle.
  uint64_t Add(T value) {
    uint64_t id = next_++;
    items_.emplace(id, std::move(value));
    return id;
  }

  // Stores `value` under handle `id` (a restored session's handle, session_image.h); false when `id` is 0 or taken.
  // Later Adds never reuse it.
  bool AddAt(uint64_t id, T value) {
    if (id == 0 || !items_.emplace(id, std::move(value)).second) return false;
    if (id >= next_) next_ = id + 1;
    return true;
  }

  typename Map::iterator find(uint64_t id) { return items_.find(id); }
  typename Map::iterator begin() { return items_.begin(); }
  typename Map::iterator end() { return items_.end(); }
  // Moves the item named `id` out of the table into `*out`; false when `id` names nothing.
  bool Take(uint64_t id, T* out) {
    auto it = items_.find(id);
    if (it == items_.end()) return false;
    *out = std::move(it->second);
    items_.erase(it);
    return true;
  }
  void clear() { items_.clear(); }
  // Erases every item for which `pred(handle, value)` holds (the functions of an unloaded module).
  template <typename Pred>
  void EraseIf(Pred pred) {
    for (auto it = items_.begin(); it != items_.end();) {
      it = pred(it->first, it->second) ? items_.erase(it) : std::next(it);
    }
  }

 private:
  Map items_;
  uint64_t next_ = 1;
};

}  // namespace gpupool::backend

#endif  // GPUPOOL_BACKEND_HANDLE_TABLE_H_
