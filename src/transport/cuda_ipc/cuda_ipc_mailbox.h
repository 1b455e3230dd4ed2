// transport/cuda_ipc/cuda_ipc_mailbox.h — per-operation descriptors exchanged between the host threads of the
// ranks of one node, through POSIX shared memory.
//
// Before a GPU collective is enqueued, every rank posts a small descriptor (the operation's fingerprint and its
// buffers' IPC descriptions) and reads every peer's descriptor for the same sequence number. Each rank owns one
// row of kSlots slots that only it writes; slot `seq % kSlots` carries operation `seq`, published by a release
// store of `seq`. Reuse is safe because a rank posts `seq + 1` only after it has read every peer's `seq`, and a
// rank cannot post `seq + kSlots` before every peer posted `seq + kSlots - 1`.
//
// A rank that refuses its call of an operation (a usage error, or its GPU path failed earlier) posts a refusal with the
// reason under the number the call would have taken, without waiting for its peers (post_refusal); a peer waiting for
// that descriptor fails at once naming it. Since refusals do not wait, a refusing rank may get kSlots or more numbers
// ahead of a peer: the peer then finds a later number in the slot and fails naming it too, instead of waiting for a
// descriptor that was overwritten.
// The rows are shared memory that any process of this user may write: wait() checks what it reads (fuzzed by
// tests/fuzz/fuzz_cuda_ipc_mailbox).
// Threading: post() and wait() from one thread per rank. Non-goals: more than one host, bulk data.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "zerowire/status.h"

namespace zw::transport::cuda_ipc {

class Mailbox {
 public:
  static constexpr size_t kSlotBytes = 448;
  static constexpr size_t kSlots = 4;
  static constexpr uint32_t kRefused = 1u << 31;  // flag in a slot's size: the rank refused the operation

  // Creates this rank's row as the shared-memory object `name(prefix, rank)`.
  static Result<std::unique_ptr<Mailbox>> create(const std::string& prefix, int rank, int size);
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  static std::string name(const std::string& prefix, int rank);

  // Maps the rows of every peer (after they created them). The names are unlinked by unlink_own() once every
  // rank attached, so nothing is left behind in /dev/shm if a process dies later.
  Status attach_peers();
  void unlink_own();

  // Publishes this rank's descriptor of operation `seq` (payload ≤ kSlotBytes).
  void post(uint64_t seq, std::span<const std::byte> payload);

  // Publishes that this rank refused its call of operation `seq`, with the reason (its last kSlotBytes).
  void post_refusal(uint64_t seq, const std::string& why);

  // Waits until `peer` posted `seq` and copies its payload into `out` (resized); kAborted naming the peer when it
  // refused `seq` or is past it, kProtocolError when its slot is malformed. `check` runs every millisecond
  // while waiting and may fail the wait (a dead peer, an abort); the deadline gives kTimeout.
  Status wait(int peer, uint64_t seq, Deadline deadline, const std::function<Status()>& check,
              std::vector<std::byte>* out);

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> seq;        // operation whose descriptor the slot holds (0: none yet)
    uint32_t size;                    // payload bytes, | kRefused: the payload is a refusal's reason
    std::byte data[kSlotBytes];       // payload
  };
  struct Row {
    Slot slots[kSlots];
  };
  Mailbox(std::string prefix, int rank, int size) : prefix_(std::move(prefix)), rank_(rank), rows_(size) {}
  static Result<Row*> map_row(const std::string& name, bool create);

  std::string prefix_;
  int rank_;
  std::vector<Row*> rows_;  // [rank]; rows_[rank_] is ours
  bool linked_ = false;     // our object still has a name
};

}  // namespace zw::transport::cuda_ipc
