// NCCL's environment variables under libzwnccl (src/nccl/env.cc): the translation table, a ZW_* variable winning over
// its NCCL_* one, values that cannot be translated, the variables not read; and, in a process of its own started with
// NCCL_* variables, that they take effect (NCCL_SOCKET_IFNAME moves the unique id's address, NCCL_DEBUG=INFO turns
// on zerowire's INFO lines, which say what was read).
#include "nccl/nccl_env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace zw::nccl {
namespace {

using Vars = std::vector<std::pair<std::string, std::string>>;

NcclEnv translate(const Vars& vars, std::map<std::string, std::string> zw_set = {}) {
  return translate_nccl_env(vars, [zw_set](const char* name) -> const char* {
    auto it = zw_set.find(name);
    return it == zw_set.end() ? nullptr : it->second.c_str();
  });
}

std::string notes_of(const NcclEnv& env) {
  std::string out;
  for (const NcclEnv::Note& n : env.notes) out += (n.warn ? "WARN " : "INFO ") + n.text + "\n";
  return out;
}

TEST(NcclEnv, VariablesWithAZerowireEquivalentBecomeItsKnob) {
  const NcclEnv env = translate({{"NCCL_DEBUG", "info"},
                                 {"NCCL_DEBUG_SUBSYS", "INIT,NET,GRAPH"},
                                 {"NCCL_SOCKET_IFNAME", "^docker,lo"},
                                 {"NCCL_IB_HCA", "=mlx5_0:1"},
                                 {"NCCL_IB_GID_INDEX", "3"},
                                 {"NCCL_MAX_NCHANNELS", "16"},
                                 {"NCCL_NTHREADS", "256"},
                                 {"NCCL_ALGO", "Ring"},
                                 {"NCCL_P2P_DISABLE", "1"}});
  const std::map<std::string, std::string> want = {{"ZW_DEBUG", "INFO"},
                                                   {"ZW_DEBUG_SUBSYS", "INIT,TCP,VERBS"},
                                                   {"ZW_SOCKET_IFNAME", "^docker,lo"},
                                                   {"ZW_IB_HCA", "=mlx5_0:1"},
                                                   {"ZW_IB_GID_INDEX", "3"},
                                                   {"ZW_CUDA_BLOCKS", "16"},
                                                   {"ZW_CUDA_THREADS", "256"},
                                                   {"ZW_CUDA_ALGO", "ring"},
                                                   {"ZW_ALGO", "ring"},
                                                   {"ZW_CUDA_PATH", "staged"}};
  EXPECT_EQ(env.values, want) << notes_of(env);
  const std::string notes = notes_of(env);
  EXPECT_NE(notes.find("INFO NCCL_DEBUG=info read as ZW_DEBUG=INFO"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("WARN"), std::string::npos) << notes;
}

TEST(NcclEnv, LevelsAndSubsystemsMapToZerowiresOwn) {
  EXPECT_EQ(translate({{"NCCL_DEBUG", "VERSION"}}).values.at("ZW_DEBUG"), "WARN");
  EXPECT_EQ(translate({{"NCCL_DEBUG", "TRACE"}}).values.at("ZW_DEBUG"), "TRACE");
  EXPECT_EQ(translate({{"NCCL_DEBUG_SUBSYS", "^SHM,P2P"}}).values.at("ZW_DEBUG_SUBSYS"), "^SHM,COLL");
  EXPECT_EQ(translate({{"NCCL_DEBUG_SUBSYS", "ALL"}}).values.at("ZW_DEBUG_SUBSYS"), "ALL");
  EXPECT_EQ(translate({{"NCCL_ALGO", "tree"}}).values, (std::map<std::string, std::string>{{"ZW_ALGO", "tree"}}));
  EXPECT_TRUE(translate({{"NCCL_P2P_DISABLE", "0"}}).values.empty());
}

TEST(NcclEnv, ASetZerowireVariableWinsAndADifferentNcclValueIsAWarning) {
  const NcclEnv same = translate({{"NCCL_DEBUG", "INFO"}}, {{"ZW_DEBUG", "INFO"}});
  EXPECT_TRUE(same.values.empty());
  EXPECT_TRUE(same.notes.empty()) << notes_of(same);
  const NcclEnv differ = translate({{"NCCL_IB_HCA", "mlx5_1"}}, {{"ZW_IB_HCA", "mlx5_0"}});
  EXPECT_TRUE(differ.values.empty());
  EXPECT_NE(notes_of(differ).find("WARN NCCL_IB_HCA=mlx5_1 not applied: ZW_IB_HCA=mlx5_0 is set"), std::string::npos)
      << notes_of(differ);
  const NcclEnv both = translate({{"NCCL_MAX_NCHANNELS", "8"}, {"NCCL_MAX_CTAS", "16"}});
  EXPECT_EQ(both.values.at("ZW_CUDA_BLOCKS"), "8");
  EXPECT_NE(notes_of(both).find("WARN NCCL_MAX_CTAS=16 not applied: ZW_CUDA_BLOCKS=8 came from another NCCL_"),
            std::string::npos)
      << notes_of(both);
}

TEST(NcclEnv, UntranslatableValuesAreWarningsAndOtherVariablesAreListedAsNotRead) {
  const NcclEnv env = translate({{"NCCL_DEBUG", "LOUD"},
                                 {"NCCL_ALGO", "NVLS,Ring"},
                                 {"NCCL_DEBUG_SUBSYS", "GRAPH,TUNING"},
                                 {"NCCL_P2P_DISABLE", "yes"},
                                 {"NCCL_NVLS_ENABLE", "0"},
                                 {"NCCL_CUMEM_ENABLE", "0"}});
  EXPECT_TRUE(env.values.empty());
  const std::string notes = notes_of(env);
  for (const char* want : {"WARN NCCL_DEBUG=LOUD not applied: not one of VERSION, WARN, INFO, ABORT, TRACE",
                           "WARN NCCL_ALGO=NVLS,Ring not applied", "WARN NCCL_DEBUG_SUBSYS=GRAPH,TUNING not applied",
                           "WARN NCCL_P2P_DISABLE=yes not applied: not 0 or 1",
                           "INFO not read (no zerowire equivalent): NCCL_CUMEM_ENABLE, NCCL_NVLS_ENABLE"})
    EXPECT_NE(notes.find(want), std::string::npos) << want << "\n" << notes;
}

// zw_nccl_rank (tests/nccl/nccl_rank_main.cc) with `args`, in this environment less NCCL's and zerowire's settings
// plus `env`; its stdout and stderr go to `out_path`.
pid_t spawn_rank(const std::vector<std::string>& args, const std::vector<std::string>& env,
                 const std::string& out_path) {
  std::vector<std::string> env_text = env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("NCCL_", 0) != 0 && entry.rfind("ZW_", 0) != 0) env_text.push_back(entry);
  }
  std::vector<char*> envp, argv;
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> arg_text = {RANK_PATH};
  arg_text.insert(arg_text.end(), args.begin(), args.end());
  for (std::string& a : arg_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(fd, 0) << out_path;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fd, STDERR_FILENO);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, RANK_PATH, &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(fd);
  return pid;
}

