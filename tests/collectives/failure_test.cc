// Multi-process failure behaviour: a rank killed in the middle of a collective makes every other rank's
// operation fail with an error naming it, well before ZW_TIMEOUT, never a hang.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "zerowire/store.h"

extern char** environ;

namespace zw {
namespace {

struct Child {
  pid_t pid = -1;
  std::string log;  // path of its stderr
};

Child spawn_rank(int rank, int world, const std::string& store, const std::string& transport,
                 const std::vector<std::string>& args) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("ZW_", 0) != 0) env.push_back(*e);
  env.push_back("ZW_RANK=" + std::to_string(rank));
  env.push_back("ZW_WORLD_SIZE=" + std::to_string(world));
  env.push_back("ZW_LOCAL_RANK=" + std::to_string(rank));
  env.push_back("ZW_LOCAL_WORLD_SIZE=" + std::to_string(world));
  env.push_back("ZW_STORE_ADDR=" + store);
  env.push_back("ZW_AUTH_TOKEN=failure-test-token");
  env.push_back("ZW_TRANSPORT=" + transport);
  env.push_back("ZW_TIMEOUT=60");
  std::vector<char*> envp, argv;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = RANK_PROBE_PATH;
  argv.push_back(exe.data());
  std::vector<std::string> a = args;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  Child c;
  c.log = ::testing::TempDir() + "rank_probe_" + std::to_string(getpid()) + "_" + std::to_string(rank) + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_EQ(posix_spawn(&c.pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return c;
}

std::string slurp(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

class FailureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FailureTest, HealthyRanksPass) {
  auto server = start_tcp_store_server({"127.0.0.1:0", "failure-test-token"});
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  std::vector<Child> kids;
  for (int r = 0; r < 3; ++r) kids.push_back(spawn_rank(r, 3, server.value()->address(), GetParam(), {"5"}));
  for (auto& k : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(k.pid, &status, 0), k.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(k.log);
  }
}

TEST_P(FailureTest, KilledRankIsNamedByEveryOtherRank) {
  auto server = start_tcp_store_server({"127.0.0.1:0", "failure-test-token"});
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const int world = 4, victim = 2;
  auto start = std::chrono::steady_clock::now();
  std::vector<Child> kids;
  for (int r = 0; r < world; ++r)
    kids.push_back(spawn_rank(r, world, server.value()->address(), GetParam(), {"1000000", std::to_string(victim), "3"}));
  for (int r = 0; r < world; ++r) {
    int status = 0;
    ASSERT_EQ(waitpid(kids[r].pid, &status, 0), kids[r].pid);
    std::string log = slurp(kids[r].log);
    if (r == victim) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "rank " << r << ": " << log;
    EXPECT_NE(log.find("rank 2 (host"), std::string::npos) << "rank " << r << ": " << log;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 30.0) << "failure detection must not wait for ZW_TIMEOUT (60 s)";
}

INSTANTIATE_TEST_SUITE_P(Transports, FailureTest, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace zw
