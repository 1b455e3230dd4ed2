// zwrun — launches an N-rank zerowire job on this host.
//
//   zwrun -n N [--transport shm|tcp] [--timeout SECONDS] [--metrics-dir DIR] [--flight-dir DIR]
//         [--metrics-port PORT] [--] PROGRAM ARGS...
//
// zwrun serves the job's bootstrap store (a TCP store on 127.0.0.1, protected by ZW_AUTH_TOKEN from the
// environment or a fresh random 128-bit token), starts N copies of PROGRAM with ZW_RANK, ZW_WORLD_SIZE,
// ZW_LOCAL_RANK, ZW_LOCAL_WORLD_SIZE, ZW_STORE_ADDR, ZW_AUTH_TOKEN (and ZW_TRANSPORT when given), prefixes
// their output lines with "[rank] ", and stops the whole job when one rank fails (see supervisor.h for the
// exit-code policy). The store lives until every rank has exited.
// Non-goals: multiple hosts (use torchrun or Slurm, which bootstrap.h also understands), stdin forwarding,
// CPU/NUMA binding.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "spawn.h"
#include "supervisor.h"
#include "transport/transport.h"
#include "zerowire/store.h"

namespace zw::zwrun {
namespace {

constexpr int kUsageError = 2;
constexpr int kLaunchError = 1;

struct Options {
  int ranks = 0;                     // -n
  std::string transport;             // --transport, "" = not given
  double timeout_s = 0;              // --timeout, 0 = none
  std::vector<std::string> command;  // PROGRAM ARGS...
  std::string metrics_dir;           // --metrics-dir: every rank's JSON metrics dump lands here
  std::string flight_dir;            // --flight-dir: every rank's flight recorder files land here
  int metrics_port = 0;              // --metrics-port: ZW_METRICS_PORT of every rank (rank i serves port + i)
};

void complain(const std::string& message) { std::fprintf(stderr, "zwrun: %s\n", message.c_str()); }

// CLI11 validator of --timeout: empty when `text` is a number of seconds >= 0, else the complaint.
std::string seconds_check(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= 0)) return "'" + text + "' is not a number of seconds >= 0";
  return "";
}

// Parses the command line into *out. Returns -1 to go on, else the exit code (0 after --help).
int parse_command_line(int argc, char** argv, Options* out) {
  CLI::App app{"zwrun: runs N ranks of a zerowire program on this host, serving their bootstrap store."};
  app.add_option("-n,--np", out->ranks, "number of ranks to start")->required()->check(CLI::Range(1, 4096));
  app.add_option("--transport", out->transport, "sets ZW_TRANSPORT for every rank")
      ->check(CLI::IsMember({"shm", "tcp"}));
  app.add_option("--timeout", out->timeout_s, "stop the job after this many seconds (exit code 124)")
      ->check(CLI::Validator(seconds_check, "SECONDS"));
  app.add_option("--metrics-dir", out->metrics_dir,
                 "gather every rank's metrics (JSON, at exit and on SIGUSR2) into DIR/rank<R>.json (ZW_METRICS_DUMP)");
  app.add_option("--flight-dir", out->flight_dir, "keep every rank's flight recorder in DIR (ZW_FLIGHT_DIR)");
  app.add_option("--metrics-port", out->metrics_port,
                 "serve each rank's Prometheus endpoint on 127.0.0.1:PORT+rank (ZW_METRICS_PORT; zwtop -n N --port PORT)")
      ->check(CLI::Range(1, 65535));
  app.add_option("command", out->command, "PROGRAM and its arguments (options after PROGRAM are its own)")->required();
  app.positionals_at_end();
  app.prefix_command();  // everything from PROGRAM on belongs to the program
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kUsageError;
  }
  for (const std::string& extra : app.remaining()) {
    if (extra == "--") continue;
    complain("unknown option '" + extra + "' (zwrun options go before PROGRAM; see --help)");
    return kUsageError;
  }
  return -1;
}

// ZW_AUTH_TOKEN from the environment, else 128 random bits in hex.
Result<std::string> job_token() {
  const char* from_env = std::getenv("ZW_AUTH_TOKEN");
  if (from_env != nullptr && *from_env != '\0') return std::string(from_env);
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error("getrandom", errno);
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) token += {kHex[b >> 4], kHex[b & 15]};
  return token;
}

