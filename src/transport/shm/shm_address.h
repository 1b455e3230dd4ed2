// Addresses of the shm transport: what a rank publishes so that peers find its segment, can tell that they
// share its host and pid namespace, and can later tell whether its process is still alive.
//
// Text form (one line, ';'-separated key=value pairs after a "shm:" prefix):
//   shm:rank=3;pid=1234;start=98765;seg=/zw-job-r3;host=node1;boot=<boot_id>;pidns=pid:[4026531836]
// `start` is the process start time (clock ticks since boot, /proc/<pid>/stat field 22), so that a reused
// pid is not mistaken for the rank. Non-goals: addresses of other hosts (the tcp transport handles those),
// versioning beyond the "shm:" prefix.
#pragma once

#include <cstdint>
#include <string>

#include "zerowire/status.h"

namespace zw::transport {

// Where a process runs: two ranks can use shared memory only when all three fields match.
struct HostIdentity {
  std::string hostname;  // gethostname()
  std::string boot_id;   // /proc/sys/kernel/random/boot_id; tells apart hosts (VMs) with the same name
  std::string pid_ns;    // readlink /proc/self/ns/pid ("" when unreadable); process ids are only valid inside it
};

// This process's identity, read once.
const HostIdentity& local_host_identity();

struct ShmAddress {
  int rank = -1;            // rank that listens at this address
  int32_t pid = 0;          // its process id
  uint64_t start_time = 0;  // its start time in clock ticks since boot (0 = unknown)
  std::string segment;      // POSIX shm name of its inbound rings, "/zw-<job>-r<rank>"
  HostIdentity host;        // where it runs

  std::string to_string() const;
  // Parses the text form; a malformed address is kInvalidArgument quoting it.
  static Result<ShmAddress> parse(const std::string& text);
};

// "/zw-<job_id>-r<rank>", with characters other than [A-Za-z0-9._-] of the job id replaced by '_' and the
// name kept within NAME_MAX.
std::string shm_segment_name(const std::string& job_id, int rank);

// The start time of `pid` in clock ticks since boot, or 0 when it cannot be read.
uint64_t process_start_time(int32_t pid);

// Whether the process behind `address` has exited: kill(pid, 0) fails with ESRCH, /proc/<pid>/stat shows a
// zombie, or the pid now belongs to a process with another start time. *why receives e.g.
// "pid 1234 on host node1 exited". Returns false while the process runs (or cannot be inspected).
bool process_exited(const ShmAddress& address, std::string* why);

}  // namespace zw::transport
