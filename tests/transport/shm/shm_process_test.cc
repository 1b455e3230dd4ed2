// Real-process tests of the shm transport: a fork()ed child is rank 1 (its own transport, addresses traded
// through pipes), so writes go through process_vm_writev; then the child is SIGKILLed and the parent must
// notice instead of hanging. A child reports failures through its exit code and a line on stderr.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "shm_process_util.h"
#include "shm_test_util.h"
#include "transport/shm/shm_memory_region.h"
#include "transport/shm/shm_queue.h"

namespace zw::transport::shm_test {
namespace {

constexpr size_t kChildBytes = 8u << 20;   // parent -> child write
constexpr size_t kParentBytes = 1u << 20;  // child -> parent write

// Two pipes between parent and child; each side writes length-prefixed strings.
struct Pipes {
  int to_child[2] = {-1, -1};
  int to_parent[2] = {-1, -1};
  bool open() { return ::pipe(to_child) == 0 && ::pipe(to_parent) == 0; }
  ~Pipes() {
    for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]})
      if (fd >= 0) ::close(fd);
  }
};

Result<Message> next_message(Side& side) {
  Message m;
  auto got = poll_wait(*side.transport, *side.endpoint, &m);
  if (!got.ok()) return got.status();
  if (!got.value()) return Status(Code::kTimeout, "no message within 10 s");
  return m;
}

// Rank 1 of CrossProcessWritesAndControlMessages.
[[noreturn]] void exchange_child(const std::string& job, Pipes& p) {
  auto side = connect_side(1, job, p.to_child[0], p.to_parent[1]);
  if (!side.ok()) child_fail(10, side.status().to_string());
  std::vector<std::byte> inbox(kChildBytes, std::byte{0x11}), outbox(kParentBytes);
  fill_pattern(outbox.data(), outbox.size(), 77);
  auto in_mr = side->transport->register_memory(MemRef::host(inbox.data(), inbox.size()));
  auto out_mr = side->transport->register_memory(MemRef::host(outbox.data(), outbox.size()));
  if (!in_mr.ok() || !out_mr.ok()) child_fail(11, "register_memory failed");
  if (!side->endpoint->send(in_mr.value()->remote_key()).ok()) child_fail(12, "sending the key failed");
  auto parent_key = next_message(*side);
  if (!parent_key.ok() || parent_key->kind != MessageKind::kControl) child_fail(13, "no key from the parent");
  auto notify = next_message(*side);
  if (!notify.ok() || notify->kind != MessageKind::kNotify || notify->notify != 42) child_fail(14, "no notify 42");
  size_t bad = first_mismatch(inbox.data(), inbox.size(), 55);
  if (bad != inbox.size()) child_fail(15, "parent's write differs at byte " + std::to_string(bad));
  std::vector<std::byte> key(parent_key->payload().begin(), parent_key->payload().end());
  Status s = side->endpoint->write(*out_mr.value(), 0, key, 0, kParentBytes, 7);
  if (!s.ok()) child_fail(16, s.to_string());
  if (!side->endpoint->send(bytes_of("bye")).ok()) child_fail(17, "sending bye failed");
  auto done = next_message(*side);  // the parent has verified; our memory may go
  if (!done.ok() || text_of(done->payload()) != "done") child_fail(18, "no 'done' from the parent");
  ::_exit(0);
}

TEST(ShmProcess, CrossProcessWritesAndControlMessages) {
  std::string job = random_job_id();
  Pipes p;
  ASSERT_TRUE(p.open());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) exchange_child(job, p);
  auto side = connect_side(0, job, p.to_parent[0], p.to_child[1]);
  ASSERT_TRUE(side.ok()) << side.status().to_string();
  std::vector<std::byte> outbox(kChildBytes), inbox(kParentBytes, std::byte{0x22});
  fill_pattern(outbox.data(), outbox.size(), 55);
  auto out_mr = side->transport->register_memory(MemRef::host(outbox.data(), outbox.size()));
  auto in_mr = side->transport->register_memory(MemRef::host(inbox.data(), inbox.size()));
  ASSERT_TRUE(out_mr.ok() && in_mr.ok());

  auto child_key = next_message(*side);
  ASSERT_TRUE(child_key.ok()) << child_key.status().to_string();
  auto key = ShmRemoteKey::parse(child_key->payload());
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->pid, child);
  EXPECT_EQ(key->length, kChildBytes);
  ASSERT_TRUE(side->endpoint->send(in_mr.value()->remote_key()).ok());
  Status s = side->endpoint->write(*out_mr.value(), 0, child_key->payload(), 0, kChildBytes, 42);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(side->endpoint->writes_completed(), 1u);

  auto notify = next_message(*side);
  ASSERT_TRUE(notify.ok()) << notify.status().to_string();
  EXPECT_EQ(notify->kind, MessageKind::kNotify);
  EXPECT_EQ(notify->notify, 7u);
  EXPECT_EQ(first_mismatch(inbox.data(), inbox.size(), 77), inbox.size());
  auto bye = next_message(*side);
  ASSERT_TRUE(bye.ok());
  EXPECT_EQ(text_of(bye->payload()), "bye");
  std::string why;
  EXPECT_FALSE(side->transport->peer_known_dead(1, &why)) << why;
  ASSERT_TRUE(side->endpoint->send(bytes_of("done")).ok());

  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed; see its line on stderr";
  EXPECT_TRUE(side->transport->peer_known_dead(1, &why));
  EXPECT_NE(why.find("pid " + std::to_string(child)), std::string::npos) << why;
}

