// Shared sweep of the anchor collective drivers (mpi_coll_bench, gloo_coll_bench): nccl-tests flags and the
// exact output columns of zerowire's zw_*_perf, so that bench/compare/report.py reads all of them alike.
//
// Flags: COLL (all_gather | reduce_scatter) then -b/-e min/max bytes, -f step factor, -n iterations, -w warm-up
// iterations, -c check (validate each size and placement once before timing), -d float, -o sum, -t label of
// the transport for the header. Buffers are allocated once at the largest size, huge-page advised and
// pre-faulted; validation fills a known pattern, timing runs on zeroed data (no growth, no denormals).
// Time is the mean over iterations, averaged over ranks; busbw = algbw * (n-1)/n, as nccl-tests.
// In-place follows each library's own convention: all_gather input at out + rank*count (MPI_IN_PLACE),
// reduce_scatter result in the first count elements of the buffer (MPI_IN_PLACE and Gloo).
//
// Non-goals: other dtypes or ops, all_reduce, GPU memory, a general benchmark framework.
#pragma once

#include <cstddef>

namespace zwcmp {

enum class Coll { kAllGather, kReduceScatter };

// The buffers of one run, in elements of float.
struct Bufs {
  const float* in;  // what the rank contributes (may alias out for in-place)
  float* out;       // the output buffer (n*count for all_gather and for in-place reduce_scatter)
  size_t count;     // per-rank count, as NCCL and MPI_Reduce_scatter_block
  bool in_place;    // placement of this run
};

// One library's collectives. Contract: every call is collective (all ranks call it in the same order).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual bool supports(Coll coll, bool in_place) const = 0;  // false: the columns say N/A
  virtual void prepare(Coll coll, const Bufs& b) = 0;         // once per size and placement, not timed
  virtual void run(Coll coll, const Bufs& b) = 0;             // one collective, blocking
  virtual void barrier() = 0;
  virtual double sum(double v) = 0;  // sum over ranks
};

struct Flags {
  Coll coll = Coll::kAllGather;
  size_t min_bytes = 32u << 20, max_bytes = 32u << 20;  // -b, -e
  double factor = 2;                                    // -f
  int iters = 20, warmup = 5, check = 1;                // -n, -w, -c
  const char* transport = "default";                    // -t: shown in the header only
  const char* store_dir = nullptr;                      // --store: rendezvous directory (Gloo)
};

// Parses argv; returns -1 to go on, else the exit code (after printing help or the error).
int parse_flags(int argc, char** argv, const char* program, Flags* flags);

// Runs the sweep and prints the table on rank 0. Returns the exit code (1 when any element was wrong).
int run_sweep(const Flags& flags, const char* library, Backend& backend);

}  // namespace zwcmp
