// zwrun's supervisor: relays the ranks' output, watches them exit and stops the job when one fails.
//
// Policy: the first rank that exits non-zero or dies from a signal is reported on stderr ("zwrun: rank 2
// (pid 1234) was killed by signal 9 (SIGKILL); stopping the other 3 ranks"); every other rank's process group
// then gets SIGTERM and, after a grace period, SIGKILL. zwrun's exit code is 124 on --timeout, else the first
// failing rank's code (128+signal for a signal), else 128+signal when zwrun itself was interrupted, else 0.
// SIGINT, SIGTERM and SIGHUP sent to zwrun are forwarded to every rank and start the same grace period.
//
// Threading: everything runs on the thread that calls run(); create() must be called before zwrun starts any
// other thread, because it blocks the handled signals in the calling thread and so in threads created later.
// Non-goals: restarting ranks, elastic jobs, multiple hosts.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "common/socket.h"
#include "relay.h"
#include "spawn.h"
#include "zerowire/status.h"

namespace zw::zwrun {

struct SupervisorOptions {
  double timeout_s = 0;                         // --timeout: stop the job after this long; 0 = never
  std::chrono::milliseconds kill_grace{5000};   // SIGTERM to SIGKILL
  std::chrono::milliseconds drain_grace{2000};  // after the last rank exited, wait this long for EOF
};

class Supervisor {
 public:
  // Blocks SIGCHLD/SIGINT/SIGTERM/SIGHUP, opens a signalfd for them, ignores SIGPIPE and starts the timeout.
  static Result<std::unique_ptr<Supervisor>> create(const SupervisorOptions& options);

  // Takes ownership of a started rank.
  void add(ChildProcess child);
  // Stops every rank added so far (used when a later rank could not be started).
  void stop_all();
  // Relays output until every rank has exited and its pipes are drained; returns zwrun's exit code.
  int run();

 private:
  struct Rank {
    ChildProcess proc;  // pid and pipes
    bool alive;         // not yet reaped
    LineRelay out;      // relays proc.out to zwrun's stdout
    LineRelay err;      // relays proc.err to zwrun's stderr
  };

  Supervisor(const SupervisorOptions& options, net::Fd signal_fd);
  void reap();
  void on_rank_exit(Rank& rank, int wait_status);
  void on_signals();
  void check_deadlines();
  void begin_stop(int sig);
  void signal_all(int sig);
  bool pump_once();
  static bool read_stream(Rank& rank, bool is_err);
  int count_alive() const;
  bool any_pipe_open() const;
  int exit_code() const;

  SupervisorOptions options_;
  net::Fd signal_fd_;                         // SIGCHLD and the forwarded signals
  std::vector<std::unique_ptr<Rank>> ranks_;  // by rank; pointers stay put while the vector grows
  Deadline timeout_deadline_ = Deadline::never();
  Deadline kill_deadline_ = Deadline::never();   // SIGKILL the remaining ranks when it expires
  Deadline drain_deadline_ = Deadline::never();  // stop waiting for pipe EOF when it expires
  bool stopping_ = false;                        // SIGTERM (or a forwarded signal) was sent
  bool timed_out_ = false;                       // --timeout expired
  int first_failure_code_ = 0;                   // exit code of the first failing rank; 0 = none yet
  int interrupted_by_ = 0;                       // first signal zwrun received; 0 = none
};

}  // namespace zw::zwrun