TEST(ShmProcess, KilledPeerIsDetectedAndABlockedSendFailsNamingIt) {
  std::string job = random_job_id();
  Pipes p;
  ASSERT_TRUE(p.open());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // connects, then never polls
    auto side = connect_side(1, job, p.to_child[0], p.to_parent[1]);
    if (!side.ok()) child_fail(20, side.status().to_string());
    put(p.to_parent[1], "ready");
    for (;;) ::pause();
  }
  auto side = connect_side(0, job, p.to_parent[0], p.to_child[1]);
  ASSERT_TRUE(side.ok()) << side.status().to_string();
  std::string ready, why;
  ASSERT_TRUE(get(p.to_parent[0], &ready));
  EXPECT_FALSE(side->transport->peer_known_dead(1, &why)) << why;
  for (uint32_t i = 0; i < kRingSlots; ++i) ASSERT_TRUE(side->endpoint->send(bytes_of("fill")).ok()) << i;

  std::thread killer([child] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(child, SIGKILL);
  });
  uint64_t start = now_ns();
  Status s = side->endpoint->send(bytes_of("blocked"));  // the ring is full and nobody drains it
  double waited_s = (now_ns() - start) / 1e9;
  killer.join();
  EXPECT_EQ(s.code(), Code::kConnectionLost) << s.to_string();
  EXPECT_NE(s.message().find("rank 1 exited"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("pid " + std::to_string(child)), std::string::npos) << s.message();
  EXPECT_GE(waited_s, 0.15);
  EXPECT_LT(waited_s, 1.5) << "the death was noticed late (or only by the timeout)";

  // Not reaped yet: a zombie counts as exited.
  EXPECT_TRUE(side->transport->peer_known_dead(1, &why));
  EXPECT_NE(why.find("pid " + std::to_string(child)), std::string::npos) << why;
  Message m;
  EXPECT_EQ(status_of(side->endpoint->poll(&m)).code(), Code::kConnectionLost) << "the error must be sticky";
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  why.clear();
  EXPECT_TRUE(side->transport->peer_known_dead(1, &why));
  EXPECT_NE(why.find("exited"), std::string::npos) << why;
}

TEST(ShmProcess, WriteIntoAnExitedProcessFailsNamingThePeer) {
  std::string job = random_job_id();
  Pipes p;
  ASSERT_TRUE(p.open());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto side = connect_side(1, job, p.to_child[0], p.to_parent[1]);
    if (!side.ok()) child_fail(30, side.status().to_string());
    std::vector<std::byte> buf(8192);
    auto mr = side->transport->register_memory(MemRef::host(buf.data(), buf.size()));
    if (!mr.ok() || !side->endpoint->send(mr.value()->remote_key()).ok()) child_fail(31, "sending the key failed");
    ::_exit(0);  // exits without waiting: the key now names a dead process
  }
  auto side = connect_side(0, job, p.to_parent[0], p.to_child[1]);
  ASSERT_TRUE(side.ok()) << side.status().to_string();
  auto key = next_message(*side);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::vector<std::byte> src(8192);  // above the inline limit: the copy itself must notice the dead process
  auto mr = side->transport->register_memory(MemRef::host(src.data(), src.size()));
  ASSERT_TRUE(mr.ok());
  Status s = side->endpoint->write(*mr.value(), 0, key->payload(), 0, src.size(), 1);
  EXPECT_EQ(s.code(), Code::kConnectionLost) << s.to_string();
  EXPECT_NE(s.message().find("rank 1 (pid " + std::to_string(child)), std::string::npos) << s.message();
  EXPECT_EQ(side->endpoint->writes_completed(), 0u);
  EXPECT_EQ(side->endpoint->error().code(), Code::kConnectionLost);
}

}  // namespace
}  // namespace zw::transport::shm_test