// Reopens any of fds 0-2 that is closed on /dev/null so that pipes never land on them.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (opened >= 0 && opened != fd) ::close(opened);
    }
  }
}

// The monitoring variables of the --metrics-dir, --flight-dir and --metrics-port options (directories are created).
Status monitoring_environment(const Options& o, std::vector<std::string>* env) {
  for (const std::string* dir : {&o.metrics_dir, &o.flight_dir}) {
    if (dir->empty()) continue;
    if (::mkdir(dir->c_str(), 0755) != 0 && errno != EEXIST)
      return Status(Code::kSystem, "cannot create " + *dir + ": " + std::strerror(errno));
  }
  if (!o.metrics_dir.empty()) env->push_back("ZW_METRICS_DUMP=" + o.metrics_dir + "/rank%r.json");
  if (!o.flight_dir.empty()) env->push_back("ZW_FLIGHT_DIR=" + o.flight_dir);
  if (o.metrics_port > 0) env->push_back("ZW_METRICS_PORT=" + std::to_string(o.metrics_port));
  return Status();
}

int run_job(const Options& options) {
  SupervisorOptions sup_options;
  sup_options.timeout_s = options.timeout_s;
  // Before the store server starts its thread, so that the thread inherits the blocked signal mask.
  auto supervisor = Supervisor::create(sup_options);
  if (!supervisor.ok()) {
    complain(supervisor.status().message());
    return kLaunchError;
  }

  auto token = job_token();
  if (!token.ok()) {
    complain(token.status().message());
    return kLaunchError;
  }
  TcpStoreServerOptions store_options;
  store_options.listen_address = "127.0.0.1:0";
  store_options.auth_token = *token;
  auto server = start_tcp_store_server(store_options);
  if (!server.ok()) {
    complain("cannot start the job's store: " + server.status().message());
    return kLaunchError;
  }

  LaunchSpec spec;
  spec.command = options.command;
  spec.world_size = options.ranks;
  spec.store_address = "127.0.0.1:" + std::to_string((*server)->port());
  spec.auth_token = *token;
  spec.transport = options.transport;
  if (Status s = monitoring_environment(options, &spec.extra); !s.ok()) {
    complain(s.message());
    return kLaunchError;
  }
  if (options.metrics_port > 0 && options.metrics_port + options.ranks - 1 > 65535) {
    complain("--metrics-port " + std::to_string(options.metrics_port) + " with " + std::to_string(options.ranks) +
             " ranks puts rank " + std::to_string(65535 - options.metrics_port + 1) +
             " and later past the last TCP port (65535); choose a port of at most " +
             std::to_string(65535 - options.ranks + 1));
    return kLaunchError;
  }
  if (options.metrics_port > 0)
    complain("metrics endpoints on 127.0.0.1:" + std::to_string(options.metrics_port) + "+rank; watch them with " +
             "tools/zwtop/zwtop -n " + std::to_string(options.ranks) + " --port " + std::to_string(options.metrics_port));
  std::vector<int> pids;  // every rank ever started: what they left in /dev/shm is removed at the end
  auto finish = [&](int code) {
    const int removed = transport::reclaim_shm_segments_of(pids);
    if (removed > 0) complain("removed " + std::to_string(removed) + " shm segment(s) left by ranks that died");
    return code;
  };
  for (int rank = 0; rank < options.ranks; ++rank) {
    auto child = spawn_rank(spec, rank);
    if (!child.ok()) {
      complain(child.status().message());
      (*supervisor)->stop_all();
      (*supervisor)->run();
      return finish(child.status().code() == Code::kNotFound ? 127 : 126);
    }
    pids.push_back(static_cast<int>(child->pid));
    (*supervisor)->add(std::move(*child));
  }
  return finish((*supervisor)->run());  // the store server is destroyed only after this returns
}

}  // namespace
}  // namespace zw::zwrun

int main(int argc, char** argv) {
  zw::zwrun::ensure_standard_fds();
  zw::zwrun::Options options;
  int code = zw::zwrun::parse_command_line(argc, argv, &options);
  if (code >= 0) return code;
  return zw::zwrun::run_job(options);
}
