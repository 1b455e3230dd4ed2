// Rank discovery: one table row per launcher and per error, each through a map-backed EnvLookup.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "bootstrap/test_helpers.h"

namespace zw {
namespace {

using Env = std::map<std::string, std::string>;
using testing::env_of;

Result<RankInfo> discover(const Env& env) { return discover_rank(env_of(env)); }

RankInfo must_discover(const Env& env) {
  auto info = discover(env);
  EXPECT_TRUE(info.ok()) << info.status().to_string();
  return info.ok() ? *info : RankInfo{};
}

const Env kZw = {{"ZW_RANK", "2"},
                 {"ZW_WORLD_SIZE", "4"},
                 {"ZW_LOCAL_RANK", "0"},
                 {"ZW_LOCAL_WORLD_SIZE", "2"},
                 {"ZW_STORE_ADDR", "n0:29500"},
                 {"ZW_AUTH_TOKEN", "s3cret"}};
const Env kTorch = {{"RANK", "5"},
                    {"WORLD_SIZE", "8"},
                    {"LOCAL_RANK", "1"},
                    {"LOCAL_WORLD_SIZE", "4"},
                    {"MASTER_ADDR", "head"},
                    {"MASTER_PORT", "29500"},
                    {"TORCHELASTIC_RUN_ID", "run7"}};
const Env kSlurm = {{"SLURM_PROCID", "3"},
                    {"SLURM_NTASKS", "8"},
                    {"SLURM_LOCALID", "3"},
                    {"SLURM_JOB_ID", "4242"},
                    {"ZW_STORE_ADDR", "node1:29600"}};
const Env kOmpi = {{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"OMPI_MCA_orte_ess_jobid", "99"},
                   {"MASTER_ADDR", "10.0.0.1"},
                   {"MASTER_PORT", "29500"}};

Env with(Env env, const Env& changes) {
  for (const auto& [k, v] : changes) env[k] = v;
  return env;
}
Env without(Env env, std::initializer_list<const char*> names) {
  for (const char* n : names) env.erase(n);
  return env;
}

TEST(Discovery, Zerowire) {
  RankInfo info = must_discover(kZw);
  EXPECT_EQ(info.source, "zerowire");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.store_address, "n0:29500");
  EXPECT_EQ(info.auth_token, "s3cret");
}

TEST(Discovery, ZerowireWinsOverOtherLaunchersAndMinusOneMeansDiscover) {
  EXPECT_EQ(must_discover(with(kTorch, kZw)).source, "zerowire");
  RankInfo info = must_discover(with(kTorch, {{"ZW_RANK", "-1"}}));
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.rank, 5);
}

TEST(Discovery, MissingLocalVariablesDefaultToOneHost) {
  RankInfo info = must_discover(without(kZw, {"ZW_LOCAL_RANK", "ZW_LOCAL_WORLD_SIZE"}));
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_world_size, 4);
  info = must_discover(with(without(kZw, {"ZW_LOCAL_RANK"}), {{"ZW_RANK", "3"}}));
  EXPECT_EQ(info.local_rank, 1);  // rank % local world size
  EXPECT_EQ(info.local_world_size, 2);
}

TEST(Discovery, TorchrunStoreUsesMasterPortPlusOne) {
  RankInfo info = must_discover(kTorch);
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.store_address, "head:29501");
  // Without the elastic agent nobody owns MASTER_PORT, so the store takes it.
  EXPECT_EQ(must_discover(without(kTorch, {"TORCHELASTIC_RUN_ID"})).store_address, "head:29500");
  // An explicit ZW_STORE_ADDR wins.
  EXPECT_EQ(must_discover(with(kTorch, {{"ZW_STORE_ADDR", "other:1234"}})).store_address, "other:1234");
  EXPECT_EQ(must_discover(with(kTorch, {{"MASTER_ADDR", "::1"}})).store_address, "[::1]:29501");
}

