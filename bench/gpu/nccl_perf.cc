// bench/gpu/nccl_perf.cc — zw_nccl_perf: the NCCL anchor for zerowire's GPU collectives, in coll_perf's columns.
//
// One process drives every visible GPU (or the first -g): communicators from ncclCommInitAll, one stream per
// GPU, each collective issued for all GPUs inside ncclGroupStart/End. -t allgather | reducescatter | allreduce call
// ncclAllGather / ncclReduceScatter / ncclAllReduce on device buffers allocated once at the largest size; -t
// peercopy is the physical reference: every GPU pushes its shard to every peer with cudaMemcpyPeerAsync (copy
// engines over NVLink, no synchronization but the final events), with all-gather's sizes and busbw (bytes moved
// per GPU / time). Flags (-b -e -i -f -n -w -c -d -o -r) and columns are coll_perf's (bench/coll_perf.h): size,
// count, type, redop, root, then out-of-place and in-place time (us), algbw, busbw (GB/s) and #wrong. Each size
// is validated once before timing (-c 1) on integer-valued data; time is the mean of -n iterations after -w
// warm-ups measured with CUDA events on each GPU's stream, averaged over GPUs. busbw as nccl-tests: algbw x
// (n-1)/n for all-gather, reduce-scatter and peer copy, x 2(n-1)/n for all-reduce. Non-goals: multi-process or
// multi-node runs (use nccl-tests for those), ops beyond the three collectives.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/knobs.h"

namespace {

enum class Kind { kAllGather, kReduceScatter, kAllReduce, kPeerCopy };
enum class Dtype { kFloat, kBFloat16, kHalf };

struct Flags {
  std::string test = "allreduce", min_bytes = "32M", max_bytes = "32M", step_bytes, dtype = "float", op = "sum";
  double factor = 0;
  int iters = 20, warmup = 5, check = 1, root = 0, ngpus = 0;
};

// One size's geometry, as coll_perf's Shape.
struct Shape {
  size_t count, in_bytes, out_bytes, size;
  double bus_factor;
};

struct Gpu {
  int dev = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  uint8_t *in = nullptr, *out = nullptr;
};

struct Run {
  Kind kind;
  Dtype dt;
  ncclRedOp_t op;
  std::string op_name;
  int n;
  std::vector<Gpu> gpus;
};

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}
bool nccl_ok(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, ncclGetErrorString(r));
  return false;
}

size_t dtype_bytes(Dtype d) { return d == Dtype::kFloat ? 4 : 2; }
const char* dtype_name(Dtype d) { return d == Dtype::kFloat ? "float" : d == Dtype::kBFloat16 ? "bfloat16" : "half"; }
ncclDataType_t nccl_dtype(Dtype d) {
  return d == Dtype::kFloat ? ncclFloat32 : d == Dtype::kBFloat16 ? ncclBfloat16 : ncclFloat16;
}

Shape shape_of(Kind kind, size_t size, size_t es, int n) {
  if (kind == Kind::kAllReduce) {
    const size_t count = size / es;
    return {count, count * es, count * es, count * es, 2.0 * (n - 1) / n};
  }
  const size_t count = size / (es * n), whole = count * es * n, block = count * es;
  if (kind == Kind::kReduceScatter) return {count, whole, block, whole, double(n - 1) / n};
  return {count, block, whole, whole, double(n - 1) / n};
}

// Integer-valued input of rank r at vector index i: exact in every dtype, and so are sums of a few ranks.
double input_value(int r, size_t i) { return double(int((i * 7 + size_t(r) * 13) % 17) - 8); }

double expected_reduced(const Run& run, size_t i) {
  double acc = input_value(0, i);
  for (int r = 1; r < run.n; ++r) {
    const double v = input_value(r, i);
    if (run.op == ncclProd)
      acc *= v;
    else if (run.op == ncclMin)
      acc = std::min(acc, v);
    else if (run.op == ncclMax)
      acc = std::max(acc, v);
    else
      acc += v;
  }
  return run.op == ncclAvg ? acc / run.n : acc;
}

