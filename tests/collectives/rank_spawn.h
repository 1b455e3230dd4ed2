// tests/collectives/rank_spawn.h — starts zw_rank_probe processes for the multi-process failure tests (shm/tcp in
// failure_test.cc, verbs in tests/transport/verbs/verbs_failure_test.cc) and reads their logs.
// Each child gets the parent's environment minus ZW_* (ZW_IB_* is kept: the verbs device choice), plus its rank
// variables, the store, a token, the transport, ZW_TIMEOUT (60 s unless given) and any `extra_env` ("ZW_X=v"); its
// stderr goes to a temporary log file.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

extern char** environ;

namespace zw::test {

struct Child {
  pid_t pid = -1;
  std::string log;  // path of its stderr
};

// Starts `probe` as rank `rank` of `world` with `args`, presenting `token` to the store; `tag` names its log file.
inline Child spawn_rank_probe(const std::string& probe, int rank, int world, const std::string& store,
                              const std::string& token, const std::string& transport,
                              const std::vector<std::string>& args, const std::string& tag,
                              double timeout_s = 60, const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("ZW_", 0) != 0 || std::string(*e).rfind("ZW_IB_", 0) == 0) env.push_back(*e);
  for (std::string kv :
       {"ZW_RANK=" + std::to_string(rank), "ZW_WORLD_SIZE=" + std::to_string(world),
        "ZW_LOCAL_RANK=" + std::to_string(rank), "ZW_LOCAL_WORLD_SIZE=" + std::to_string(world),
        "ZW_STORE_ADDR=" + store, "ZW_AUTH_TOKEN=" + token, "ZW_TRANSPORT=" + transport,
        "ZW_TIMEOUT=" + std::to_string(timeout_s)})
    env.push_back(kv);
  for (const std::string& kv : extra_env) env.push_back(kv);
  std::vector<char*> envp, argv;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = probe;
  argv.push_back(exe.data());
  std::vector<std::string> a = args;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  Child c;
  c.log = ::testing::TempDir() + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(rank) + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_EQ(posix_spawn(&c.pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return c;
}

inline std::string slurp(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

}  // namespace zw::test