TEST(Discovery, Slurm) {
  RankInfo info = must_discover(kSlurm);
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 3);
  EXPECT_EQ(info.local_world_size, 8);  // no per-node counts: one host assumed
  EXPECT_EQ(info.store_address, "node1:29600");
  Env counts = with(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NODEID", "0"}});
  EXPECT_EQ(must_discover(counts).local_world_size, 4);
  counts = with(kSlurm, {{"SLURM_TASKS_PER_NODE", "2,6"}, {"SLURM_NODEID", "1"}, {"SLURM_PROCID", "5"}});
  EXPECT_EQ(must_discover(counts).local_world_size, 6);
  // MASTER_ADDR/MASTER_PORT serve as the store address as they are (no +1 outside torchrun).
  info = must_discover(with(without(kSlurm, {"ZW_STORE_ADDR"}), {{"MASTER_ADDR", "n9"}, {"MASTER_PORT", "777"}}));
  EXPECT_EQ(info.store_address, "n9:777");
}

TEST(Discovery, OpenMpi) {
  RankInfo info = must_discover(kOmpi);
  EXPECT_EQ(info.source, "openmpi");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.store_address, "10.0.0.1:29500");
}

TEST(Discovery, NoLauncherIsAClearError) {
  auto info = discover({{"PATH", "/bin"}, {"ZW_RANK", "-1"}});
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), Code::kNotFound);
  EXPECT_NE(info.status().message().find("zwrun"), std::string::npos);
}

struct ErrorCase {
  const char* name;
  Env env;
  const char* message;  // expected substring
};

class DiscoveryError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(DiscoveryError, NamesTheVariableAndItsValue) {
  auto info = discover(GetParam().env);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), Code::kInvalidArgument);
  EXPECT_NE(info.status().message().find(GetParam().message), std::string::npos) << info.status().message();
}

