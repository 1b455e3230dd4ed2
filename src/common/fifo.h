// common/fifo.h — a first-in first-out queue on one vector: push at the back, pop at a head index. Its storage is
// reused once the queue empties, and compacted when the popped prefix is at least half of it, so that a queue in a
// steady state allocates nothing (std::deque allocates a node per 512 bytes of elements: for the communicator's
// operation queue, one per operation or two). Storage that a burst grew beyond kKeep elements is given back when the
// queue empties.
// Threading: none (the communicator's queue is guarded by its mutex). Non-goals: iteration, random access.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace zw {

template <typename T>
class Fifo {
 public:
  // Storage kept through an emptying (elements). Large: a benchmark's batches of 5,000 queued operations that
  // regrew the storage every time ran 3-8 % slower at 2 ranks (docs/PERF.md); 16,384 of the communicator's entries
  // are ~4.6 MiB.
  static constexpr size_t kKeep = 16384;

  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }
  T& front() { return items_[head_]; }
  const T& front() const { return items_[head_]; }

  template <typename... A>
  T& emplace_back(A&&... args) {
    if (head_ > 0 && head_ * 2 >= items_.size()) {  // the popped prefix is the larger part: move the rest down
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    return items_.emplace_back(std::forward<A>(args)...);
  }
  // Removes and returns the oldest element (the queue must not be empty).
  T pop_front() {
    T v = std::move(items_[head_++]);
    if (head_ == items_.size()) {  // empty: start over at the front of the same storage
      if (items_.capacity() > kKeep)
        items_ = std::vector<T>();  // frees, allocates nothing (the next push starts small)
      else
        items_.clear();
      head_ = 0;
    }
    return v;
  }
  size_t capacity() const { return items_.capacity(); }

 private:
  std::vector<T> items_;  // [head_, size) are queued; [0, head_) popped, moved from
  size_t head_ = 0;
};

}  // namespace zw
