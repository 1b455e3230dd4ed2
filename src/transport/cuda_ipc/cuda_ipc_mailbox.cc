// The descriptor mailbox of cuda_ipc_mailbox.h.
#include "transport/cuda_ipc/cuda_ipc_mailbox.h"

#include <fcntl.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace zw::transport::cuda_ipc {

std::string Mailbox::name(const std::string& prefix, int rank) { return "/" + prefix + "-gpu-" + std::to_string(rank); }

Result<Mailbox::Row*> Mailbox::map_row(const std::string& name, bool create) {
  int fd = create ? shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600) : shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0)
    return Status(Code::kSystem, std::string(create ? "creating" : "opening") + " shared memory " + name + ": " +
                                     std::strerror(errno));
  if (create && ftruncate(fd, sizeof(Row)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Status(Code::kSystem, "sizing shared memory " + name + ": " + std::strerror(e));
  }
  void* p = mmap(nullptr, sizeof(Row), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return Status(Code::kSystem, "mapping shared memory " + name + ": " + std::strerror(e));
  if (create) new (p) Row{};  // zeroed by ftruncate; placement-new starts the atomics' lifetimes
  return static_cast<Row*>(p);
}

Result<std::unique_ptr<Mailbox>> Mailbox::create(const std::string& prefix, int rank, int size) {
  std::unique_ptr<Mailbox> box(new Mailbox(prefix, rank, size));
  ZW_ASSIGN_OR_RETURN(box->rows_[rank], map_row(name(prefix, rank), true));
  box->linked_ = true;
  return box;
}

Mailbox::~Mailbox() {
  unlink_own();
  for (Row* row : rows_)
    if (row != nullptr) munmap(row, sizeof(Row));
}

Status Mailbox::attach_peers() {
  for (size_t p = 0; p < rows_.size(); ++p) {
    if (rows_[p] != nullptr) continue;
    auto row = map_row(name(prefix_, static_cast<int>(p)), false);
    if (!row.ok()) return row.status().with_context("attaching the GPU descriptor mailbox of rank " + std::to_string(p));
    rows_[p] = row.value();
  }
  return Status();
}

void Mailbox::unlink_own() {
  if (!linked_) return;
  shm_unlink(name(prefix_, rank_).c_str());
  linked_ = false;
}

void Mailbox::post(uint64_t seq, std::span<const std::byte> payload) {
  Slot& slot = rows_[rank_]->slots[seq % kSlots];
  slot.size = static_cast<uint32_t>(payload.size());
  if (!payload.empty()) std::memcpy(slot.data, payload.data(), payload.size());
  slot.seq.store(seq, std::memory_order_release);
}

void Mailbox::post_refusal(uint64_t seq, const std::string& why) {
  Slot& slot = rows_[rank_]->slots[seq % kSlots];
  // A longer reason keeps its tail, which says what was wrong.
  const std::string text = why.size() <= kSlotBytes ? why : "..." + why.substr(why.size() - (kSlotBytes - 3));
  slot.size = static_cast<uint32_t>(text.size()) | kRefused;
  std::memcpy(slot.data, text.data(), text.size());
  slot.seq.store(seq, std::memory_order_release);
}

Status Mailbox::wait(int peer, uint64_t seq, Deadline deadline, const std::function<Status()>& check,
                     std::vector<std::byte>* out) {
  const Slot& slot = rows_[peer]->slots[seq % kSlots];
  uint64_t spins = 0, next_check_ns = now_ns() + 1000000;
  for (uint64_t at; (at = slot.seq.load(std::memory_order_acquire)) != seq;) {
    // Only refusals let a rank post again without reading this rank's descriptors: it refused calls this rank ran.
    if (at > seq)
      return Status(Code::kAborted, "rank " + std::to_string(peer) + " is past GPU operation " + std::to_string(seq) +
                                        " (at " + std::to_string(at) + ") without this rank: it refused calls that " +
                                        "this rank ran (a usage error there, or its GPU path failed earlier)");
    // Peers are normally microseconds behind: spin first, then yield the core.
    if (++spins < 2000) {
      _mm_pause();
      continue;
    }
    sched_yield();
    if (now_ns() < next_check_ns) continue;
    next_check_ns = now_ns() + 1000000;
    ZW_TRY(check());
    if (deadline.expired())
      return Status(Code::kTimeout, "rank " + std::to_string(peer) + " did not reach GPU operation " +
                                        std::to_string(seq) + " in time (is it blocked in another operation, or did "
                                        "the ranks issue different numbers of GPU collectives?)");
  }
  // The peer's row is shared memory any process of this user may write: its size is checked, not trusted.
  const uint32_t size = slot.size;
  if (size & kRefused) {
    const char* text = reinterpret_cast<const char*>(slot.data);
    return Status(Code::kAborted, "rank " + std::to_string(peer) + " refused its call of GPU operation " +
                                      std::to_string(seq) + ": " +
                                      std::string(text, std::min<size_t>(size & ~kRefused, kSlotBytes)));
  }
  if (size > kSlotBytes)
    return Status(Code::kProtocolError, "rank " + std::to_string(peer) + "'s GPU descriptor of operation " +
                                            std::to_string(seq) + " claims " + std::to_string(size) +
                                            " bytes, more than a slot holds (" + std::to_string(kSlotBytes) +
                                            "): is every rank running the same zerowire build?");
  out->assign(slot.data, slot.data + size);
  // The peer cannot rewrite this slot before we post seq + 1, so the copy above is consistent.
  return Status();
}

}  // namespace zw::transport::cuda_ipc