const ErrorCase kErrorCases[] = {
    {"NonIntegerRank", with(kTorch, {{"RANK", "x"}}), "RANK='x' is not an integer"},
    {"FractionalWorld", with(kTorch, {{"WORLD_SIZE", "1.5"}}), "WORLD_SIZE='1.5' is not an integer"},
    {"SpacedRank", with(kZw, {{"ZW_RANK", " 1"}}), "ZW_RANK=' 1' is not an integer"},
    {"HugeRank", with(kTorch, {{"RANK", "99999999999"}}), "RANK='99999999999' is out of range"},
    {"NegativeRank", with(kTorch, {{"RANK", "-2"}}), "RANK=-2 is negative"},
    {"RankNotBelowWorld", with(kZw, {{"ZW_RANK", "4"}}), "ZW_RANK=4 is not below ZW_WORLD_SIZE=4"},
    {"ZeroWorld", with(kZw, {{"ZW_RANK", "0"}, {"ZW_WORLD_SIZE", "0"}}), "ZW_WORLD_SIZE=0 must be at least 1"},
    {"MissingWorld", without(kTorch, {"WORLD_SIZE"}), "WORLD_SIZE is not set"},
    {"MissingSlurmTasks", without(kSlurm, {"SLURM_NTASKS"}), "SLURM_NTASKS is not set"},
    {"MissingOmpiSize", without(kOmpi, {"OMPI_COMM_WORLD_SIZE"}), "OMPI_COMM_WORLD_SIZE is not set"},
    {"LocalRankNotBelowLocalWorld", with(kTorch, {{"LOCAL_RANK", "4"}}),
     "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"},
    {"LocalWorldAboveWorld", with(kTorch, {{"LOCAL_WORLD_SIZE", "9"}}), "LOCAL_WORLD_SIZE=9 exceeds WORLD_SIZE=8"},
    {"NonIntegerLocalRank", with(kOmpi, {{"OMPI_COMM_WORLD_LOCAL_RANK", "one"}}),
     "OMPI_COMM_WORLD_LOCAL_RANK='one' is not an integer"},
    {"BadSlurmTaskList", with(kSlurm, {{"SLURM_TASKS_PER_NODE", "4(x"}, {"SLURM_NODEID", "0"}}),
     "SLURM_TASKS_PER_NODE='4(x' is not a list"},
    {"SlurmNodeBeyondList", with(kSlurm, {{"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NODEID", "2"}}),
     "SLURM_NODEID=2 is beyond"},
    {"ZerowireWithoutStoreAddr", without(kZw, {"ZW_STORE_ADDR"}), "ZW_STORE_ADDR is not set: run under zwrun"},
    {"MalformedStoreAddr", with(kZw, {{"ZW_STORE_ADDR", "nohostport"}}), "ZW_STORE_ADDR='nohostport' is not host:port"},
    {"SlurmWithoutStoreAddr", without(kSlurm, {"ZW_STORE_ADDR"}), "set ZW_STORE_ADDR=host:port (or MASTER_ADDR and"},
    {"OmpiWithoutMasterPort", without(kOmpi, {"MASTER_PORT"}), "no store address under openmpi: set ZW_STORE_ADDR"},
    {"TorchrunWithoutMasterAddr", without(kTorch, {"MASTER_ADDR"}), "MASTER_ADDR is not set"},
    {"NonIntegerMasterPort", with(kTorch, {{"MASTER_PORT", "abc"}}), "MASTER_PORT='abc' is not an integer"},
    {"MasterPortTooLarge", with(kSlurm, {{"ZW_STORE_ADDR", ""}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
     "MASTER_PORT=70000 is not a port"},
    {"TorchrunMasterPortLeavesNoRoom", with(kTorch, {{"MASTER_PORT", "65535"}}), "MASTER_PORT=65535 leaves no port"},
    {"ZerowireWithoutToken", without(kZw, {"ZW_AUTH_TOKEN"}),
     "ZW_AUTH_TOKEN is not set: run under zwrun, or set ZW_AUTH_TOKEN"},
    {"ZerowireWithEmptyToken", with(kZw, {{"ZW_AUTH_TOKEN", ""}}), "run under zwrun, or set ZW_AUTH_TOKEN"},
};

INSTANTIATE_TEST_SUITE_P(Table, DiscoveryError, ::testing::ValuesIn(kErrorCases),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

TEST(DiscoveryToken, ExplicitTokenWinsEverywhere) {
  for (const Env* env : {&kTorch, &kSlurm, &kOmpi})
    EXPECT_EQ(must_discover(with(*env, {{"ZW_AUTH_TOKEN", "mine"}})).auth_token, "mine");
}

TEST(DiscoveryToken, DerivedTokenIsSharedByTheJobAndDiffersBetweenJobs) {
  for (const Env* env : {&kTorch, &kSlurm, &kOmpi}) {
    RankInfo a = must_discover(*env);
    EXPECT_FALSE(a.auth_token.empty());
    EXPECT_NE(a.auth_token.find(a.store_address), std::string::npos) << a.auth_token;
    // Another rank of the same job derives the same token.
    Env other = *env;
    for (const char* rank_var : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"})
      if (other.count(rank_var)) other[rank_var] = "0";
    for (const char* local_var : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"})
      if (other.count(local_var)) other[local_var] = "0";
    EXPECT_EQ(must_discover(other).auth_token, a.auth_token);
  }
  EXPECT_NE(must_discover(kTorch).auth_token,
            must_discover(with(kTorch, {{"TORCHELASTIC_RUN_ID", "run8"}})).auth_token);
  EXPECT_NE(must_discover(kSlurm).auth_token, must_discover(with(kSlurm, {{"SLURM_JOB_ID", "4243"}})).auth_token);
  EXPECT_NE(must_discover(kOmpi).auth_token,
            must_discover(with(kOmpi, {{"OMPI_MCA_orte_ess_jobid", "98"}})).auth_token);
  EXPECT_NE(must_discover(kSlurm).auth_token,
            must_discover(with(kSlurm, {{"ZW_STORE_ADDR", "node1:29601"}})).auth_token);
}

TEST(DiscoveryToken, EmptyVariablesCountAsUnset) {
  RankInfo info = must_discover(with(kTorch, {{"ZW_RANK", ""}, {"ZW_STORE_ADDR", ""}, {"ZW_AUTH_TOKEN", ""}}));
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.store_address, "head:29501");
  EXPECT_NE(info.auth_token, "");
}

TEST(Discovery, FromEnvironmentReadsTheProcessEnvironment) {
  const Env vars = with(kZw, {{"ZW_RANK", "1"}, {"ZW_AUTH_TOKEN", "from-env"}});
  std::map<std::string, std::optional<std::string>> saved;
  for (const auto& [k, v] : vars) {
    const char* old = std::getenv(k.c_str());
    saved[k] = old ? std::optional<std::string>(old) : std::nullopt;
    setenv(k.c_str(), v.c_str(), 1);
  }
  auto info = discover_rank_from_environment();
  for (const auto& [k, v] : saved) v ? setenv(k.c_str(), v->c_str(), 1) : unsetenv(k.c_str());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->auth_token, "from-env");
}

}  // namespace
}  // namespace zw
