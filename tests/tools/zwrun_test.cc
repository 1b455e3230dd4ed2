// zwrun end to end: real processes (zwrun_test_helper) launched through the real zwrun binary.
//
// Covers line prefixing, the per-rank ZW_* environment, argument pass-through, the stop policy (first
// failing code, signal deaths, prompt SIGTERM of the other ranks), unexecutable programs, --timeout, partial
// lines, line atomicity under load and signal forwarding. Each test takes well under two seconds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <regex>
#include <thread>

#include "tools/run_command.h"

extern char** environ;

namespace zw::testing {
namespace {

const std::string kZwrun = ZWRUN_PATH;
const std::string kHelper = HELPER_PATH;

class ZwrunTest : public ::testing::Test {
 protected:
  // Runs zwrun with `args`; the inherited launch variables are cleared so the test sees only zwrun's.
  CommandResult zwrun(const std::string& args, const std::string& env = "") {
    return run_command("env -u ZW_AUTH_TOKEN -u ZW_TRANSPORT " + env + " " + kZwrun + " " + args, dir_.path());
  }
  TempDir dir_;
};

// rank -> {variable -> value} from the output of `helper env`.
std::map<int, std::map<std::string, std::string>> parse_env_lines(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  std::regex pattern(R"(\[(\d+)\] (ZW_[A-Z_]+)=(.*))");
  for (const std::string& line : split_lines(out)) {
    std::smatch m;
    if (std::regex_match(line, m, pattern)) by_rank[std::stoi(m[1])][m[2]] = m[3];
  }
  return by_rank;
}

TEST_F(ZwrunTest, PrefixesEachLineWithItsRankOnTheSameStream) {
  CommandResult r = zwrun("-n 3 " + kHelper + " env");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& line : split_lines(r.out))
    EXPECT_TRUE(std::regex_match(line, std::regex(R"(\[[0-2]\] ZW_.*)"))) << line;
  EXPECT_EQ(split_lines(r.out).size(), 3u * 7u);
  for (int rank = 0; rank < 3; ++rank) {
    std::string expected = "[" + std::to_string(rank) + "] stderr line from rank " + std::to_string(rank) + "\n";
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  }
  EXPECT_EQ(r.out.find("stderr line"), std::string::npos);
}

TEST_F(ZwrunTest, SetsLaunchVariablesForEachRank) {
  CommandResult r = zwrun("-n 4 --transport tcp " + kHelper + " env");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto env = parse_env_lines(r.out);
  ASSERT_EQ(env.size(), 4u) << r.out;
  for (int rank = 0; rank < 4; ++rank) {
    auto& vars = env[rank];
    EXPECT_EQ(vars["ZW_RANK"], std::to_string(rank));
    EXPECT_EQ(vars["ZW_LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(vars["ZW_WORLD_SIZE"], "4");
    EXPECT_EQ(vars["ZW_LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(vars["ZW_TRANSPORT"], "tcp");
    EXPECT_TRUE(std::regex_match(vars["ZW_STORE_ADDR"], std::regex(R"(127\.0\.0\.1:[1-9]\d*)")))
        << vars["ZW_STORE_ADDR"];
    EXPECT_TRUE(std::regex_match(vars["ZW_AUTH_TOKEN"], std::regex("[0-9a-f]{32}"))) << vars["ZW_AUTH_TOKEN"];
    EXPECT_EQ(vars["ZW_STORE_ADDR"], env[0]["ZW_STORE_ADDR"]);
    EXPECT_EQ(vars["ZW_AUTH_TOKEN"], env[0]["ZW_AUTH_TOKEN"]);
  }
  CommandResult again = zwrun("-n 1 " + kHelper + " env");
  EXPECT_NE(parse_env_lines(again.out)[0]["ZW_AUTH_TOKEN"], env[0]["ZW_AUTH_TOKEN"]) << "tokens must be random";
}

TEST_F(ZwrunTest, TakesTokenFromEnvironmentAndLeavesTransportUnsetWithoutFlag) {
  CommandResult r = zwrun("-n 2 " + kHelper + " env", "ZW_AUTH_TOKEN=my-token ZW_RANK=99");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto env = parse_env_lines(r.out);
  ASSERT_EQ(env.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(env[rank]["ZW_AUTH_TOKEN"], "my-token");
    EXPECT_EQ(env[rank]["ZW_RANK"], std::to_string(rank)) << "an inherited ZW_RANK must be replaced";
    EXPECT_EQ(env[rank]["ZW_TRANSPORT"], "<unset>");
  }
}

TEST_F(ZwrunTest, RanksReachTheStoreZwrunServes) {
  CommandResult r = zwrun("-n 3 " + kHelper + " store");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    std::string line = "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " met 3 ranks\n";
    EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  }
}

TEST_F(ZwrunTest, PassesProgramArgumentsThrough) {
  CommandResult r = zwrun("-n 1 -- " + kHelper + " args --flag -n 7 --");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] arg: --flag\n[0] arg: -n\n[0] arg: 7\n[0] arg: --\n");
  r = zwrun("-n 1 " + kHelper + " args --timeout 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] arg: --timeout\n[0] arg: 3\n");
}

TEST_F(ZwrunTest, FirstFailingRankSetsExitCodeAndTheOthersStopQuickly) {
  CommandResult r = zwrun("-n 4 " + kHelper + " exit 3 2");  // ranks 0, 1, 3 sleep 60 s
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(zwrun: rank 2 \(pid \d+\) exited with code 3; stopping the other 3 ranks\n)")))
      << r.err;
  size_t last_words = r.err.find("[2] rank 2 fails now\n");
  ASSERT_NE(last_words, std::string::npos) << r.err;
  EXPECT_LT(last_words, r.err.find("zwrun: rank 2")) << "the rank's own output comes before zwrun's verdict";
}

TEST_F(ZwrunTest, ReportsASignalDeath) {
  CommandResult r = zwrun("-n 3 " + kHelper + " signal 9 1");
  EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(R"(zwrun: rank 1 \(pid \d+\) was killed by signal 9 \(SIGKILL\); stopping the other 2 ranks\n)")))
      << r.err;
}

// A rank killed by SIGKILL, whose peers then exit with an error the moment they see it dead: zwrun names the killed
// rank and reports the signal (it used to blame a survivor with a lower rank, which had exited with code 3, and exit
// 3 itself). Survivors ranks 0-2 are lower than the victim, so reporting in rank order would blame rank 0.
TEST_F(ZwrunTest, AKilledRankIsBlamedNotTheSurvivorsItTookDown) {
  for (int trial = 0; trial < 5; ++trial) {
    char dir_template[] = "/tmp/zwrun-cascade-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template), nullptr);
    CommandResult r = zwrun("-n 4 " + kHelper + " cascade " + std::string(dir_template) + " 3");
    std::remove((std::string(dir_template) + "/victim").c_str());
    ::rmdir(dir_template);
    EXPECT_EQ(r.exit_code, 128 + 9) << "trial " << trial << "\n" << r.err;
    EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(zwrun: rank 3 \(pid \d+\) was killed by signal 9 \(SIGKILL\))")))
        << "trial " << trial << "\n" << r.err;
    EXPECT_FALSE(std::regex_search(r.err, std::regex(R"(zwrun: rank [0-2] \(pid \d+\) exited)")))
        << "trial " << trial << "\n" << r.err;
  }
}

// A rank killed during set-up, after creating its shm segment and before any peer mapped it, used to leave the
// segment in /dev/shm for good; zwrun removes what its dead ranks left once they have all exited.
TEST_F(ZwrunTest, SegmentsOfARankKilledDuringSetupAreRemoved) {
  const std::string job = "zwruntest" + std::to_string(::getpid());
  const std::string path = "/dev/shm/zw-" + job + "-r1";
  CommandResult r = zwrun("-n 2 " + kHelper + " shmdie " + job + " 1");
  EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
  const bool left = ::access(path.c_str(), F_OK) == 0;
  if (left) ::unlink(path.c_str());
  EXPECT_FALSE(left) << path << " was left behind\n" << r.err;
  EXPECT_NE(r.err.find("removed 1 shm segment(s) left by ranks that died"), std::string::npos) << r.err;
}

TEST_F(ZwrunTest, ProgramThatCannotBeExecutedIsAClearError) {
  CommandResult r = zwrun("-n 2 /nonexistent/zw-no-such-program");
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.err, "zwrun: cannot execute '/nonexistent/zw-no-such-program': No such file or directory\n");
  r = zwrun("-n 2 zw-no-such-program-in-path");
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot execute 'zw-no-such-program-in-path': No such file or directory"), std::string::npos);
  r = zwrun("-n 1 /dev/null");
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_NE(r.err.find("cannot execute '/dev/null': Permission denied"), std::string::npos) << r.err;
}

