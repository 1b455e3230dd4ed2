// A tiny program that zwrun_test runs under zwrun: each mode exercises one behaviour of the launcher.
//
//   env                  prints the ZW_* launch variables (KEY=VALUE) on stdout and one line on stderr
//   args A B ...         prints each argument as "arg: A"
//   exit CODE RANK       rank RANK says "rank R fails now" on stderr and exits with CODE after 100 ms; every
//                        other rank sleeps 60 s
//   signal SIG RANK      the same, but rank RANK kills itself with SIG
//   shmdie JOB RANK      rank RANK creates its shm transport segment for job JOB (/dev/shm/zw-JOB-rRANK) and
//                        kills itself with SIGKILL before any peer maps it; the other ranks exit 0
//   cascade DIR RANK     rank RANK writes its pid to DIR/victim and kills itself with SIGKILL; every other rank
//                        waits until that process is dead (a zombie or gone), says "lost rank RANK" and exits 3 at
//                        once — how real ranks fail after a peer dies
//   sleep SECONDS        sleeps
//   partial TEXT         writes TEXT without a newline and exits
//   lines COUNT          writes COUNT long lines "<rank>:<i>:xxx..." as fast as it can
//   trap DIR             on SIGTERM prints "rank R got SIGTERM" and exits 0; creates DIR/ready.R once armed
//   store                connects to zwrun's store with ZW_STORE_ADDR and ZW_AUTH_TOKEN, meets every rank there
//                        and prints "rank R met W ranks"
// Non-goals: anything else a real zerowire program does (no transport use).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"
#include "zerowire/store.h"

namespace {

volatile sig_atomic_t g_got_term = 0;

int rank() {
  const char* r = std::getenv("ZW_RANK");
  return r ? std::atoi(r) : -1;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

int print_env() {
  const char* names[] = {"ZW_RANK",       "ZW_WORLD_SIZE", "ZW_LOCAL_RANK", "ZW_LOCAL_WORLD_SIZE",
                         "ZW_STORE_ADDR", "ZW_AUTH_TOKEN", "ZW_TRANSPORT"};
  for (const char* name : names) {
    const char* value = std::getenv(name);
    std::printf("%s=%s\n", name, value ? value : "<unset>");
  }
  std::fflush(stdout);
  std::fprintf(stderr, "stderr line from rank %d\n", rank());
  return 0;
}

int one_rank_fails(bool by_signal, int value, int failing_rank) {
  if (rank() != failing_rank) {
    sleep_s(60);
    return 0;
  }
  sleep_s(0.1);
  std::fprintf(stderr, "rank %d fails now\n", failing_rank);
  if (by_signal) ::kill(::getpid(), value);
  return value;
}

// Whether process `pid` has died (a zombie waiting to be reaped, or gone).
bool dead(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;
  int got_pid = 0;
  char comm[256] = {}, state = 0;
  const int n = std::fscanf(f, "%d %255s %c", &got_pid, comm, &state);
  std::fclose(f);
  return n == 3 && (state == 'Z' || state == 'X');
}

int cascade(const std::string& dir, int victim) {
  const std::string path = dir + "/victim";
  if (rank() == victim) {
    sleep_s(0.1);
    const std::string tmp = path + ".tmp";
    if (FILE* f = std::fopen(tmp.c_str(), "w")) {
      std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
      std::fclose(f);
      std::rename(tmp.c_str(), path.c_str());
    }
    ::kill(::getpid(), SIGKILL);
  }
  int pid = 0;
  for (int i = 0; i < 20000 && pid == 0; ++i) {  // up to 20 s
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      if (std::fscanf(f, "%d", &pid) != 1) pid = 0;
      std::fclose(f);
    }
    if (pid == 0) sleep_s(0.001);
  }
  while (pid != 0 && !dead(pid)) sleep_s(0.0002);
  std::fprintf(stderr, "rank %d: lost rank %d\n", rank(), victim);
  return 3;
}

int shm_die(const std::string& job, int victim) {
  if (rank() != victim) return 0;
  zw::transport::TransportOptions o;
  o.rank = victim;
  o.world_size = victim + 1;
  o.job_id = job;
  auto t = zw::transport::create_transport("shm", o);
  if (!t.ok() || !(*t)->listen().ok()) return 4;
  ::kill(::getpid(), SIGKILL);
  return 5;
}

int many_lines(long count) {
  std::string pad(static_cast<size_t>(50 + rank() * 37), 'x');
  for (long i = 0; i < count; ++i) std::printf("%d:%ld:%s\n", rank(), i, pad.c_str());
  return 0;
}

int trap_term(const std::string& dir) {
  struct sigaction sa = {};
  sa.sa_handler = [](int) { g_got_term = 1; };
  ::sigaction(SIGTERM, &sa, nullptr);
  std::string ready = dir + "/ready." + std::to_string(rank());
  if (FILE* f = std::fopen(ready.c_str(), "w")) std::fclose(f);
  for (int i = 0; i < 600 && !g_got_term; ++i) sleep_s(0.05);
  std::printf("rank %d got SIGTERM\n", rank());
  return g_got_term ? 0 : 1;
}

int meet_through_store() {
  const char* addr = std::getenv("ZW_STORE_ADDR");
  const char* token = std::getenv("ZW_AUTH_TOKEN");
  const char* world = std::getenv("ZW_WORLD_SIZE");
  if (!addr || !token || !world) return 3;
  auto store = zw::connect_tcp_store(addr, token, std::chrono::seconds(10));
  if (!store.ok()) {
    std::fprintf(stderr, "connect: %s\n", store.status().to_string().c_str());
    return 4;
  }
  zw::Status set = (*store)->set("helper/" + std::to_string(rank()), "here");
  std::vector<std::string> keys;
  for (int r = 0; r < std::atoi(world); ++r) keys.push_back("helper/" + std::to_string(r));
  zw::Status waited = set.ok() ? (*store)->wait(keys, std::chrono::seconds(10)) : set;
  if (!waited.ok()) {
    std::fprintf(stderr, "store: %s\n", waited.to_string().c_str());
    return 5;
  }
  std::printf("rank %d met %zu ranks\n", rank(), keys.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "env") return print_env();
  if (mode == "args") {
    for (int i = 2; i < argc; ++i) std::printf("arg: %s\n", argv[i]);
    return 0;
  }
  if ((mode == "exit" || mode == "signal") && argc == 4)
    return one_rank_fails(mode == "signal", std::atoi(argv[2]), std::atoi(argv[3]));
  if (mode == "sleep" && argc == 3) {
    sleep_s(std::atof(argv[2]));
    return 0;
  }
  if (mode == "partial" && argc == 3) {
    std::fputs(argv[2], stdout);
    return 0;
  }
  if (mode == "lines" && argc == 3) return many_lines(std::atol(argv[2]));
  if (mode == "cascade" && argc == 4) return cascade(argv[2], std::atoi(argv[3]));
  if (mode == "shmdie" && argc == 4) return shm_die(argv[2], std::atoi(argv[3]));
  if (mode == "trap" && argc == 3) return trap_term(argv[2]);
  if (mode == "store") return meet_through_store();
  std::fprintf(stderr, "zwrun_test_helper: unknown mode; see the file header for usage\n");
  return 2;
}