void store(Dtype d, uint8_t* p, size_t i, double v) {
  if (d == Dtype::kFloat) {
    const float f = float(v);
    std::memcpy(p + 4 * i, &f, 4);
  } else {
    const uint16_t h = d == Dtype::kHalf ? __half_as_ushort(__float2half_rn(float(v)))
                                         : __bfloat16_as_ushort(__float2bfloat16_rn(float(v)));
    std::memcpy(p + 2 * i, &h, 2);
  }
}

double load(Dtype d, const uint8_t* p, size_t i) {
  if (d == Dtype::kFloat) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return d == Dtype::kHalf ? double(__half2float(__ushort_as_half(h)))
                           : double(__bfloat162float(__ushort_as_bfloat16(h)));
}

// Runs fn(begin, end) over [0, n) on up to 16 threads.
template <class Fn>
void parallel_for(size_t n, Fn fn) {
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  const size_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (size_t b = 0; b < n; b += chunk) pool.emplace_back(fn, b, std::min(n, b + chunk));
  for (auto& t : pool) t.join();
}

// Send and receive pointers of GPU g for one placement, following nccl-tests' in-place layouts.
void buffers_of(const Run& run, const Shape& s, int g, bool in_place, uint8_t** send, uint8_t** recv) {
  const Gpu& gpu = run.gpus[g];
  const size_t block = s.count * dtype_bytes(run.dt);
  *send = gpu.in;
  *recv = gpu.out;
  if (!in_place) return;
  if (run.kind == Kind::kAllGather || run.kind == Kind::kPeerCopy) *send = gpu.out + g * block;
  if (run.kind == Kind::kReduceScatter) {
    *send = gpu.out;
    *recv = gpu.out + g * block;
  }
  if (run.kind == Kind::kAllReduce) *send = gpu.out;
}

// Issues one operation on every GPU (stream-ordered, no host synchronization).
bool issue(const Run& run, const Shape& s, bool in_place) {
  const size_t block = s.count * dtype_bytes(run.dt);
  if (run.kind == Kind::kPeerCopy) {
    for (int g = 0; g < run.n; ++g) {
      uint8_t *src, *unused;
      buffers_of(run, s, g, in_place, &src, &unused);
      cudaSetDevice(run.gpus[g].dev);
      for (int k = 1; k < run.n; ++k) {
        const Gpu& peer = run.gpus[(g + k) % run.n];
        if (!cuda_ok(
                cudaMemcpyPeerAsync(peer.out + g * block, peer.dev, src, run.gpus[g].dev, block, run.gpus[g].stream),
                "cudaMemcpyPeerAsync"))
          return false;
      }
    }
    return true;
  }
  if (!nccl_ok(ncclGroupStart(), "ncclGroupStart")) return false;
  for (int g = 0; g < run.n; ++g) {
    uint8_t *send, *recv;
    buffers_of(run, s, g, in_place, &send, &recv);
    const Gpu& gpu = run.gpus[g];
    ncclResult_t r = ncclSuccess;
    if (run.kind == Kind::kAllGather) r = ncclAllGather(send, recv, s.count, nccl_dtype(run.dt), gpu.comm, gpu.stream);
    if (run.kind == Kind::kReduceScatter)
      r = ncclReduceScatter(send, recv, s.count, nccl_dtype(run.dt), run.op, gpu.comm, gpu.stream);
    if (run.kind == Kind::kAllReduce)
      r = ncclAllReduce(send, recv, s.count, nccl_dtype(run.dt), run.op, gpu.comm, gpu.stream);
    if (!nccl_ok(r, "collective")) return false;
  }
  return nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
}

bool sync_all(const Run& run) {
  for (const Gpu& g : run.gpus)
    if (!cuda_ok(cudaStreamSynchronize(g.stream), "cudaStreamSynchronize")) return false;
  return true;
}

// Expected element i of GPU g's output region.
double expected(const Run& run, const Shape& s, int g, size_t i) {
  if (run.kind == Kind::kAllGather || run.kind == Kind::kPeerCopy) return input_value(int(i / s.count), i);
  return expected_reduced(run, run.kind == Kind::kReduceScatter ? g * s.count + i : i);
}

