// Dead and stopped ranks (issue 20): N rank processes run validated all-reduces; once every rank has finished one,
// the test kills one (SIGKILL) or stops it (SIGSTOP). Every survivor must fail naming that rank — died, lost, stopped
// or never arrived — and no other rank as the culprit; a kill within 10 s, a stop within ZW_TIMEOUT + 2 s (ZW_TIMEOUT
// 2 s over shm and tcp, 10 s over verbs).
// "apart" trials give each rank its own host name (ZW_HOSTNAME) so that no survivor can read the victim's /proc:
// the blame protocol alone must name it, as across hosts.
// The short matrix runs in ctest; the campaign (DISABLED_Campaign, run by tests/fault/campaign.sh) runs
// ZW_FAULT_TRIALS random trials per signal and transport and appends its figures to ZW_FAULT_REPORT.
// Verbs trials (all ranks in one host over its first RDMA device: rxe0 in tools/softroce-vm/run.sh, ctest
// softroce_vm_fault_kill_stop_test) skip without an RDMA device; a run whose every test skipped exits 77.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/collectives/rank_spawn.h"
#include "tests/fault/campaign_report.h"
#include "zerowire/config.h"
#include "zerowire/store.h"
#if ZW_HAVE_VERBS
#include "transport/verbs/verbs_device.h"
#endif

namespace zw::fault {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kStopTimeout = 2.0;  // ZW_TIMEOUT of the ranks in stop trials (s)
// Over verbs the ranks' set-up (queue pairs, memory registration on rxe under qemu TCG) takes several seconds at
// 6-8 ranks, and ZW_TIMEOUT bounds set-up too: with 2 s, 15 of the first 50 stop trials in the VM failed in set-up.
constexpr double kVerbsStopTimeout = 10.0;

struct Trial {
  std::string transport;
  int world;
  int victim;
  int sig;  // SIGKILL or SIGSTOP
  bool apart;
};

// Why verbs trials cannot run here ("" when an RDMA device is up).
std::string no_rdma() {
#if ZW_HAVE_VERBS
  return transport::verbs::rdma_unavailable_reason();
#else
  return "zerowire was built without libibverbs";
#endif
}

// A run whose every test skipped (verbs trials without an RDMA device) exits 77, which ctest and
// tools/softroce-vm/run.sh report as skipped, not passed.
class ExitSkipped : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest& u) override {
    if (u.skipped_test_count() > 0 && u.successful_test_count() == 0 && u.Passed()) {
      std::fflush(stdout);
      std::_Exit(77);
    }
  }
};
const bool kExitSkippedInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new ExitSkipped);
  return true;
}();

struct Outcome {
  bool ok = true;
  std::string why;       // what went wrong (the first failure)
  double detection = 0;  // longest time from the signal to a survivor's exit, s
};

std::string name(const Trial& t) {
  return t.transport + (t.sig == SIGKILL ? "_kill" : "_stop") + "_n" + std::to_string(t.world) + "_v" +
         std::to_string(t.victim) + (t.apart ? "_apart" : "");
}

bool names_victim(const std::string& log, const Trial& t) {
  const std::string v = std::to_string(t.victim);
  if (t.sig == SIGSTOP)
    return std::regex_search(
        log, std::regex("rank " + v + R"( \(host [^,]*, pid [0-9]+\) (is stopped|never arrived|does not answer))"));
  return std::regex_search(log, std::regex("rank " + v + "([^0-9]|$)"));
}

// Another rank named as the culprit: "rank X (host ..., pid ...) died / is stopped / never arrived", "lost rank X".
bool blames_other(const std::string& log, const Trial& t) {
  for (int x = 0; x < t.world; ++x) {
    if (x == t.victim) continue;
    const std::string r = std::to_string(x);
    if (std::regex_search(
            log, std::regex("rank " + r + R"( \(host [^)]*\) (died|is stopped|never arrived|does not answer))")) ||
        std::regex_search(log, std::regex("lost rank " + r + "[^0-9]")))
      return true;
  }
  return false;
}

