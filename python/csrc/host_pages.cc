// Huge-page advice for CPU tensors that peers write into (see host_pages.h).
#include "host_pages.h"

#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace zwt {
namespace {

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older kernels answer EINVAL
#endif

constexpr uintptr_t kHuge = uintptr_t{2} << 20;
constexpr int kCollapseOnUse = 3;           // a range used this often is worth a one-time copy onto huge pages
constexpr size_t kMaxRanges = 4096;         // table bound (cleared when full: ranges are advised again)

std::atomic<bool> g_enabled{true};

struct Range {
  uintptr_t end = 0;  // the aligned range's end (a different end under the same start is another range)
  int uses = 0;       // destinations seen over it
};

class Table {
 public:
  // The number of times [start, end) has now been seen (1 for a new range or one whose end changed).
  int use(uintptr_t start, uintptr_t end) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ranges_.size() >= kMaxRanges) ranges_.clear();
    Range& r = ranges_[start];
    if (r.end != end) r = Range{end, 0};
    if (r.uses <= kCollapseOnUse) ++r.uses;  // stops one past the collapse: nothing more to do for the range
    return r.uses;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uintptr_t, Range> ranges_;
};

Table& table() {
  static Table* t = new Table();  // never destroyed: tensors may be freed during interpreter shutdown
  return *t;
}

// Whether torch's default CPU allocator made the memory under `t` (anonymous private memory of this process).
bool from_cpu_allocator(const at::Tensor& t) {
  if (!t.defined() || !t.is_cpu() || !t.has_storage()) return false;
  const c10::DeleterFnPtr mine = c10::GetDefaultCPUAllocator()->raw_deleter();
  return mine != nullptr && t.storage().data_ptr().get_deleter() == mine;
}

}  // namespace

bool set_huge_page_advice(bool enabled) { return g_enabled.exchange(enabled); }

void prefer_huge_pages(const at::Tensor& t) {
  if (!g_enabled.load(std::memory_order_relaxed) || t.nbytes() < kHuge || !from_cpu_allocator(t)) return;
  const auto p = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t start = (p + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (p + t.nbytes()) & ~(kHuge - 1);
  if (end <= start) return;
  if (table().use(start, end) != kCollapseOnUse) return;
  void* addr = reinterpret_cast<void*>(start);
  (void)madvise(addr, end - start, MADV_HUGEPAGE);  // best effort (see host_pages.h)
  (void)madvise(addr, end - start, MADV_COLLAPSE);
}

}  // namespace zwt