TEST_F(ZwrunTest, TimeoutStopsEveryRankWithExitCode124) {
  CommandResult r = zwrun("-n 2 --timeout 1 " + kHelper + " sleep 60");
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_GE(r.seconds, 0.9);
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_NE(r.err.find("zwrun: timeout: the job ran longer than --timeout 1 s; stopping all 2 ranks"),
            std::string::npos)
      << r.err;
}

// A limit too long to count in nanoseconds is no limit; it used to overflow into one already past (exit 124 at once).
TEST_F(ZwrunTest, ATimeoutOfCenturiesLetsTheJobFinish) {
  CommandResult r = zwrun("-n 2 --timeout 1e12 " + kHelper + " sleep 0.3");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("timeout"), std::string::npos) << r.err;
}

TEST_F(ZwrunTest, FlushesAPartialLastLineAtExit) {
  CommandResult r = zwrun("-n 2 " + kHelper + " partial no-newline");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[0] no-newline\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1] no-newline\n"), std::string::npos) << r.out;
}

TEST_F(ZwrunTest, LinesOfDifferentRanksNeverInterleave) {
  const int kLines = 5000;
  CommandResult r = zwrun("-n 4 " + kHelper + " lines " + std::to_string(kLines));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::regex pattern(R"(\[(\d)\] (\d):(\d+):(x+))");
  std::map<int, int> count;
  for (const std::string& line : split_lines(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, pattern)) << "mangled line: " << line.substr(0, 200);
    int rank = std::stoi(m[1]);
    ASSERT_EQ(m[2], m[1]) << line.substr(0, 200);
    ASSERT_EQ(m[4].length(), static_cast<size_t>(50 + rank * 37));
    ASSERT_EQ(std::stoi(m[3]), count[rank]++) << "lines of one rank must stay in order";
  }
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(count[rank], kLines);
}

