// The GPU descriptor mailbox (transport/cuda_ipc/cuda_ipc_mailbox.h) between two ranks of one process: descriptors
// round-trip; a refused call fails the peer waiting for it at once, naming the rank and its reason (before, the peer
// waited for the descriptor until ZW_TIMEOUT); a rank that refused its way kSlots operations ahead fails the wait
// instead of leaving it to wait for an overwritten slot; a slot that claims more bytes than it holds is a protocol
// error (it used to be copied past the slot).
#include "transport/cuda_ipc/cuda_ipc_mailbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace zw::transport::cuda_ipc {
namespace {

class MailboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string prefix = "zwtest" + std::to_string(getpid());
    auto a = Mailbox::create(prefix, 0, 2), b = Mailbox::create(prefix, 1, 2);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string() << b.status().to_string();
    reader_ = std::move(a).value();
    peer_ = std::move(b).value();
    ASSERT_TRUE(reader_->attach_peers().ok());
    ASSERT_TRUE(peer_->attach_peers().ok());
    const int fd = shm_open(Mailbox::name(prefix, 1).c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    struct stat st {};
    ASSERT_EQ(fstat(fd, &st), 0);
    row_bytes_ = static_cast<size_t>(st.st_size);
    raw_ = static_cast<std::byte*>(mmap(nullptr, row_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
    reader_->unlink_own();
    peer_->unlink_own();
  }
  void TearDown() override {
    if (raw_ != nullptr) munmap(raw_, row_bytes_);
  }
  // Waits for rank 1's operation `seq` for at most 2 s.
  Status wait(uint64_t seq, std::vector<std::byte>* out, double* seconds = nullptr) {
    const auto start = Clock::now();
    Status s = reader_->wait(
        1, seq, Deadline::after_seconds(2), [] { return Status(); }, out);
    if (seconds) *seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return s;
  }

  std::unique_ptr<Mailbox> reader_, peer_;
  std::byte* raw_ = nullptr;  // rank 1's row: kSlots slots of {seq: 8 bytes, size: 4 bytes, payload}
  size_t row_bytes_ = 0;
};

TEST_F(MailboxTest, DescriptorsRoundTrip) {
  const std::string text = "descriptor of operation 1";
  peer_->post(1, std::as_bytes(std::span(text)));
  std::vector<std::byte> out;
  ASSERT_TRUE(wait(1, &out).ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), out.size()), text);
}

TEST_F(MailboxTest, ARefusalFailsThePeerAtOnceNamingTheRankAndWhy) {
  peer_->post_refusal(1, "all_reduce on rank 1: input buffer is null but 64 bytes are needed");
  std::vector<std::byte> out;
  double secs = 0;
  Status s = wait(1, &out, &secs);
  EXPECT_EQ(s.code(), Code::kAborted) << s.to_string();
  EXPECT_NE(s.message().find("rank 1 refused its call of GPU operation 1"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("input buffer is null"), std::string::npos) << s.to_string();
  EXPECT_LT(secs, 1.0);
}

TEST_F(MailboxTest, APeerThatRefusedItsWayAheadFailsTheWait) {
  for (uint64_t seq = 1; seq <= Mailbox::kSlots + 1; ++seq) peer_->post_refusal(seq, "refused");
  std::vector<std::byte> out;
  double secs = 0;
  Status s = wait(1, &out, &secs);  // its slot now holds operation kSlots + 1
  EXPECT_EQ(s.code(), Code::kAborted) << s.to_string();
  EXPECT_NE(s.message().find("rank 1 is past GPU operation 1"), std::string::npos) << s.to_string();
  EXPECT_LT(secs, 1.0);
}

TEST_F(MailboxTest, ASlotClaimingMoreThanItHoldsIsAProtocolError) {
  peer_->post(2, {});
  const uint32_t claimed = 100000;
  std::memcpy(raw_ + 2 * (row_bytes_ / Mailbox::kSlots) + 8, &claimed, 4);  // operation 2's slot: its size field
  std::vector<std::byte> out;
  Status s = wait(2, &out);
  EXPECT_EQ(s.code(), Code::kProtocolError) << s.to_string();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.to_string();
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace zw::transport::cuda_ipc