// Whether the process exited with status 0.
bool exited_ok(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A directory of its own for one test's files, removed with it.
struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/zw-nccl-env-XXXXXX";
    path = mkdtemp(name) != nullptr ? name : "";
  }
  ~TempDir() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
};

// A process started with NCCL_* variables (zw_nccl_rank --unique-id prints its new id's address).
TEST(NcclEnv, TheVariablesTakeEffectInAProcessThatLoadsLibzwnccl) {
  const TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string out_path = dir.path + "/out";
  const pid_t pid = spawn_rank(
      {"--unique-id"},
      {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP", "NCCL_SOCKET_IFNAME==lo", "NCCL_NVLS_ENABLE=0"},
      out_path);
  const bool ok = exited_ok(pid);
  const std::string out = slurp(out_path);
  ASSERT_TRUE(ok) << out;
  EXPECT_NE(out.find("unique id address: 127.0.0.1:"), std::string::npos) << out;
  EXPECT_NE(out.find("libzwnccl: NCCL_DEBUG=INFO read as ZW_DEBUG=INFO"), std::string::npos) << out;
  EXPECT_NE(out.find("libzwnccl: NCCL_SOCKET_IFNAME==lo read as ZW_SOCKET_IFNAME==lo"), std::string::npos) << out;
  EXPECT_NE(out.find("not read (no zerowire equivalent): NCCL_NVLS_ENABLE"), std::string::npos) << out;
}

// NCCL_DEBUG_FILE (as ZW_DEBUG_FILE): the log lines go to that file, %p replaced by the pid, not to stderr.
TEST(NcclEnv, NcclDebugFileTakesTheLogLines) {
  const TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string err_path = dir.path + "/stderr";
  const pid_t pid =
      spawn_rank({"--unique-id"}, {"NCCL_DEBUG=INFO", "NCCL_DEBUG_FILE=" + dir.path + "/nccl.%p.log"}, err_path);
  const bool ok = exited_ok(pid);
  const std::string log = slurp(dir.path + "/nccl." + std::to_string(pid) + ".log"), err = slurp(err_path);
  ASSERT_TRUE(ok) << err;
  EXPECT_NE(log.find("libzwnccl: NCCL_DEBUG=INFO read as ZW_DEBUG=INFO"), std::string::npos) << log;
  EXPECT_NE(log.find("created unique id for the store"), std::string::npos) << log;
  EXPECT_EQ(err.find("zerowire INFO"), std::string::npos) << err;
}

// NCCL_COMM_ID: three processes each call ncclGetUniqueId themselves, get the same id, and rank 0's ncclCommInitRank
// serves the store there; their host all-reduce is right.
TEST(NcclEnv, NcclCommIdLetsEveryRankComputeTheId) {
  uint16_t port = 0;
  {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);  // a free port, released at once
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
  }
  const TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const int n = 3;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r)
    pids.push_back(spawn_rank({"--comm-id", std::to_string(r), std::to_string(n), "allreduce"},
                              {"NCCL_COMM_ID=127.0.0.1:" + std::to_string(port)},
                              dir.path + "/rank" + std::to_string(r)));
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(exited_ok(pids[size_t(r)])) << "rank " << r << ": " << slurp(dir.path + "/rank" + std::to_string(r));
}

}  // namespace
}  // namespace zw::nccl
