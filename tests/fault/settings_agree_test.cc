// Settings that change the wire protocol or the algorithm, set differently on one rank (issue 20): creation fails on
// every rank within 2 s, naming the knob, the ranks and both values. They used to end only at the first collective's
// timeout. Threads (CommConfig per rank) for the knobs a config carries; processes for the environment-only ones.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "tests/collectives/rank_spawn.h"
#include "tests/fault/fault_harness.h"

namespace zw::fault {
namespace {

struct ConfigCase {
  const char* name;
  const char* transport;
  void (*odd)(CommConfig&);  // applied to rank 2's config
  std::vector<const char*> needles;
};

class SettingsAgree : public ::testing::TestWithParam<ConfigCase> {};

TEST_P(SettingsAgree, CreationFailsOnEveryRankNamingKnobRanksAndValues) {
  const ConfigCase& c = GetParam();
  CommConfig base;
  base.transport = c.transport;
  base.timeout_s = 30;
  const auto start = std::chrono::steady_clock::now();
  auto out = run_ranks_each(
      3,
      [&](int r) {
        CommConfig cfg = base;
        if (r == 2) c.odd(cfg);
        return cfg;
      },
      [](int, Communicator&) { return Status(); });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 2.0);
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(out[r].created) << "rank " << r << " created a communicator whose ranks disagree";
    EXPECT_EQ(out[r].status.code(), Code::kInvalidArgument) << out[r].status.to_string();
    for (const char* needle : c.needles)
      EXPECT_NE(out[r].status.message().find(needle), std::string::npos)
          << "rank " << r << " (missing '" << needle << "'): " << out[r].status.to_string();
    EXPECT_NE(out[r].status.message().find("rank 2"), std::string::npos) << out[r].status.to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Knobs, SettingsAgree,
    ::testing::Values(
        ConfigCase{"chunk_tcp",
                   "tcp",
                   [](CommConfig& c) { c.chunk_bytes = 64 << 10; },
                   {"ZW_CHUNK_BYTES", "1048576", "65536"}},
        ConfigCase{"chunk_shm", "shm", [](CommConfig& c) { c.chunk_bytes = 64 << 10; }, {"ZW_CHUNK_BYTES"}},
        ConfigCase{"algo", "tcp", [](CommConfig& c) { c.algo = "tree"; }, {"ZW_ALGO", "auto", "tree"}},
        ConfigCase{
            "tree_threshold", "tcp", [](CommConfig& c) { c.tree_threshold = 4096; }, {"ZW_TREE_THRESHOLD", "4096"}},
        ConfigCase{
            "eager_bytes", "tcp", [](CommConfig& c) { c.eager_bytes = 8 << 10; }, {"ZW_EAGER_BYTES", "8192", "65536"}},
        ConfigCase{"eager_off", "shm", [](CommConfig& c) { c.eager_bytes = 0; }, {"ZW_EAGER_BYTES"}},
        ConfigCase{"transport", "shm", [](CommConfig& c) { c.transport = "tcp"; }, {"ZW_TRANSPORT", "shm", "tcp"}},
        ConfigCase{"cuda_path", "shm", [](CommConfig& c) { c.cuda_path = "staged"; }, {"ZW_CUDA_PATH", "staged"}},
        ConfigCase{"staging_chunk",
                   "tcp",
                   [](CommConfig& c) { c.cuda_staging_chunk = 1 << 20; },
                   {"ZW_CUDA_STAGING_CHUNK", "1048576"}}),
    [](const auto& info) { return std::string(info.param.name); });

// Knobs that differ without changing anything in this communicator are no reason to fail.
TEST(SettingsAgreeHarmless, UnusedThresholdAndLocalKnobsMayDiffer) {
  auto out = run_ranks_each(
      3,
      [](int r) {
        CommConfig c;
        c.transport = "tcp";
        c.algo = "ring";  // the tree threshold is then unused
        c.tree_threshold = r == 2 ? 4096 : 1 << 20;
        c.slots = r == 2 ? 2 : 4;  // the receiver's own staging
        c.timeout_s = r == 2 ? 20 : 30;
        return c;
      },
      [](int, Communicator& comm) {
        std::vector<float> a(1000, 1.0f);
        return finish(
            all_reduce(comm, {MemRef::host(a.data(), 4000), MemRef::host(a.data(), 4000), 1000, DataType::kFloat32}));
      });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(out[r].created && out[r].status.ok()) << out[r].status.to_string();
}

// Environment-only knobs, in processes: ZW_SHM_DIRECT_AG_MAX_RANKS (3 ranks: 4 gathers directly, 2 does not) and
// ZW_EAGER_SLOTS (the inbox layout every sender writes into).
struct EnvCase {
  const char* name;
  const char* transport;
  const char* odd_env;
  std::vector<const char*> needles;
};

class SettingsAgreeEnv : public ::testing::TestWithParam<EnvCase> {};

TEST_P(SettingsAgreeEnv, CreationFailsOnEveryRank) {
  const EnvCase& c = GetParam();
  auto server = start_tcp_store_server({"127.0.0.1:0", "agree-token"});
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  std::vector<test::Child> kids;
  for (int r = 0; r < 3; ++r)
    kids.push_back(test::spawn_rank_probe(RANK_PROBE_PATH, r, 3, server.value()->address(), "agree-token", c.transport,
                                          {"3"}, std::string("agree_") + c.name, 30,
                                          r == 2 ? std::vector<std::string>{c.odd_env} : std::vector<std::string>{}));
  for (int r = 0; r < 3; ++r) {
    int status = 0;
    ASSERT_EQ(waitpid(kids[r].pid, &status, 0), kids[r].pid);
    const std::string log = test::slurp(kids[r].log);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5) << "rank " << r << ": " << log;
    for (const char* needle : c.needles) EXPECT_NE(log.find(needle), std::string::npos) << "rank " << r << ": " << log;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Knobs, SettingsAgreeEnv,
    ::testing::Values(EnvCase{"direct_ag",
                              "shm",
                              "ZW_SHM_DIRECT_AG_MAX_RANKS=2",
                              {"ZW_SHM_DIRECT_AG_MAX_RANKS", "rank 2", " 2 on rank 2", "4 on rank"}},
                      EnvCase{"eager_slots", "tcp", "ZW_EAGER_SLOTS=4", {"ZW_EAGER_SLOTS", "rank 2", "8"}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace zw::fault
