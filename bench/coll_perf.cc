// nccl-tests-style collective benchmark driver (see coll_perf.h).
#include "bench/coll_perf.h"

#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/data_pattern.h"
#include "common/knobs.h"
#include "zerowire/bootstrap.h"
#include "zerowire/communicator.h"
#include "zerowire/memory.h"

namespace zw::bench {
namespace {

struct Flags {
  std::string min_bytes = "32M", max_bytes = "32M", step_bytes;
  double factor = 0;  // 0: not given (nccl-tests uses -i 1M by default; we default to -f 2)
  int iters = 20, warmup = 5, check = 1, root = 0;
  int local_register = 0;  // -R: 1 allocates the buffers with zw::mem_alloc (nccl-tests: ncclMemAlloc)
  int blocking = 0;        // -z: 1 waits for each timed operation before issuing the next (nccl-tests' -z)
  std::string dtype = "float", op = "sum";
};

// One run's geometry: what `size` means per collective, as in nccl-tests.
struct Shape {
  size_t count;       // the count argument (per rank for all_gather/reduce_scatter)
  size_t in_bytes;    // input buffer bytes
  size_t out_bytes;   // output buffer bytes
  size_t size;        // the "size" column: total bytes
  double bus_factor;  // busbw = algbw * bus_factor
};

Shape shape_of(CollKind kind, size_t size, size_t es, int n) {
  if (kind == CollKind::kAllReduce) {
    size_t count = size / es;
    return {count, count * es, count * es, count * es, 2.0 * (n - 1) / n};
  }
  size_t count = size / (es * n);
  size_t whole = count * es * n, block = count * es;
  if (kind == CollKind::kAllGather) return {count, block, whole, whole, double(n - 1) / n};
  return {count, whole, block, whole, double(n - 1) / n};
}

// Host memory allocated once at the largest size: huge-page advised, pre-faulted, and starting on a 2 MiB boundary
// (mapped 2 MiB longer and trimmed), so every size runs on huge pages wherever the kernel gives them. The anchor
// drivers (bench/compare/coll_sweep.cc) allocate the same way: a buffer that starts inside a 4 KiB-paged head
// costs a process_vm_writev page pinning per 4 KiB instead of per 2 MiB, for zerowire and Open MPI alike.
// With -R 1 the buffers come from zw::mem_alloc instead (also 2 MiB-aligned and pre-faulted), which peers on
// the host map, so shm writes into them are a memcpy rather than a process_vm_writev.
struct Arena {
  static constexpr size_t kAlign = size_t{2} << 20;
  Arena(size_t bytes, bool local_register) : bytes(bytes ? bytes : 1), registered(local_register) {
    if (registered) {
      auto p = mem_alloc(this->bytes);
      if (!p.ok()) {
        std::fprintf(stderr, "%s\n", p.status().to_string().c_str());
        return;
      }
      ptr = static_cast<std::byte*>(p.value());
      return;
    }
    map_bytes = this->bytes + kAlign;
    void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base = static_cast<std::byte*>(p);
    ptr = base + (kAlign - reinterpret_cast<uintptr_t>(base) % kAlign) % kAlign;
    madvise(ptr, this->bytes, MADV_HUGEPAGE);
    std::memset(ptr, 0, this->bytes);
  }
  ~Arena() {
    if (registered && ptr) (void)mem_free(ptr);
    if (base) munmap(base, map_bytes);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  size_t bytes;
  bool registered;            // from zw::mem_alloc (-R 1), else mmap
  size_t map_bytes = 0;
  std::byte* base = nullptr;  // the mapping (-R 0)
  std::byte* ptr = nullptr;   // 2 MiB-aligned start
};

Result<Work> issue(Communicator& comm, CollKind kind, const CollectiveOptions& o) {
  switch (kind) {
    case CollKind::kAllGather: return all_gather(comm, o);
    case CollKind::kReduceScatter: return reduce_scatter(comm, o);
    case CollKind::kAllReduce: return all_reduce(comm, o);
  }
  return Status(Code::kInternal, "unknown collective");
}

// Buffers of one variant: out-of-place uses separate input and output, in-place nccl-tests' placement.
CollectiveOptions options_for(CollKind kind, const Shape& s, DataType dt, ReduceOp op, bool in_place, Arena& in,
                              Arena& out, int rank) {
  CollectiveOptions o{MemRef::host(in.ptr, s.in_bytes), MemRef::host(out.ptr, s.out_bytes), s.count, dt, op};
  if (!in_place) return o;
  size_t block = s.count * dtype_size(dt);
  if (kind == CollKind::kAllGather) o.input = MemRef::host(out.ptr + rank * block, block);
  if (kind == CollKind::kReduceScatter) {
    o.input = MemRef::host(out.ptr, s.in_bytes);
    o.output = MemRef::host(out.ptr + rank * block, block);
  }
  if (kind == CollKind::kAllReduce) o.input = o.output;
  return o;
}

// Runs the operation once on known data and counts wrong elements on this rank.
Result<int64_t> validate(Communicator& comm, CollKind kind, const CollectiveOptions& o, int n) {
  const int r = comm.rank();
  const DataType dt = o.dtype;
  const size_t in_elems = o.input.bytes / dtype_size(dt);
  const size_t first = kind == CollKind::kAllGather ? r * o.count : 0;  // element index of the input in the vector
  std::memset(o.output.ptr, 0xA5, o.output.bytes);
  for (size_t i = 0; i < in_elems; ++i) pattern::store_value(dt, o.input.ptr, i, pattern::input_value(o.op, r, first + i));
  ZW_ASSIGN_OR_RETURN(Work w, issue(comm, kind, o));
  ZW_TRY(w.wait());
  int64_t wrong = 0;
  for (size_t i = 0; i < o.output.bytes / dtype_size(dt); ++i) {
    double got = pattern::load_value(dt, o.output.ptr, i), want;
    if (kind == CollKind::kAllGather) {
      size_t src = i / o.count;
      want = pattern::as_stored(dt, pattern::input_value(o.op, static_cast<int>(src), i));
    } else {
      size_t elem = kind == CollKind::kReduceScatter ? r * o.count + i : i;
      want = pattern::reference(dt, o.op, n, elem);
    }
    if (std::abs(got - want) > pattern::tolerance(dt, o.op, want)) ++wrong;
  }
  return wrong;
}

// Mean time per operation on this rank, in microseconds: `iters` operations issued, then waited for (as nccl-tests
// launches them, then synchronizes the stream), or with `blocking` each waited for before the next is issued (a
// blocking call such as MPI_Allgather; nccl-tests' -z 1).
Result<double> time_op(Communicator& comm, CollKind kind, const CollectiveOptions& o, int warmup, int iters,
                       bool blocking) {
  for (int i = 0; i < warmup; ++i) {
    ZW_ASSIGN_OR_RETURN(Work w, issue(comm, kind, o));
    ZW_TRY(w.wait());
  }
  ZW_ASSIGN_OR_RETURN(Work b, barrier(comm));
  ZW_TRY(b.wait());
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Work> works;
  works.reserve(blocking ? 0 : iters);
  for (int i = 0; i < iters; ++i) {
    ZW_ASSIGN_OR_RETURN(Work w, issue(comm, kind, o));
    if (blocking)
      ZW_TRY(w.wait());
    else
      works.push_back(w);
  }
  for (const Work& w : works) ZW_TRY(w.wait());
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Sums a double over ranks.
Result<double> sum_over_ranks(Communicator& comm, double v) {
  double out = 0;
  ZW_ASSIGN_OR_RETURN(Work w, all_reduce(comm, {MemRef::host(&v, 8), MemRef::host(&out, 8), 1, DataType::kFloat64}));
  ZW_TRY(w.wait());
  return out;
}

struct Measured {
  double us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
};

Result<Measured> measure(Communicator& comm, CollKind kind, const Shape& s, const CollectiveOptions& o, const Flags& f) {
  Measured m;
  const int n = comm.size();
  if (f.check) {
    ZW_ASSIGN_OR_RETURN(int64_t wrong, validate(comm, kind, o, n));
    ZW_ASSIGN_OR_RETURN(double total_wrong, sum_over_ranks(comm, static_cast<double>(wrong)));
    m.wrong = static_cast<int64_t>(total_wrong);
  }
  ZW_ASSIGN_OR_RETURN(double us, time_op(comm, kind, o, f.warmup, f.iters, f.blocking != 0));
  ZW_ASSIGN_OR_RETURN(double total_us, sum_over_ranks(comm, us));
  m.us = total_us / n;
  m.algbw = m.us > 0 ? s.size / (m.us * 1e3) : 0;  // bytes per ns = GB/s
  m.busbw = m.algbw * s.bus_factor;
  return m;
}

std::vector<size_t> sizes_of(const Flags& f) {
  int64_t lo = 0, hi = 0, step = 0;
  parse_bytes(f.min_bytes, &lo);
  parse_bytes(f.max_bytes, &hi);
  std::vector<size_t> out;
  if (!f.step_bytes.empty() && f.factor == 0 && parse_bytes(f.step_bytes, &step) && step > 0) {
    for (int64_t s = lo; s <= hi; s += step) out.push_back(static_cast<size_t>(s));
  } else {
    double factor = f.factor > 1 ? f.factor : 2;
    for (double s = static_cast<double>(std::max<int64_t>(lo, 1)); s <= hi; s *= factor) out.push_back(static_cast<size_t>(s));
  }
  return out;
}

const char* kind_name(CollKind kind) {
  return kind == CollKind::kAllGather ? "all_gather" : kind == CollKind::kReduceScatter ? "reduce_scatter" : "all_reduce";
}

void print_header(const Flags& f, Communicator& comm, CollKind kind) {
  std::printf(
      "# zerowire %s_perf: nranks %d transport %s minBytes %s maxBytes %s step: %g(factor) warmup iters: %d "
      "iters: %d validation: %d local_register: %d blocking: %d\n#\n",
      kind_name(kind), comm.size(), comm.transport_name(), f.min_bytes.c_str(), f.max_bytes.c_str(),
      f.factor > 1 ? f.factor : 2.0, f.warmup, f.iters, f.check, f.local_register, f.blocking);
  for (int r = 0; r < comm.size(); ++r) std::printf("#  Rank %2d %s\n", r, comm.describe_rank(r).c_str());
  std::printf("#\n%-60s%s\n", "#", "out-of-place                       in-place");
  std::printf("#%12s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%12s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

int run(Communicator& comm, CollKind kind, const Flags& f, const std::vector<DataType>& dtypes,
        const std::vector<ReduceOp>& ops) {
  const int n = comm.size(), r = comm.rank();
  const std::vector<size_t> sizes = sizes_of(f);
  size_t max_size = sizes.empty() ? 0 : sizes.back();
  size_t smallest_elem = SIZE_MAX;
  for (DataType dt : dtypes) smallest_elem = std::min(smallest_elem, dtype_size(dt));
  if (shape_of(kind, max_size, smallest_elem, n).count == 0) {  // every row would be empty: say so, fail
    if (r == 0)
      std::fprintf(stderr, "nothing to measure: -e %s is less than one element per rank (%d ranks x %zu bytes); "
                           "raise -e\n", f.max_bytes.c_str(), kind == CollKind::kAllReduce ? 1 : n, smallest_elem);
    return 2;
  }
  Arena in(max_size + 64, f.local_register != 0), out(max_size + 64, f.local_register != 0);
  if (!in.ptr || !out.ptr) {
    std::fprintf(stderr, "cannot allocate %zu bytes of benchmark buffers\n", max_size);
    return 1;
  }
  if (r == 0) print_header(f, comm, kind);
  double bw_sum = 0;
  int bw_count = 0;
  int64_t wrong_total = 0;
  for (DataType dt : dtypes) {
    for (ReduceOp op : ops) {
      if (kind != CollKind::kAllGather && !reduce_op_supported(dt, op)) continue;
      for (size_t size : sizes) {
        Shape s = shape_of(kind, size, dtype_size(dt), n);
        Measured m[2];
        for (int ip = 0; ip < 2; ++ip) {
          auto got = measure(comm, kind, s, options_for(kind, s, dt, op, ip == 1, in, out, r), f);
          if (!got.ok()) {
            std::fprintf(stderr, "rank %d: %s\n", r, got.status().to_string().c_str());
            return 1;
          }
          m[ip] = got.value();
        }
        wrong_total += m[0].wrong + m[1].wrong;
        bw_sum += m[0].busbw + m[1].busbw;
        bw_count += 2;
        if (r != 0) continue;
        std::printf(" %12zu %13zu %9s %7s %6s %8.2f %7.2f %7.2f %6s %8.2f %7.2f %7.2f %6s\n", s.size,
                    s.size / dtype_size(dt), dtype_name(dt), kind == CollKind::kAllGather ? "none" : reduce_op_name(op),
                    "-1", m[0].us, m[0].algbw, m[0].busbw, f.check ? std::to_string(m[0].wrong).c_str() : "N/A",
                    m[1].us, m[1].algbw, m[1].busbw, f.check ? std::to_string(m[1].wrong).c_str() : "N/A");
        std::fflush(stdout);
      }
    }
  }
  if (r == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total), wrong_total ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g \n#\n", bw_count ? bw_sum / bw_count : 0.0);
  }
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace

int run_collective_perf(int argc, char** argv, CollKind kind) {
  Flags f;
  CLI::App app{std::string("zerowire ") + kind_name(kind) + " benchmark (nccl-tests flags and columns)"};
  app.add_option("-b,--minbytes", f.min_bytes, "minimum size to start with (e.g. 8, 1K, 1M)");
  app.add_option("-e,--maxbytes", f.max_bytes, "maximum size to end at");
  app.add_option("-i,--stepbytes", f.step_bytes, "fixed increment between sizes");
  app.add_option("-f,--stepfactor", f.factor, "multiplication factor between sizes");
  app.add_option("-n,--iters", f.iters, "number of timed iterations")->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup_iters", f.warmup, "number of warm-up iterations")->check(CLI::NonNegativeNumber);
  app.add_option("-c,--check", f.check, "validate results before timing (0/1)");
  app.add_option("-d,--datatype", f.dtype, "float, half, bfloat16, double, int32, int64, uint8 or all");
  app.add_option("-o,--op", f.op, "sum, prod, min, max, avg or all");
  app.add_option("-r,--root", f.root, "root rank (unused by these collectives; accepted for nccl-tests parity)");
  app.add_option("-R,--local_register", f.local_register,
                 "1: allocate the buffers with zw::mem_alloc, which shm peers map and memcpy into (0/1)")
      ->check(CLI::Range(0, 1));
  app.add_option("-z,--blocking", f.blocking, "1: wait for each operation before issuing the next (0/1)")
      ->check(CLI::Range(0, 1));
  CLI11_PARSE(app, argc, argv);
  int64_t probe = 0;
  if (!parse_bytes(f.min_bytes, &probe) || !parse_bytes(f.max_bytes, &probe) ||
      (!f.step_bytes.empty() && !parse_bytes(f.step_bytes, &probe))) {
    std::fprintf(stderr, "sizes must be byte counts such as 8, 64K, 1M or 2G\n");
    return 2;
  }
  std::vector<DataType> dtypes;
  std::vector<ReduceOp> ops;
  for (int d = 0; d < kNumDataTypes; ++d)
    if (f.dtype == "all" || f.dtype == dtype_name(static_cast<DataType>(d))) dtypes.push_back(static_cast<DataType>(d));
  for (int o = 0; o < kNumReduceOps; ++o)
    if (f.op == "all" || f.op == reduce_op_name(static_cast<ReduceOp>(o))) ops.push_back(static_cast<ReduceOp>(o));
  if (dtypes.empty() || ops.empty()) {
    std::fprintf(stderr, "unknown -d '%s' or -o '%s' (see --help)\n", f.dtype.c_str(), f.op.c_str());
    return 2;
  }
  if (kind == CollKind::kAllGather) ops = {ReduceOp::kSum};
  int64_t lo = 0, hi = 0;
  parse_bytes(f.min_bytes, &lo);
  parse_bytes(f.max_bytes, &hi);
  if (lo > hi) {
    std::fprintf(stderr, "-b %s is above -e %s: the sweep runs from -b up to -e, so nothing would be measured\n",
                 f.min_bytes.c_str(), f.max_bytes.c_str());
    return 2;
  }
  bool any_pair = kind == CollKind::kAllGather;
  for (DataType dt : dtypes)
    for (ReduceOp op : ops) any_pair = any_pair || reduce_op_supported(dt, op);
  if (!any_pair) {
    std::fprintf(stderr, "-o %s is not defined for -d %s (e.g. avg needs a floating-point type): nothing to measure\n",
                 f.op.c_str(), f.dtype.c_str());
    return 2;
  }

  Result<std::unique_ptr<Communicator>> comm = Status(Code::kInternal, "unset");
  if (knobs().rank < 0 && !discover_rank_from_environment().ok()) {
    std::fprintf(stderr, "# no launcher found (run under zwrun -n N for several ranks): running as a single rank\n");
    comm = Communicator::create(make_memory_store(), 0, 1);
  } else {
    comm = Communicator::create_from_environment();
  }
  if (!comm.ok()) {
    std::fprintf(stderr, "cannot create the communicator: %s\n", comm.status().to_string().c_str());
    return 1;
  }
  return run(*comm.value(), kind, f, dtypes, ops);
}

}  // namespace zw::bench
