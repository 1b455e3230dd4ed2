// zwrun's supervisor: one poll loop over the ranks' pipes and a signalfd, plus the stop policy.
#include "supervisor.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace zw::zwrun {
namespace {

constexpr int kHandledSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// "exited with code 3" or "was killed by signal 9 (SIGKILL)".
std::string describe_exit(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  int sig = WTERMSIG(wait_status);
  std::string text = "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  if (WCOREDUMP(wait_status)) text += ", core dumped";
  return text;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

std::string ranks_phrase(int n) { return n == 1 ? "the other rank" : "the other " + std::to_string(n) + " ranks"; }

void say(const std::string& line) {
  std::string text = "zwrun: " + line + "\n";
  write_fully(STDERR_FILENO, text.data(), text.size());
}

}  // namespace

Result<std::unique_ptr<Supervisor>> Supervisor::create(const SupervisorOptions& options) {
  sigset_t mask;
  ::sigemptyset(&mask);
  for (int sig : kHandledSignals) ::sigaddset(&mask, sig);
  int rc = ::pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  if (rc != 0) return system_error("zwrun: pthread_sigmask", rc);
  net::Fd fd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd.valid()) return system_error("zwrun: signalfd", errno);
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill zwrun while ranks run
  return std::unique_ptr<Supervisor>(new Supervisor(options, std::move(fd)));
}

Supervisor::Supervisor(const SupervisorOptions& options, net::Fd signal_fd)
    : options_(options), signal_fd_(std::move(signal_fd)) {
  if (options_.timeout_s > 0) timeout_deadline_ = Deadline::after_seconds(options_.timeout_s);
}

void Supervisor::add(ChildProcess child) {
  int rank = child.rank;
  ranks_.push_back(std::unique_ptr<Rank>(
      new Rank{std::move(child), true, LineRelay(rank, STDOUT_FILENO), LineRelay(rank, STDERR_FILENO)}));
}

void Supervisor::stop_all() { begin_stop(SIGTERM); }

int Supervisor::run() {
  while (true) {
    reap();
    check_deadlines();
    if (count_alive() == 0) {
      if (!any_pipe_open()) break;
      if (drain_deadline_.is_never()) drain_deadline_ = Deadline::after(options_.drain_grace);
      if (drain_deadline_.expired()) break;  // a background child of a rank still holds the pipe
    }
    if (!pump_once()) break;
  }
  return exit_code();
}

int Supervisor::exit_code() const {
  if (timed_out_) return 124;
  if (first_failure_code_ != 0) return first_failure_code_;
  if (interrupted_by_ != 0) return 128 + interrupted_by_;
  return 0;
}

// Collects every rank that has exited, then reports deaths by a signal before error exits: when a rank is killed
// (SIGKILL, OOM) its peers soon fail with an error naming it, and by the time one of those exits is seen the killed
// rank is already a zombie — reported in rank order, a survivor with a lower rank would be blamed for the job.
void Supervisor::reap() {
  std::vector<std::pair<Rank*, int>> exited;
  for (auto& rank : ranks_) {
    if (!rank->alive) continue;
    int wait_status = 0;
    pid_t pid = ::waitpid(rank->proc.pid, &wait_status, WNOHANG);
    if (pid == rank->proc.pid) exited.emplace_back(rank.get(), wait_status);
  }
  std::stable_partition(exited.begin(), exited.end(), [](const auto& e) { return WIFSIGNALED(e.second); });
  for (auto& [rank, wait_status] : exited) on_rank_exit(*rank, wait_status);
}

void Supervisor::on_rank_exit(Rank& rank, int wait_status) {
  rank.alive = false;
  // Everything the rank wrote is in its pipes now: relay its last words before saying why it stopped
  // (bounded, in case a process the rank started keeps writing).
  for (int i = 0; i < 64 && rank.proc.out.valid() && read_stream(rank, false); ++i) {
  }
  for (int i = 0; i < 64 && rank.proc.err.valid() && read_stream(rank, true); ++i) {
  }
  bool failed = !WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0;
  if (!failed || first_failure_code_ != 0) return;
  first_failure_code_ = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  if (stopping_) return;  // a consequence of the stop already under way, not news
  std::string line = "rank " + std::to_string(rank.proc.rank) + " (pid " + std::to_string(rank.proc.pid) + ") " +
                     describe_exit(wait_status);
  int others = count_alive();
  if (others > 0) line += "; stopping " + ranks_phrase(others);
  say(line);
  begin_stop(SIGTERM);
}