bool wait_exit(pid_t pid, double limit_s, int* status) {
  const auto until = Clock::now() + std::chrono::duration<double>(limit_s);
  while (Clock::now() < until) {
    if (waitpid(pid, status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

Outcome run_trial(const Trial& t) {
  Outcome out;
  auto fail = [&](const std::string& why) {
    if (out.ok) out.why = name(t) + ": " + why;
    out.ok = false;
  };
  auto server = start_tcp_store_server({"127.0.0.1:0", "fault-token"});
  if (!server.ok()) {
    fail(server.status().to_string());
    return out;
  }
  const double stop_timeout = t.transport == "verbs" ? kVerbsStopTimeout : kStopTimeout;
  const double timeout_s = t.sig == SIGSTOP ? stop_timeout : 60;
  std::vector<test::Child> kids;
  for (int r = 0; r < t.world; ++r) {
    std::vector<std::string> env;
    if (t.apart) env.push_back("ZW_HOSTNAME=node" + std::to_string(r));
    kids.push_back(test::spawn_rank_probe(RANK_PROBE_PATH, r, t.world, server.value()->address(), "fault-token",
                                          t.transport, {"100000000"}, "fault_" + name(t), timeout_s, env));
  }
  // Every rank finished one all-reduce (its communicator is up) before the signal.
  const auto ready_by = Clock::now() + std::chrono::seconds(120);
  for (int r = 0; r < t.world && out.ok; ++r)
    while (test::slurp(kids[r].log).find("rank " + std::to_string(r) + " ready") == std::string::npos) {
      int st = 0;
      if (waitpid(kids[r].pid, &st, WNOHANG) == kids[r].pid) {
        kids[r].pid = -1;
        fail("rank " + std::to_string(r) + " exited before the signal: " + test::slurp(kids[r].log));
        break;
      }
      if (Clock::now() > ready_by) {
        fail("rank " + std::to_string(r) + " never became ready");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  const auto t0 = Clock::now();
  if (out.ok) ::kill(kids[t.victim].pid, t.sig);
  const double limit = out.ok ? (t.sig == SIGSTOP ? stop_timeout + 2.0 : 10.0) : 0;
  for (int r = 0; r < t.world; ++r) {
    if (r == t.victim || kids[r].pid < 0) continue;
    int st = 0;
    if (!wait_exit(kids[r].pid, limit + 20, &st)) {
      fail("rank " + std::to_string(r) + " did not fail within " + std::to_string(limit + 20) + " s");
      ::kill(kids[r].pid, SIGKILL);
      waitpid(kids[r].pid, &st, 0);
      continue;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    out.detection = std::max(out.detection, secs);
    const std::string log = test::slurp(kids[r].log);
    if (std::getenv("ZW_FAULT_VERBOSE"))
      std::printf("%s rank %d after %.2f s:\n%s", name(t).c_str(), r, secs, log.c_str());
    if (!out.ok) continue;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 3)
      fail("rank " + std::to_string(r) + " ended with status " + std::to_string(st) + ": " + log);
    else if (secs > limit)
      fail("rank " + std::to_string(r) + " took " + std::to_string(secs) + " s: " + log);
    else if (!names_victim(log, t))
      fail("rank " + std::to_string(r) + " does not name rank " + std::to_string(t.victim) + ": " + log);
    else if (blames_other(log, t))
      fail("rank " + std::to_string(r) + " blames another rank: " + log);
  }
  if (kids[t.victim].pid > 0) {
    ::kill(kids[t.victim].pid, SIGKILL);
    int st = 0;
    waitpid(kids[t.victim].pid, &st, 0);
  }
  for (auto& k : kids) std::remove(k.log.c_str());
  return out;
}

class KillStop : public ::testing::TestWithParam<Trial> {};

TEST_P(KillStop, EverySurvivorNamesTheVictim) {
  if (GetParam().transport == "verbs" && !no_rdma().empty()) GTEST_SKIP() << "no RDMA device: " << no_rdma();
  const Outcome o = run_trial(GetParam());
  EXPECT_TRUE(o.ok) << o.why;
}

std::vector<Trial> short_matrix() {
  std::vector<Trial> out;
  for (const char* tr : {"shm", "tcp"}) {
    for (int v = 0; v < 3; ++v) out.push_back({tr, 3, v, SIGKILL, false});  // each position of 3
    out.push_back({tr, 2, 1, SIGKILL, false});
    out.push_back({tr, 8, 5, SIGKILL, false});
    out.push_back({tr, 3, 1, SIGSTOP, false});
    out.push_back({tr, 5, 4, SIGSTOP, false});
  }
  out.push_back({"tcp", 4, 2, SIGSTOP, true});  // across "hosts": the blame protocol without /proc
  out.push_back({"tcp", 3, 0, SIGSTOP, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Short, KillStop, ::testing::ValuesIn(short_matrix()),
                         [](const auto& info) { return name(info.param); });

// Verbs: each position of 3 killed, 2 and 8 ranks, stops at 3 and 4 ranks (one across "hosts").
std::vector<Trial> verbs_matrix() {
  std::vector<Trial> out;
  for (int v = 0; v < 3; ++v) out.push_back({"verbs", 3, v, SIGKILL, false});
  out.push_back({"verbs", 2, 0, SIGKILL, false});
  out.push_back({"verbs", 8, 6, SIGKILL, false});
  out.push_back({"verbs", 3, 2, SIGSTOP, false});
  out.push_back({"verbs", 4, 1, SIGSTOP, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Verbs, KillStop, ::testing::ValuesIn(verbs_matrix()),
                         [](const auto& info) { return name(info.param); });

// Whether campaign `which` ("SIGKILL tcp") is selected by ZW_FAULT_ONLY: every word of `only` is a word of `which`
// ("SIGSTOP shm" one campaign, "verbs" both signals over verbs); unset: every campaign.
bool selected(const std::string& which, const char* only) {
  if (!only) return true;
  std::istringstream words(only);
  for (std::string w; words >> w;)
    if (!std::regex_search(which, std::regex("(^| )" + w + "( |$)"))) return false;
  return true;
}

// ZW_FAULT_TRIALS trials (default 50) per signal and transport: worlds 2-8 and victim positions in turn, apart hosts
// in every other tcp and verbs trial. Appends "date | signal transport | trials | failures | longest detection"
// lines to ZW_FAULT_REPORT (if set). ZW_FAULT_ONLY="SIGSTOP shm" runs one of the six, "verbs" both over verbs
// (skipped without an RDMA device: run it in tools/softroce-vm/run.sh, see tests/fault/campaign.sh).
TEST(KillStopCampaign, DISABLED_Campaign) {
  const char* env = std::getenv("ZW_FAULT_TRIALS");
  const int trials = env ? std::atoi(env) : 50;
  const char* only = std::getenv("ZW_FAULT_ONLY");  // e.g. "SIGKILL tcp": one signal and transport
  std::mt19937 rng(20261201);
  int ran = 0, skipped = 0;
  for (int sig : {SIGKILL, SIGSTOP}) {
    for (const std::string tr : {"shm", "tcp", "verbs"}) {
      const std::string which = std::string(sig == SIGKILL ? "SIGKILL " : "SIGSTOP ") + tr;
      if (!selected(which, only)) continue;
      if (tr == "verbs" && !no_rdma().empty()) {
        std::printf("campaign: %s skipped: no RDMA device: %s\n", which.c_str(), no_rdma().c_str());
        ++skipped;
        continue;
      }
      ++ran;
      int failures = 0;
      double longest = 0;
      for (int i = 0; i < trials; ++i) {
        const int world = 2 + i % 7;
        const Trial t{tr, world, static_cast<int>(rng() % world), sig, tr != "shm" && i % 2 == 1};
        const Outcome o = run_trial(t);
        longest = std::max(longest, o.detection);
        if (!o.ok) {
          ++failures;
          ADD_FAILURE() << o.why;
        }
      }
      char line[256];
      std::snprintf(line, sizeof line, "%s %s: %d trials (worlds 2-8), %d named wrongly or late, longest %.2f s",
                    sig == SIGKILL ? "SIGKILL" : "SIGSTOP", tr.c_str(), trials, failures, longest);
      report_campaign(line);
    }
  }
  if (ran == 0 && skipped > 0) GTEST_SKIP() << "every selected campaign needs an RDMA device";
}

}  // namespace
}  // namespace zw::fault