TEST_F(ZwrunTest, ForwardsSigtermToEveryRank) {
  std::string out = (dir_.path() / "out").string(), err = (dir_.path() / "err").string();
  std::vector<std::string> args = {kZwrun, "-n", "2", kHelper, "trap", dir_.path().string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, kZwrun.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  for (int i = 0; i < 200; ++i) {  // both ranks armed their handler
    if (std::filesystem::exists(dir_.path() / "ready.0") && std::filesystem::exists(dir_.path() / "ready.1")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << "ranks exited 0, so zwrun reports its own interruption";
  std::string text = read_file(out);
  EXPECT_NE(text.find("[0] rank 0 got SIGTERM\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[1] rank 1 got SIGTERM\n"), std::string::npos) << text;
  EXPECT_NE(read_file(err).find("zwrun: received SIGTERM; forwarding it to 2 ranks"), std::string::npos);
}

TEST_F(ZwrunTest, RejectsBadUsage) {
  EXPECT_EQ(zwrun(kHelper + " env").exit_code, 2);
  EXPECT_EQ(zwrun("-n 0 " + kHelper + " env").exit_code, 2);
  EXPECT_EQ(zwrun("-n 2 --transport carrier-pigeon " + kHelper + " env").exit_code, 2);
  CommandResult r = zwrun("-n 2 --bogus " + kHelper + " env");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown option '--bogus'"), std::string::npos) << r.err;
  EXPECT_EQ(zwrun("-n 2").exit_code, 2);
  EXPECT_EQ(zwrun("--help").exit_code, 0);
}

}  // namespace
}  // namespace zw::testing