void Supervisor::on_signals() {
  signalfd_siginfo info;
  while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reap() runs on every loop iteration
    if (interrupted_by_ == 0) interrupted_by_ = sig;
    say("received " + signal_name(sig) + "; forwarding it to " + std::to_string(count_alive()) + " ranks");
    begin_stop(sig);
  }
}

void Supervisor::check_deadlines() {
  if (!timed_out_ && timeout_deadline_.expired()) {
    timed_out_ = true;
    say("timeout: the job ran longer than --timeout " + seconds_text(options_.timeout_s) + " s; stopping all " +
        std::to_string(count_alive()) + " ranks");
    begin_stop(SIGTERM);
  }
  if (kill_deadline_.expired()) {
    kill_deadline_ = Deadline::never();
    std::string running;
    for (const auto& rank : ranks_) {
      if (rank->alive) running += (running.empty() ? "" : ", ") + std::to_string(rank->proc.rank);
    }
    if (!running.empty())
      say("rank(s) " + running + " still running " +
          seconds_text(std::chrono::duration<double>(options_.kill_grace).count()) +
          " s after SIGTERM; sending SIGKILL");
    signal_all(SIGKILL);
  }
}

void Supervisor::begin_stop(int sig) {
  stopping_ = true;
  signal_all(sig);
  if (kill_deadline_.is_never()) kill_deadline_ = Deadline::after(options_.kill_grace);
}

// Signals each rank's process group while the rank or something holding its pipes may still run.
void Supervisor::signal_all(int sig) {
  for (auto& rank : ranks_) {
    if (rank->alive || rank->proc.out.valid() || rank->proc.err.valid()) ::kill(-rank->proc.pid, sig);
  }
}

// Waits for output, a signal or the next deadline and handles what arrived. False when poll failed.
bool Supervisor::pump_once() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Rank*, bool>> sources;  // (rank, is_err) of fds[i + 1]
  fds.push_back({signal_fd_.get(), POLLIN, 0});
  for (auto& rank : ranks_) {
    if (rank->proc.out.valid())
      fds.push_back({rank->proc.out.get(), POLLIN, 0}), sources.push_back({rank.get(), false});
    if (rank->proc.err.valid()) fds.push_back({rank->proc.err.get(), POLLIN, 0}), sources.push_back({rank.get(), true});
  }
  Deadline next =
      Deadline::min(Deadline::min(kill_deadline_, drain_deadline_), timed_out_ ? Deadline::never() : timeout_deadline_);
  // SIGCHLD of a rank whose pipes another process still holds arrives through the signalfd, so no tick.
  int n = ::poll(fds.data(), fds.size(), next.is_never() ? -1 : next.remaining_ms());
  if (n < 0) {
    if (errno == EINTR) return true;
    say(std::string("poll failed: ") + ::strerror(errno));
    return false;
  }
  if (fds[0].revents != 0) on_signals();
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) read_stream(*sources[i - 1].first, sources[i - 1].second);
  }
  return true;
}

// Relays one read's worth of a rank's stream; false when nothing was read (EOF, error or no data yet).
bool Supervisor::read_stream(Rank& rank, bool is_err) {
  net::Fd& fd = is_err ? rank.proc.err : rank.proc.out;
  LineRelay& relay = is_err ? rank.err : rank.out;
  char buf[64 * 1024];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n > 0) {
    relay.feed(buf, static_cast<size_t>(n));
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  relay.flush();  // EOF or a read error: the stream is over
  fd.reset();
  return false;
}

int Supervisor::count_alive() const {
  int n = 0;
  for (const auto& rank : ranks_) n += rank->alive ? 1 : 0;
  return n;
}

bool Supervisor::any_pipe_open() const {
  for (const auto& rank : ranks_) {
    if (rank->proc.out.valid() || rank->proc.err.valid()) return true;
  }
  return false;
}

}  // namespace zw::zwrun
