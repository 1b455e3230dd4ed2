// zwrun's process spawning: starts one rank of the job with its ZW_* environment and its stdout/stderr on
// pipes that the supervisor reads.
//
// Each rank runs in its own process group (so that stopping a rank also stops whatever it started, e.g. a
// wrapper script's child) and dies with zwrun (PR_SET_PDEATHSIG). Its stdin is /dev/null. A program that
// cannot be executed is reported by spawn_rank itself, with the errno of the failed exec.
// Non-goals: remote hosts, CPU binding, stdin forwarding.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/socket.h"
#include "zerowire/status.h"

namespace zw::zwrun {

struct LaunchSpec {
  std::vector<std::string> command;  // program (looked up in PATH) and its arguments
  int world_size = 1;                // N: ZW_WORLD_SIZE and ZW_LOCAL_WORLD_SIZE
  std::string store_address;         // ZW_STORE_ADDR, "127.0.0.1:port"
  std::string auth_token;            // ZW_AUTH_TOKEN
  std::string transport;             // ZW_TRANSPORT; empty leaves the inherited value alone
  std::vector<std::string> extra;    // more NAME=value variables (monitoring options), replacing inherited ones
};

struct ChildProcess {
  int rank = 0;    // rank of this child
  pid_t pid = -1;  // its pid, also its process group id
  net::Fd out;     // non-blocking read end of its stdout pipe
  net::Fd err;     // non-blocking read end of its stderr pipe
};

// The environment of `rank`: `base` (NAME=value strings) with the ZW_* launch variables replaced.
std::vector<std::string> rank_environment(const LaunchSpec& spec, int rank, const char* const* base);

// Starts `rank`. Fails with kNotFound ("cannot execute 'foo': No such file or directory") when the program
// does not exist, or kSystem for other exec, fork or pipe failures.
Result<ChildProcess> spawn_rank(const LaunchSpec& spec, int rank);

}  // namespace zw::zwrun
