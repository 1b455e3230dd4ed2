// Liveness of verbs peers: a peer process that is SIGKILLed while connected is reported, by name, as died —
// through the endpoint's sticky error and peer_known_dead() — without waiting for QP retries or ZW_TIMEOUT;
// a peer that shuts its transport down in order is reported as left, not as died.
// The peer is a forked child (forked before this process opens any RDMA device) driving rank 1.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "tests/transport/verbs/verbs_test_util.h"

namespace zw::transport::verbs_test {
namespace {

bool write_line(int fd, const std::string& s) {
  std::string line = s + "\n";
  return ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

std::string read_line(int fd) {
  std::string out;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') out += c;
  return out;
}

// Rank 1 in a child: listen, swap addresses over the pipes, connect, then either wait to be killed or close
// its transport in order (`graceful`) and exit.
[[noreturn]] void child_rank(int to_parent, int from_parent, bool graceful) {
  TransportOptions o;
  o.rank = 1;
  o.world_size = 2;
  auto t = create_verbs_transport(o);
  if (!t.ok()) _exit(10);
  auto address = (*t)->listen();
  if (!address.ok() || !write_line(to_parent, *address)) _exit(11);
  std::string parent = read_line(from_parent);
  auto e = (*t)->connect(0, parent);
  if (!e.ok() || !(*e)->wait_connected(Deadline::after_seconds(60)).ok()) _exit(12);
  if (!(*e)->send(bytes_of("ready")).ok()) _exit(13);
  (void)read_line(from_parent);  // "go" (or EOF): the parent saw "ready"
  if (graceful) {
    e->reset();
    t->reset();
    _exit(0);
  }
  for (;;) ::pause();  // killed by the parent
}

struct Pair {
  pid_t child = -1;
  std::unique_ptr<Transport> t;
  std::unique_ptr<Endpoint> e;
  int to_child = -1;
};

// Forks the child and connects rank 0 to it; the child has sent "ready" when this returns.
void start_pair(bool graceful, Pair* pair) {
  int up[2], down[2];
  ASSERT_EQ(::pipe(up), 0);
  ASSERT_EQ(::pipe(down), 0);
  pair->child = ::fork();
  ASSERT_GE(pair->child, 0);
  if (pair->child == 0) {
    ::close(up[0]);
    ::close(down[1]);
    child_rank(up[1], down[0], graceful);
  }
  ::close(up[1]);
  ::close(down[0]);
  pair->to_child = down[1];
  TransportOptions o;
  o.rank = 0;
  o.world_size = 2;
  auto t = create_verbs_transport(o);
  ZW_ASSERT_OK(t);
  pair->t = std::move(t).value();
  auto address = pair->t->listen();
  ZW_ASSERT_OK(address);
  std::string child_address = read_line(up[0]);
  ::close(up[0]);
  ASSERT_FALSE(child_address.empty()) << "the child could not start its transport";
  ASSERT_TRUE(write_line(pair->to_child, *address));
  auto e = pair->t->connect(1, child_address);
  ZW_ASSERT_OK(e);
  pair->e = std::move(e).value();
  ZW_ASSERT_OK(pair->e->wait_connected(Deadline::after_seconds(60)));
  auto m = next_message(*pair->t, *pair->e, Deadline::after_seconds(60));
  ZW_ASSERT_OK(m);
  ASSERT_EQ(m->kind, MessageKind::kControl);
}

// Polls until the endpoint fails; the status, or a timeout after `seconds`.
Status wait_for_failure(Pair& pair, double seconds) {
  Deadline deadline = Deadline::after_seconds(seconds);
  Message m;
  while (!deadline.expired()) {
    Result<bool> got = pair.e->poll(&m);
    if (!got.ok()) return got.status();
    pair.t->wait_for_activity(std::chrono::milliseconds(50));
  }
  return Status(Code::kTimeout, "no failure reported");
}

TEST(VerbsLivenessTest, KilledPeerIsReportedAsDiedByName) {
  ZW_SKIP_WITHOUT_RDMA();
  Pair pair;
  start_pair(false, &pair);
  if (HasFatalFailure()) return;
  // A healthy, idle peer is neither dead nor failed, also a moment after the liveness connection was set up.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::string why;
  EXPECT_FALSE(pair.t->peer_known_dead(1, &why)) << why;
  ZW_ASSERT_OK(pair.e->error());
  ZW_ASSERT_OK(pair.e->send(bytes_of("still there")));
  ASSERT_EQ(::kill(pair.child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pair.child, &status, 0), pair.child);
  // A message posted towards the dead rank is retried forever by the QP (Soft-RoCE retry_cnt 7): only the
  // liveness connection can report it. 60 s is far beyond the round trip it takes, and below any QP timeout.
  (void)pair.e->send(bytes_of("are you there?"));
  Status failure = wait_for_failure(pair, 60);
  ASSERT_FALSE(failure.ok());
  EXPECT_NE(failure.code(), Code::kTimeout) << failure.to_string();
  EXPECT_NE(failure.message().find("rank 1 died"), std::string::npos) << failure.to_string();
  EXPECT_TRUE(pair.t->peer_known_dead(1, &why));
  EXPECT_NE(why.find("without a goodbye"), std::string::npos) << why;
  EXPECT_FALSE(pair.e->send(bytes_of("x")).ok());  // sticky
  ::close(pair.to_child);
}

TEST(VerbsLivenessTest, PeerThatClosesInOrderLeftAndIsNotDead) {
  ZW_SKIP_WITHOUT_RDMA();
  Pair pair;
  start_pair(true, &pair);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(write_line(pair.to_child, "go"));
  int status = 0;
  ASSERT_EQ(::waitpid(pair.child, &status, 0), pair.child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  Status failure = wait_for_failure(pair, 60);
  ASSERT_FALSE(failure.ok());
  EXPECT_NE(failure.message().find("rank 1 left"), std::string::npos) << failure.to_string();
  std::string why;
  EXPECT_FALSE(pair.t->peer_known_dead(1, &why)) << why;
  ::close(pair.to_child);
}

}  // namespace
}  // namespace zw::transport::verbs_test
