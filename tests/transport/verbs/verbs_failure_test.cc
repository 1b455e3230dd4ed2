// Multi-process failure behaviour over --transport verbs (the shm/tcp version is tests/collectives/failure_test.cc,
// whose rank process zw_rank_probe this reuses): a rank SIGKILLed in the middle of all-reduces makes every other
// rank's operation fail with an error naming it, long before ZW_TIMEOUT (60 s here), never a hang. Healthy
// ranks pass. Skips without an RDMA device (run it in tools/softroce-vm/run.sh, as the softroce_vm_* ctest does).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/collectives/rank_spawn.h"
#include "transport/verbs/verbs_device.h"
#include "zerowire/store.h"

namespace zw {
namespace {

using test::Child;
using test::slurp;

Child spawn_rank(int rank, int world, const std::string& store, const std::vector<std::string>& args) {
  return test::spawn_rank_probe(RANK_PROBE_PATH, rank, world, store, "verbs-failure-token", "verbs", args,
                                "verbs_rank_probe");
}

// Whether `log` names rank `r` ("rank 2 (host ...", or "... cannot reach rank 2" at the end of an abort reason
// that a forwarding rank cut to the 240-byte control message), not rank 20.
bool names_rank(const std::string& log, int r) {
  const std::string needle = "rank " + std::to_string(r);
  for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) {
    const size_t next = at + needle.size();
    if (next == log.size() || !std::isdigit(static_cast<unsigned char>(log[next]))) return true;
  }
  return false;
}

#define SKIP_WITHOUT_RDMA()                                         \
  do {                                                              \
    std::string why_ = transport::verbs::rdma_unavailable_reason(); \
    if (!why_.empty()) GTEST_SKIP() << "no RDMA device: " << why_;  \
  } while (0)

TEST(VerbsFailureTest, HealthyRanksPass) {
  SKIP_WITHOUT_RDMA();
  auto server = start_tcp_store_server({"127.0.0.1:0", "verbs-failure-token"});
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  std::vector<Child> kids;
  for (int r = 0; r < 3; ++r) kids.push_back(spawn_rank(r, 3, server.value()->address(), {"5"}));
  for (auto& k : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(k.pid, &status, 0), k.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(k.log);
  }
}

TEST(VerbsFailureTest, KilledRankIsNamedByEveryOtherRank) {
  SKIP_WITHOUT_RDMA();
  auto server = start_tcp_store_server({"127.0.0.1:0", "verbs-failure-token"});
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const int world = 4, victim = 2;
  auto start = std::chrono::steady_clock::now();
  std::vector<Child> kids;
  for (int r = 0; r < world; ++r)
    kids.push_back(spawn_rank(r, world, server.value()->address(), {"1000000", std::to_string(victim), "3"}));
  for (int r = 0; r < world; ++r) {
    int status = 0;
    ASSERT_EQ(waitpid(kids[r].pid, &status, 0), kids[r].pid);
    std::string log = slurp(kids[r].log);
    if (r == victim) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << log;
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "rank " << r << ": " << log;
    EXPECT_TRUE(names_rank(log, victim)) << "rank " << r << ": " << log;
    EXPECT_EQ(log.find("timed out after"), std::string::npos) << "rank " << r << " waited for ZW_TIMEOUT: " << log;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("killed-rank run took %.1f s (ZW_TIMEOUT is 60 s)\n", secs);
}

}  // namespace
}  // namespace zw
