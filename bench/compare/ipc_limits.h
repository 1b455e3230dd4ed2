// Ceilings of moving bytes between two processes on this host (ipc_limits.cc); GB/s = 10^9 bytes/s, best of
// `runs`, or a negative value when the probe could not run (no permission, no loopback).
#pragma once

#include <cstddef>

// process_vm_readv of `bytes` from a forked child in calls of `chunk` bytes into `dst`. Source and destination
// are two alternating chunk-sized slots (min(bytes, 2 × chunk) bytes each), so a cache-sized chunk stays cached
// as a collective's reused buffers do, and chunk == bytes streams from memory.
double cma_read_gbps(size_t bytes, size_t chunk, int runs, char* dst);
// The same access pattern with memcpy inside this process, the user-space reference.
double memcpy_chunked_gbps(size_t bytes, size_t chunk, int runs, const char* src, char* dst);
// Payload rate of one loopback TCP stream, one direction or both directions at once (per direction): `bytes` each
// way in calls of at most `io` bytes, from and into buffers of `footprint` bytes walked round and round.
double tcp_loopback_gbps(size_t bytes, size_t io, size_t footprint, int runs, bool both_ways);
