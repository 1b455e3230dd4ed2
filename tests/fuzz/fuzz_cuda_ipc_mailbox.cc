// tests/fuzz/fuzz_cuda_ipc_mailbox.cc — the GPU descriptor mailbox of the node-local CUDA IPC path
// (src/transport/cuda_ipc/cuda_ipc_mailbox.h: Mailbox::wait reads a peer's slot in POSIX shared memory, which that
// peer, or any process of the same user, may fill with anything). Needs no GPU: the mailbox is host memory.
//
// Two mailboxes of one job (rank 0 reads, rank 1 is the peer) live for the whole run. The first byte picks the
// operation number (bits 1-6), the mode (bit 0) and a variant (bit 7): even — the rest is rank 1's whole row of slots
// as raw bytes, and the slot's number is then set to the operation's (variant: kSlots later, a peer that went past);
// odd — rank 1 posts the rest (at most a slot's bytes) with the real Mailbox::post (variant: post_refusal).
// Checked: a wait that succeeds returns at most kSlotBytes, exactly the bytes and length the slot declares (and,
// after post, the payload posted); a refusal fails with kAborted naming rank 1 and carrying the reason as posted
// (its tail when longer than a slot); a peer past the operation fails with kAborted naming rank 1; a slot declaring
// more than kSlotBytes is a protocol error naming rank 1, never a read past it.
// Non-goals: the descriptors' meaning (gpu_comm.cc compares them), the wait's timing.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "fuzz_check.h"
#include "transport/cuda_ipc/cuda_ipc_mailbox.h"

using namespace zw;
using zw::transport::cuda_ipc::Mailbox;

namespace {

// The layout of a Mailbox slot: the operation number, the payload's size, the payload (kSlots slots per row).
constexpr size_t kSizeAt = 8, kDataAt = 12;

struct Job {
  std::unique_ptr<Mailbox> reader, peer;
  std::byte* row = nullptr;  // rank 1's row, mapped once more for raw writes
  size_t row_bytes = 0;
};

Job& job() {
  static Job* j = [] {
    auto* j = new Job;
    const std::string prefix = "zwfuzz" + std::to_string(getpid());
    j->reader = std::move(Mailbox::create(prefix, 0, 2)).value();
    j->peer = std::move(Mailbox::create(prefix, 1, 2)).value();
    FUZZ_CHECK(j->reader->attach_peers().ok() && j->peer->attach_peers().ok(), "attach");
    const int fd = shm_open(Mailbox::name(prefix, 1).c_str(), O_RDWR, 0);
    struct stat st {};
    FUZZ_CHECK(fd >= 0 && fstat(fd, &st) == 0, "open the peer row");
    j->row_bytes = static_cast<size_t>(st.st_size);
    j->row = static_cast<std::byte*>(mmap(nullptr, j->row_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
    j->reader->unlink_own();
    j->peer->unlink_own();
    // The layout above, checked once against the real post().
    const std::byte abc[3] = {std::byte{'a'}, std::byte{'b'}, std::byte{'c'}};
    j->peer->post(1, abc);
    const size_t stride = j->row_bytes / Mailbox::kSlots;
    uint32_t n = 0;
    std::memcpy(&n, j->row + stride + kSizeAt, 4);
    FUZZ_CHECK(n == 3 && std::memcmp(j->row + stride + kDataAt, abc, 3) == 0, "slot layout changed");
    return j;
  }();
  return *j;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Job& j = job();
  const bool raw = data[0] % 2 == 0, variant = data[0] & 0x80;
  const uint64_t seq = 1 + (data[0] >> 1) % 64;
  const size_t stride = j.row_bytes / Mailbox::kSlots, at = stride * (seq % Mailbox::kSlots);
  const std::byte* rest = reinterpret_cast<const std::byte*>(data + 1);
  const size_t n = size - 1;
  std::vector<std::byte> posted;
  if (raw) {
    std::memset(j.row, 0, j.row_bytes);
    std::memcpy(j.row, rest, std::min(n, j.row_bytes));
    const uint64_t in_slot = seq + (variant ? Mailbox::kSlots : 0);
    std::memcpy(j.row + at, &in_slot, 8);
  } else if (variant) {
    j.peer->post_refusal(seq, std::string(reinterpret_cast<const char*>(rest), n));
  } else {
    posted.assign(rest, rest + std::min(n, Mailbox::kSlotBytes));
    j.peer->post(seq, posted);
  }
  uint32_t declared = 0;
  std::memcpy(&declared, j.row + at + kSizeAt, 4);
  const bool refused = declared & Mailbox::kRefused;
  std::vector<std::byte> out;
  Status s = j.reader->wait(
      1, seq, Deadline::after(std::chrono::seconds(1)), [] { return Status(); }, &out);
  if (raw && variant) {
    FUZZ_CHECK(s.code() == Code::kAborted && s.message().find("rank 1 is past") != std::string::npos, s.to_string());
    return 0;
  }
  if (refused) {
    const size_t len = std::min<size_t>(declared & ~Mailbox::kRefused, Mailbox::kSlotBytes);
    const std::string why(reinterpret_cast<const char*>(j.row + at + kDataAt), len);
    FUZZ_CHECK(s.code() == Code::kAborted && s.message().find("rank 1 refused") != std::string::npos, s.to_string());
    FUZZ_CHECK(s.message().size() >= len && s.message().compare(s.message().size() - len, len, why) == 0,
               "the reason did not come through");
    const std::string given(reinterpret_cast<const char*>(rest), n);
    FUZZ_CHECK(raw || why == given ||
                   (n > Mailbox::kSlotBytes && why.size() == Mailbox::kSlotBytes && why.substr(0, 3) == "..." &&
                    given.ends_with(why.substr(3))),
               "post_refusal wrote another reason");
    return 0;
  }
  FUZZ_CHECK(raw || !variant, "a refusal was not marked");
  if (!s.ok()) {
    FUZZ_CHECK(declared > Mailbox::kSlotBytes, "refused a valid slot: " + s.to_string());
    FUZZ_CHECK(s.code() == Code::kProtocolError && s.message().find("rank 1") != std::string::npos, s.to_string());
    return 0;
  }
  FUZZ_CHECK(out.size() <= Mailbox::kSlotBytes, "returned " + std::to_string(out.size()) + " bytes");
  FUZZ_CHECK(out.size() == declared && (declared == 0 || std::memcmp(out.data(), j.row + at + kDataAt, declared) == 0),
             "wrong payload");
  FUZZ_CHECK(raw || out == posted, "the posted payload did not come back");
  return 0;
}
