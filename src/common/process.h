// common/process.h — what /proc says about a process on this host (its state letter and start time), for the
// transports' dead-peer checks and the collectives' timeout errors. Non-goals: other hosts, non-Linux systems.
#pragma once

#include <cstdint>

namespace zw {

// The state letter (R, S, T, t, Z, ...) and start time (clock ticks since boot) from /proc/<pid>/stat; false when the
// file cannot be read or parsed (the process is gone, or /proc is not mounted).
bool read_proc_stat(int pid, char* state, uint64_t* start_time);

// The same from an open /proc/<pid>/stat descriptor (left open); false, never an exception, when the read fails — as
// it does with ESRCH once the process was reaped after the open.
bool read_proc_stat_fd(int fd, char* state, uint64_t* start_time);

}  // namespace zw
