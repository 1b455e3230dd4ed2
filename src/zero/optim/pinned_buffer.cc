// zero/optim/pinned_buffer.cc — mmap + MADV_HUGEPAGE + pre-fault.
//
// The mapping is over-allocated by 2 MiB and trimmed so the start is 2 MiB-aligned (THP only backs aligned 2 MiB
// extents). Pre-faulting writes one byte per 4 KiB page after the advice, so the kernel can hand out huge pages.
// Non-goals: see pinned_buffer.h.
#include "zero/optim/pinned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace zw::zero {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kSmallPage = 4096;

}  // namespace

PinnedBuffer::~PinnedBuffer() { release(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)),
      huge_(std::exchange(other.huge_, false)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
    huge_ = std::exchange(other.huge_, false);
  }
  return *this;
}

void PinnedBuffer::release() {
  if (data_ != nullptr) munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
  huge_ = false;
}

Result<PinnedBuffer> alloc_pinned_hugepage(size_t bytes) {
  PinnedBuffer buf;
  if (bytes == 0) return buf;
  if (bytes > SIZE_MAX - 2 * kHugePage)
    return Status(Code::kInvalidArgument, "pinned buffer: size " + std::to_string(bytes) + " is too large");
  const size_t mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  const size_t over = mapped + kHugePage;
  void* raw = mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return Status(Code::kOutOfMemory, "pinned buffer: mmap of " + std::to_string(over) + " bytes failed: " +
                                          std::strerror(errno) + "; free host memory or shrink the optimizer shard");
  }
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > base) munmap(raw, aligned - base);
  const uintptr_t end = aligned + mapped;
  if (base + over > end) munmap(reinterpret_cast<void*>(end), base + over - end);
  auto* data = reinterpret_cast<char*>(aligned);
  buf.data_ = data;
  buf.size_ = bytes;
  buf.mapped_ = mapped;
  buf.huge_ = madvise(data, mapped, MADV_HUGEPAGE) == 0;  // EINVAL when THP is compiled out: still usable
  for (size_t off = 0; off < mapped; off += kSmallPage) *static_cast<volatile char*>(data + off) = 0;
  return buf;
}

}  // namespace zw::zero