// Fills the inputs, runs once and counts wrong output elements over all GPUs (-1 on a CUDA/NCCL error).
int64_t validate(const Run& run, const Shape& s, bool in_place, std::vector<uint8_t>& host) {
  const size_t es = dtype_bytes(run.dt), block = s.count * es;
  for (int g = 0; g < run.n; ++g) {
    uint8_t *send, *recv;
    buffers_of(run, s, g, in_place, &send, &recv);
    cudaSetDevice(run.gpus[g].dev);
    if (!cuda_ok(cudaMemset(run.gpus[g].out, 0xA5, s.out_bytes), "cudaMemset")) return -1;
    const size_t first = (run.kind == Kind::kAllGather || run.kind == Kind::kPeerCopy) ? g * s.count : 0;
    parallel_for(s.in_bytes / es, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) store(run.dt, host.data(), i, input_value(g, first + i));
    });
    if (!cuda_ok(cudaMemcpy(send, host.data(), s.in_bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D") ||
        !cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
      return -1;
  }
  if (!issue(run, s, in_place) || !sync_all(run)) return -1;
  int64_t wrong = 0;
  const double tol = run.dt == Dtype::kFloat ? 1e-6 : run.dt == Dtype::kHalf ? 1e-3 : 1e-2;
  for (int g = 0; g < run.n; ++g) {
    uint8_t *send, *recv;
    buffers_of(run, s, g, in_place, &send, &recv);
    const size_t out_bytes = run.kind == Kind::kReduceScatter ? block : s.out_bytes;
    if (!cuda_ok(cudaMemcpy(host.data(), recv, out_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H")) return -1;
    std::atomic<int64_t> bad{0};
    parallel_for(out_bytes / es, [&](size_t b, size_t e) {
      int64_t local = 0;
      for (size_t i = b; i < e; ++i) {
        if (run.kind == Kind::kPeerCopy && !in_place && i / s.count == size_t(g)) continue;  // own slot: not copied
        const double want = expected(run, s, g, i);
        if (std::abs(load(run.dt, host.data(), i) - want) > tol * std::max(1.0, std::abs(want))) ++local;
      }
      bad += local;
    });
    wrong += bad.load();
  }
  return wrong;
}

// Mean microseconds per operation, averaged over GPUs; negative on an error.
double time_us(const Run& run, const Shape& s, bool in_place, const Flags& f) {
  for (int i = 0; i < f.warmup; ++i)
    if (!issue(run, s, in_place)) return -1;
  if (!sync_all(run)) return -1;
  for (const Gpu& g : run.gpus) {
    cudaSetDevice(g.dev);
    cudaEventRecord(g.start, g.stream);
  }
  for (int i = 0; i < f.iters; ++i)
    if (!issue(run, s, in_place)) return -1;
  for (const Gpu& g : run.gpus) {
    cudaSetDevice(g.dev);
    cudaEventRecord(g.stop, g.stream);
  }
  double total = 0;
  for (const Gpu& g : run.gpus) {
    float ms = 0;
    if (!cuda_ok(cudaEventSynchronize(g.stop), "cudaEventSynchronize") ||
        !cuda_ok(cudaEventElapsedTime(&ms, g.start, g.stop), "cudaEventElapsedTime"))
      return -1;
    total += ms * 1e3 / f.iters;
  }
  return total / run.n;
}

std::vector<size_t> sizes_of(const Flags& f) {
  int64_t lo = 0, hi = 0, step = 0;
  zw::parse_bytes(f.min_bytes, &lo);
  zw::parse_bytes(f.max_bytes, &hi);
  std::vector<size_t> out;
  if (!f.step_bytes.empty() && f.factor == 0 && zw::parse_bytes(f.step_bytes, &step) && step > 0) {
    for (int64_t s = lo; s <= hi; s += step) out.push_back(size_t(s));
  } else {
    const double factor = f.factor > 1 ? f.factor : 2;
    for (double s = double(std::max<int64_t>(lo, 1)); s <= double(hi); s *= factor) out.push_back(size_t(s));
  }
  return out;
}

bool setup(Run& run, size_t max_bytes) {
  std::vector<int> devs(run.n);
  std::vector<ncclComm_t> comms(run.n);
  for (int g = 0; g < run.n; ++g) devs[g] = g;
  if (run.kind != Kind::kPeerCopy && !nccl_ok(ncclCommInitAll(comms.data(), run.n, devs.data()), "ncclCommInitAll"))
    return false;
  run.gpus.resize(run.n);
  for (int g = 0; g < run.n; ++g) {
    Gpu& gpu = run.gpus[g];
    gpu.dev = g;
    gpu.comm = comms[g];
    if (!cuda_ok(cudaSetDevice(g), "cudaSetDevice") ||
        !cuda_ok(cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !cuda_ok(cudaEventCreate(&gpu.start), "cudaEventCreate") ||
        !cuda_ok(cudaEventCreate(&gpu.stop), "cudaEventCreate") ||
        !cuda_ok(cudaMalloc(&gpu.in, max_bytes + 64), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&gpu.out, max_bytes + 64), "cudaMalloc"))
      return false;
    for (int p = 0; p < run.n && run.kind == Kind::kPeerCopy; ++p) {
      if (p == g) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) return cuda_ok(e, "cudaDeviceEnablePeerAccess");
      cudaGetLastError();
    }
  }
  return true;
}

void teardown(Run& run) {
  for (Gpu& g : run.gpus) {
    cudaSetDevice(g.dev);
    if (g.comm) ncclCommDestroy(g.comm);
    cudaFree(g.in);
    cudaFree(g.out);
    cudaEventDestroy(g.start);
    cudaEventDestroy(g.stop);
    cudaStreamDestroy(g.stream);
  }
}

void print_header(const Run& run, const Flags& f) {
  int version = 0;
  ncclGetVersion(&version);
  std::printf(
      "# zerowire nccl_perf -t %s: nranks %d transport nccl-%d minBytes %s maxBytes %s step: %g(factor) "
      "warmup iters: %d iters: %d validation: %d\n#\n",
      f.test.c_str(), run.n, version, f.min_bytes.c_str(), f.max_bytes.c_str(), f.factor > 1 ? f.factor : 2.0, f.warmup,
      f.iters, f.check);
  for (const Gpu& g : run.gpus) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, g.dev);
    std::printf("#  Rank %2d device %d [%04x:%02x:%02x] %s\n", g.dev, g.dev, p.pciDomainID, p.pciBusID, p.pciDeviceID,
                p.name);
  }
  std::printf("#\n%-60s%s\n", "#", "out-of-place                       in-place");
  std::printf("#%12s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%12s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

struct Measured {
  double us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
};

int run_sizes(Run& run, const Flags& f, const std::vector<size_t>& sizes) {
  std::vector<uint8_t> host(f.check ? sizes.back() + 64 : 0);
  double bw_sum = 0;
  int64_t wrong_total = 0;
  for (size_t size : sizes) {
    const Shape s = shape_of(run.kind, size, dtype_bytes(run.dt), run.n);
    if (s.count == 0) continue;
    Measured m[2];
    for (int ip = 0; ip < 2; ++ip) {
      if (f.check && (m[ip].wrong = validate(run, s, ip == 1, host)) < 0) return 1;
      m[ip].us = time_us(run, s, ip == 1, f);
      if (m[ip].us < 0) return 1;
      m[ip].algbw = s.size / (m[ip].us * 1e3);
      m[ip].busbw = m[ip].algbw * s.bus_factor;
      wrong_total += m[ip].wrong;
      bw_sum += m[ip].busbw;
    }
    const char* redop = run.kind == Kind::kAllGather || run.kind == Kind::kPeerCopy ? "none" : run.op_name.c_str();
    std::printf(" %12zu %13zu %9s %7s %6s %8.2f %7.2f %7.2f %6s %8.2f %7.2f %7.2f %6s\n", s.size,
                s.size / dtype_bytes(run.dt), dtype_name(run.dt), redop, "-1", m[0].us, m[0].algbw, m[0].busbw,
                f.check ? std::to_string(m[0].wrong).c_str() : "N/A", m[1].us, m[1].algbw, m[1].busbw,
                f.check ? std::to_string(m[1].wrong).c_str() : "N/A");
    std::fflush(stdout);
  }
  std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total), wrong_total ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g \n#\n", sizes.empty() ? 0.0 : bw_sum / (2.0 * sizes.size()));
  return wrong_total == 0 ? 0 : 1;
}

bool parse_run(const Flags& f, Run* run) {
  const std::string& t = f.test;
  if (t == "allgather")
    run->kind = Kind::kAllGather;
  else if (t == "reducescatter")
    run->kind = Kind::kReduceScatter;
  else if (t == "allreduce")
    run->kind = Kind::kAllReduce;
  else if (t == "peercopy")
    run->kind = Kind::kPeerCopy;
  else
    return false;
  if (f.dtype == "float")
    run->dt = Dtype::kFloat;
  else if (f.dtype == "bfloat16")
    run->dt = Dtype::kBFloat16;
  else if (f.dtype == "half")
    run->dt = Dtype::kHalf;
  else
    return false;
  const std::pair<const char*, ncclRedOp_t> ops[] = {
      {"sum", ncclSum}, {"prod", ncclProd}, {"min", ncclMin}, {"max", ncclMax}, {"avg", ncclAvg}};
  for (const auto& [name, op] : ops)
    if (f.op == name) {
      run->op = op;
      run->op_name = name;
      return true;
    }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"zerowire NCCL anchor benchmark (coll_perf flags and columns, single process, all GPUs)"};
  app.add_option("-t,--test", f.test, "allgather, reducescatter, allreduce or peercopy");
  app.add_option("-b,--minbytes", f.min_bytes, "minimum size to start with (e.g. 8, 1K, 1M)");
  app.add_option("-e,--maxbytes", f.max_bytes, "maximum size to end at");
  app.add_option("-i,--stepbytes", f.step_bytes, "fixed increment between sizes");
  app.add_option("-f,--stepfactor", f.factor, "multiplication factor between sizes");
  app.add_option("-n,--iters", f.iters, "number of timed iterations")->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup_iters", f.warmup, "number of warm-up iterations")->check(CLI::NonNegativeNumber);
  app.add_option("-c,--check", f.check, "validate results before timing (0/1)");
  app.add_option("-d,--datatype", f.dtype, "float, bfloat16 or half");
  app.add_option("-o,--op", f.op, "sum, prod, min, max or avg");
  app.add_option("-r,--root", f.root, "root rank (unused; accepted for nccl-tests parity)");
  app.add_option("-g,--ngpus", f.ngpus, "GPUs to use (default: all visible)");
  CLI11_PARSE(app, argc, argv);
  int64_t probe = 0;
  if (!zw::parse_bytes(f.min_bytes, &probe) || !zw::parse_bytes(f.max_bytes, &probe) ||
      (!f.step_bytes.empty() && !zw::parse_bytes(f.step_bytes, &probe))) {
    std::fprintf(stderr, "sizes must be byte counts such as 8, 64K, 1M or 2G\n");
    return 2;
  }
  Run run{};
  if (!parse_run(f, &run)) {
    std::fprintf(stderr, "unknown -t '%s', -d '%s' or -o '%s' (see --help)\n", f.test.c_str(), f.dtype.c_str(),
                 f.op.c_str());
    return 2;
  }
  int visible = 0;
  if (!cuda_ok(cudaGetDeviceCount(&visible), "cudaGetDeviceCount") || visible < 1) return 1;
  run.n = f.ngpus > 0 ? std::min(f.ngpus, visible) : visible;
  const std::vector<size_t> sizes = sizes_of(f);
  if (sizes.empty()) return 0;
  if (!setup(run, sizes.back())) return 1;
  print_header(run, f);
  const int rc = run_sizes(run, f, sizes);
  teardown(run);
  return rc;
}
