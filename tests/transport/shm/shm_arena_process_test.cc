// Real-process test of writes into zw::mem_alloc arenas: a fork()ed child is rank 1 with its own transport
// (addresses and keys traded over a socketpair). Each side writes into the other's arena-backed region through
// its endpoint; the bytes and the notify must arrive, and the endpoint must report that the copy went through
// a mapping of the peer's arena (ShmEndpoint::mapped_writes), not process_vm_writev. The child reports
// failures through its exit code and a line on stderr.
// Non-goals: ranks as threads (shm_arena_test.cc), the plain-memory path (shm_process_test.cc).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "shm_process_util.h"
#include "shm_test_util.h"
#include "transport/shm/shm_endpoint.h"
#include "transport/shm/shm_memory_region.h"
#include "zerowire/memory.h"

namespace zw::transport::shm_test {
namespace {

constexpr size_t kToChild = (8u << 20) + 333;  // parent -> child write
constexpr size_t kToParent = (1u << 20) + 5;   // child -> parent write
constexpr size_t kOffset = 4100;               // where in the peer's region the write lands

ShmEndpoint& shm_of(Side& side) { return dynamic_cast<ShmEndpoint&>(*side.endpoint); }

// An arena-backed region of `bytes` (plus kOffset) and its key.
struct ArenaBuffer {
  std::byte* base = nullptr;
  std::unique_ptr<MemoryRegion> mr;
  Status init(Transport& t, size_t bytes) {
    ZW_ASSIGN_OR_RETURN(void* p, mem_alloc(bytes + kOffset + 128));
    base = static_cast<std::byte*>(p);
    std::memset(base, 0x11, bytes + kOffset + 128);
    ZW_ASSIGN_OR_RETURN(mr, t.register_memory(MemRef::host(base + 64, bytes + kOffset)));
    return Status();
  }
  ~ArenaBuffer() {
    mr.reset();
    if (base) (void)mem_free(base);
  }
};

[[noreturn]] void child_main(const std::string& job, int fd) {
  auto side = connect_side(1, job, fd, fd);
  if (!side.ok()) child_fail(10, side.status().to_string());
  ArenaBuffer inbox, outbox;
  if (!inbox.init(*side->transport, kToChild).ok() || !outbox.init(*side->transport, kToParent).ok())
    child_fail(11, "mem_alloc or register_memory failed");
  fill_pattern(outbox.base + 64, kToParent, 31);
  auto inbox_key = inbox.mr->remote_key();
  if (inbox_key.size() != ShmRemoteKey::kArenaBytes) child_fail(12, "the inbox key carries no arena");
  if (!side->endpoint->send(inbox_key).ok()) child_fail(13, "sending the key failed");
  Message m;
  auto got = poll_wait(*side->transport, *side->endpoint, &m);
  if (!got.ok() || !got.value() || m.kind != MessageKind::kControl) child_fail(14, "no key from the parent");
  std::vector<std::byte> parent_key(m.payload().begin(), m.payload().end());
  got = poll_wait(*side->transport, *side->endpoint, &m);
  if (!got.ok() || !got.value() || m.kind != MessageKind::kNotify || m.notify != 42) child_fail(15, "no notify 42");
  size_t bad = first_mismatch(inbox.base + 64 + kOffset, kToChild, 55);
  if (bad != kToChild) child_fail(16, "the parent's write differs at byte " + std::to_string(bad));
  if (inbox.base[64 + kOffset - 1] != std::byte{0x11} || inbox.base[64 + kOffset + kToChild] != std::byte{0x11})
    child_fail(17, "the parent's write spilled outside its range");
  Status s = shm_of(*side).write(*outbox.mr, 0, parent_key, kOffset, kToParent, 7);
  if (!s.ok()) child_fail(18, s.to_string());
  if (shm_of(*side).mapped_writes() != 1) child_fail(19, "the child's write did not go through the mapped arena");
  got = poll_wait(*side->transport, *side->endpoint, &m);  // the parent verified; our memory may go
  if (!got.ok() || !got.value() || text_of(m.payload()) != "done") child_fail(20, "no 'done' from the parent");
  ::_exit(0);
}

TEST(ShmArenaProcess, WritesIntoAnotherProcesssArenaGoThroughTheMapping) {
  std::string job = random_job_id();
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    child_main(job, fds[1]);
  }
  ::close(fds[1]);
  auto side = connect_side(0, job, fds[0], fds[0]);
  ASSERT_TRUE(side.ok()) << side.status().to_string();
  ArenaBuffer inbox, outbox;
  ASSERT_TRUE(inbox.init(*side->transport, kToParent).ok());
  ASSERT_TRUE(outbox.init(*side->transport, kToChild).ok());
  fill_pattern(outbox.base + 64, kToChild, 55);

  Message m;
  auto got = poll_wait(*side->transport, *side->endpoint, &m);
  ASSERT_TRUE(got.ok() && got.value()) << status_of(got).to_string();
  auto key = ShmRemoteKey::parse(m.payload());
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  EXPECT_EQ(key->pid, child);
  EXPECT_TRUE(key->has_arena());
  std::vector<std::byte> child_key(m.payload().begin(), m.payload().end());
  ASSERT_TRUE(side->endpoint->send(inbox.mr->remote_key()).ok());
  Status s = shm_of(*side).write(*outbox.mr, 0, child_key, kOffset, kToChild, 42);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(shm_of(*side).mapped_writes(), 1u) << "the write went through process_vm_writev, not the mapping";
  EXPECT_EQ(shm_of(*side).mapped_arenas(), 1u);

  got = poll_wait(*side->transport, *side->endpoint, &m);
  ASSERT_TRUE(got.ok() && got.value()) << status_of(got).to_string();
  EXPECT_EQ(m.kind, MessageKind::kNotify);
  EXPECT_EQ(m.notify, 7u);
  EXPECT_EQ(first_mismatch(inbox.base + 64 + kOffset, kToParent, 31), kToParent);
  ASSERT_TRUE(side->endpoint->send(bytes_of("done")).ok());

  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed; see its line on stderr";
  ::close(fds[0]);
}

}  // namespace
}  // namespace zw::transport::shm_test
