// bench/gpu/gpu_coll_perf.cc — zw_gpu_coll_perf: zerowire's device-memory collectives beside NCCL, one process
// per GPU, in one harness.
//
// Run under zwrun (zwrun -n 2 zw_gpu_coll_perf -t allgather -d bfloat16 -b 8K -e 1G -f 4); each rank drives GPU
// local_rank % visible GPUs. Both backends get the same buffers (allocated once at the largest size), stream,
// warm-up and timing: CUDA events around -n back-to-back operations, the mean per operation, averaged over ranks
// (nccl-tests' default); "enq" columns give the host's time to enqueue one operation. For every size the backends
// alternate A B A B ... for -R repetitions; the table shows the
// median time and busbw of each, the min–max busbw spread, and the busbw ratio zerowire/NCCL. Flags follow
// nccl-tests (-t -b -e -f -i -n -w -c -d -o); -c 1 validates every size once per backend on integer-valued data
// (exact in every summation order) before timing. busbw is nccl-tests': algbw × (n-1)/n for all-gather and
// reduce-scatter, × 2(n-1)/n for all-reduce. NCCL's communicator is made with ncclCommInitRank from a unique id
// broadcast through zerowire itself; without NCCL at build time only zerowire is measured.
// Non-goals: in-place columns (out-of-place only), multi-node runs, root-based collectives.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#if ZW_HAVE_NCCL
#include <nccl.h>
#endif

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/knobs.h"
#include "zerowire/bootstrap.h"
#include "zerowire/communicator.h"

namespace {

using namespace zw;  // NOLINT(google-build-using-namespace): benchmark program

enum class Kind { kAllGather, kReduceScatter, kAllReduce };

struct Flags {
  std::string test = "allgather", min_bytes = "8K", max_bytes = "1G", step_bytes, dtype = "bfloat16", op = "sum",
              backends = "zw,nccl";
  double factor = 0;
  int iters = 20, warmup = 5, check = 1, reps = 3;
};

struct Shape {
  size_t count, in_bytes, out_bytes, size;
  double bus_factor;
};

Shape shape_of(Kind kind, size_t size, size_t es, int n) {
  if (kind == Kind::kAllReduce) {
    size_t count = size / es;
    return {count, count * es, count * es, count * es, 2.0 * (n - 1) / n};
  }
  size_t count = size / (es * n), block = count * es, whole = block * n;
  if (kind == Kind::kAllGather) return {count, block, whole, whole, double(n - 1) / n};
  return {count, whole, block, whole, double(n - 1) / n};
}

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Integer-valued element i of rank r's input: exact in f32/bf16/f16 sums for these ranges.
float pattern(int r, size_t i) { return static_cast<float>((r + 1) + static_cast<int>(i % 13)); }

void fill_host(DataType dt, std::vector<uint8_t>* out, size_t count, int r, size_t first) {
  out->resize(count * dtype_size(dt));
  for (size_t i = 0; i < count; ++i) {
    float v = pattern(r, first + i);
    if (dt == DataType::kFloat32) {
      std::memcpy(out->data() + 4 * i, &v, 4);
    } else if (dt == DataType::kBFloat16) {
      __nv_bfloat16 h = __float2bfloat16(v);
      std::memcpy(out->data() + 2 * i, &h, 2);
    } else {
      __half h = __float2half(v);
      std::memcpy(out->data() + 2 * i, &h, 2);
    }
  }
}

float to_float(DataType dt, const uint8_t* p) {
  if (dt == DataType::kFloat32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  if (dt == DataType::kBFloat16) {
    uint32_t w = static_cast<uint32_t>(bits) << 16;
    float v;
    std::memcpy(&v, &w, 4);
    return v;
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

struct Ctx {
  Kind kind;
  DataType dt;
  int rank, n, device;
  Communicator* comm;
  cudaStream_t stream;
  uint8_t *in, *out;
  cudaEvent_t start, stop;
#if ZW_HAVE_NCCL
  ncclComm_t nccl = nullptr;
#endif
};

// Enqueues one operation of `backend` (0: zerowire, 1: NCCL).
bool enqueue(Ctx& c, int backend, const Shape& s) {
  if (backend == 0) {
    CollectiveOptions o;
    o.input = MemRef{c.in, s.in_bytes, MemKind::kCudaDevice, c.device};
    o.output = MemRef{c.out, s.out_bytes, MemKind::kCudaDevice, c.device};
    o.count = s.count;
    o.dtype = c.dt;
    o.op = ReduceOp::kSum;
    o.stream = c.stream;
    Result<Work> w = c.kind == Kind::kAllGather       ? all_gather(*c.comm, o)
                     : c.kind == Kind::kReduceScatter ? reduce_scatter(*c.comm, o)
                                                      : all_reduce(*c.comm, o);
    if (!w.ok()) std::fprintf(stderr, "rank %d: %s\n", c.rank, w.status().to_string().c_str());
    return w.ok();
  }
#if ZW_HAVE_NCCL
  ncclDataType_t t = c.dt == DataType::kFloat32 ? ncclFloat32 : c.dt == DataType::kBFloat16 ? ncclBfloat16 : ncclFloat16;
  ncclResult_t r = c.kind == Kind::kAllGather ? ncclAllGather(c.in, c.out, s.count, t, c.nccl, c.stream)
                   : c.kind == Kind::kReduceScatter ? ncclReduceScatter(c.in, c.out, s.count, t, ncclSum, c.nccl, c.stream)
                                                    : ncclAllReduce(c.in, c.out, s.count, t, ncclSum, c.nccl, c.stream);
  if (r != ncclSuccess) std::fprintf(stderr, "rank %d: NCCL: %s\n", c.rank, ncclGetErrorString(r));
  return r == ncclSuccess;
#else
  return false;
#endif
}

// Elements of the output that differ from the expected integer sums.
long validate(Ctx& c, int backend, const Shape& s) {
  std::vector<uint8_t> host;
  fill_host(c.dt, &host, c.kind == Kind::kReduceScatter ? s.count * c.n : s.count, c.rank, 0);
  // On the benchmark's (non-blocking) stream: a copy or memset on the legacy stream is not ordered with it, and
  // could land after a peer already wrote into this rank's output.
  if (!cuda_ok(cudaMemcpyAsync(c.in, host.data(), host.size(), cudaMemcpyHostToDevice, c.stream), "upload")) return -1;
  if (!cuda_ok(cudaMemsetAsync(c.out, 0xA5, s.out_bytes, c.stream), "poison")) return -1;
  if (!enqueue(c, backend, s) || !cuda_ok(cudaStreamSynchronize(c.stream), "sync")) return -1;
  std::vector<uint8_t> got(s.out_bytes);
  if (!cuda_ok(cudaMemcpyAsync(got.data(), c.out, got.size(), cudaMemcpyDeviceToHost, c.stream), "download") ||
      !cuda_ok(cudaStreamSynchronize(c.stream), "sync"))
    return -1;
  const size_t es = dtype_size(c.dt), elems = s.out_bytes / es;
  long wrong = 0;
  for (size_t i = 0; i < elems; ++i) {
    double want = 0;
    if (c.kind == Kind::kAllGather) {
      want = pattern(static_cast<int>(i / s.count), i % s.count);
    } else {
      size_t at = c.kind == Kind::kReduceScatter ? c.rank * s.count + i : i;
      for (int p = 0; p < c.n; ++p) want += pattern(p, at);
    }
    if (to_float(c.dt, got.data() + i * es) != static_cast<float>(want)) ++wrong;
  }
  return wrong;
}

// Mean microseconds per operation over `iters`, averaged over ranks. *host_us: the host's time to enqueue one.
double time_us(Ctx& c, int backend, const Shape& s, int iters, double* host_us = nullptr) {
  cudaEventRecord(c.start, c.stream);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    if (!enqueue(c, backend, s)) return NAN;
  if (host_us) *host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  cudaEventRecord(c.stop, c.stream);
  cudaEventSynchronize(c.stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, c.start, c.stop);
  double us = 1000.0 * ms / iters;
  CollectiveOptions o;
  o.input = o.output = MemRef::host(&us, sizeof us);
  o.count = 1;
  o.dtype = DataType::kFloat64;
  o.op = ReduceOp::kAvg;
  auto w = all_reduce(*c.comm, o);
  if (!w.ok() || !w.value().wait().ok()) return NAN;
  return us;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int run(const Flags& f) {
  auto info = discover_rank_from_environment();
  auto comm = Communicator::create_from_environment();
  if (!comm.ok()) {
    std::fprintf(stderr, "zw_gpu_coll_perf: %s\n", comm.status().to_string().c_str());
    return 1;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "zw_gpu_coll_perf: no CUDA device\n");
    return 77;
  }
  Ctx c{};
  c.kind = f.test == "allgather" ? Kind::kAllGather : f.test == "reducescatter" ? Kind::kReduceScatter : Kind::kAllReduce;
  auto dt = parse_dtype(f.dtype);
  if (!dt.ok() || (dt.value() != DataType::kFloat32 && dt.value() != DataType::kBFloat16 &&
                   dt.value() != DataType::kFloat16)) {
    std::fprintf(stderr, "zw_gpu_coll_perf: -d must be float, bfloat16 or half\n");
    return 2;
  }
  c.dt = dt.value();
  c.comm = comm.value().get();
  c.rank = c.comm->rank();
  c.n = c.comm->size();
  c.device = (info.ok() ? info.value().local_rank : c.rank) % ndev;
  cudaSetDevice(c.device);
  cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking);
  cudaEventCreate(&c.start);
  cudaEventCreate(&c.stop);
  int64_t lo = 0, hi = 0, step = 0;
  if (!parse_bytes(f.min_bytes, &lo) || !parse_bytes(f.max_bytes, &hi) ||
      (!f.step_bytes.empty() && !parse_bytes(f.step_bytes, &step))) {
    std::fprintf(stderr, "zw_gpu_coll_perf: bad -b/-e/-i size\n");
    return 2;
  }
  const size_t es = dtype_size(c.dt);
  if (!cuda_ok(cudaMalloc(&c.in, hi + 64), "cudaMalloc") || !cuda_ok(cudaMalloc(&c.out, hi + 64), "cudaMalloc")) return 1;
  std::vector<int> backends;
  if (f.backends.find("zw") != std::string::npos) backends.push_back(0);
#if ZW_HAVE_NCCL
  if (f.backends.find("nccl") != std::string::npos) {
    ncclUniqueId id{};
    if (c.rank == 0) ncclGetUniqueId(&id);
    CollectiveOptions o;
    o.input = o.output = MemRef::host(&id, sizeof id);
    o.count = sizeof id;
    o.dtype = DataType::kUInt8;
    auto w = broadcast(*c.comm, o);
    if (!w.ok() || !w.value().wait().ok() || ncclCommInitRank(&c.nccl, c.n, id, c.rank) != ncclSuccess) {
      std::fprintf(stderr, "zw_gpu_coll_perf: NCCL initialisation failed\n");
      return 1;
    }
    backends.push_back(1);
  }
#endif
  if (c.rank == 0) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, c.device);
    std::printf("# zw_gpu_coll_perf: %s, %d ranks, %s, %s, %d reps x %d iters (A B A B, medians)\n", f.test.c_str(),
                c.n, prop.name, f.dtype.c_str(), f.reps, f.iters);
    std::printf("#%11s %12s %8s %6s | %10s %9s %13s %6s | %10s %9s %13s %6s | %7s | %7s %7s\n", "size", "count", "type",
                "redop", "zw us", "busbw", "min-max", "#wrong", "nccl us", "busbw", "min-max", "#wrong", "zw/nccl",
                "zw enq", "nccl enq");
  }
  int status = 0;
  for (int64_t size = std::max<int64_t>(lo, 1); size <= hi;) {
    Shape s = shape_of(c.kind, static_cast<size_t>(size), es, c.n);
    double med_us[2] = {NAN, NAN}, med_bw[2] = {NAN, NAN}, min_bw[2] = {NAN, NAN}, max_bw[2] = {NAN, NAN};
    long wrong[2] = {-1, -1};
    std::vector<double> us[2], host[2];
    for (int b : backends) {
      wrong[b] = f.check ? validate(c, b, s) : 0;
      if (wrong[b] != 0) {
        status = 1;
        std::fprintf(stderr, "rank %d: %s size %zu: %ld wrong elements\n", c.rank, b == 0 ? "zerowire" : "NCCL", s.size,
                     wrong[b]);
      }
      time_us(c, b, s, f.warmup);
    }
    for (int rep = 0; rep < f.reps; ++rep)
      for (int b : backends) {
        double h = 0;
        us[b].push_back(time_us(c, b, s, f.iters, &h));
        host[b].push_back(h);
      }
    for (int b : backends) {
      med_us[b] = median(us[b]);
      auto bw = [&](double t) { return static_cast<double>(s.size) / (t * 1e3) * s.bus_factor; };
      med_bw[b] = bw(med_us[b]);
      min_bw[b] = bw(*std::max_element(us[b].begin(), us[b].end()));
      max_bw[b] = bw(*std::min_element(us[b].begin(), us[b].end()));
    }
    if (c.rank == 0)
      std::printf("%12zu %12zu %8s %6s | %10.2f %9.2f %6.1f-%-6.1f %6ld | %10.2f %9.2f %6.1f-%-6.1f %6ld | %7.3f | %7.2f %7.2f\n",
                  s.size, s.count, f.dtype.c_str(), "sum", med_us[0], med_bw[0], min_bw[0], max_bw[0], wrong[0],
                  med_us[1], med_bw[1], min_bw[1], max_bw[1], wrong[1], med_bw[0] / med_bw[1], median(host[0]),
                  median(host[1]));
    std::fflush(stdout);
    if (size == hi) break;
    size = step > 0 ? size + step : static_cast<int64_t>(size * (f.factor > 1 ? f.factor : 2));
    if (size > hi) size = hi;
  }
#if ZW_HAVE_NCCL
  if (c.nccl) ncclCommDestroy(c.nccl);
#endif
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"zw_gpu_coll_perf: zerowire's device-memory collectives beside NCCL (nccl-tests flags)"};
  app.add_option("-t,--test", f.test, "allgather | reducescatter | allreduce")
      ->check(CLI::IsMember({"allgather", "reducescatter", "allreduce"}));
  app.add_option("-b,--minbytes", f.min_bytes, "smallest size (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", f.max_bytes, "largest size");
  app.add_option("-f,--stepfactor", f.factor, "multiply the size by this each step");
  app.add_option("-i,--stepbytes", f.step_bytes, "add this to the size each step");
  app.add_option("-n,--iters", f.iters, "timed iterations per repetition");
  app.add_option("-w,--warmup_iters", f.warmup, "warm-up iterations");
  app.add_option("-c,--check", f.check, "validate every size once per backend (0/1)");
  app.add_option("-d,--datatype", f.dtype, "float | bfloat16 | half");
  app.add_option("-o,--op", f.op, "sum (the only one timed)")->check(CLI::IsMember({"sum"}));
  app.add_option("-R,--reps", f.reps, "repetitions per backend, interleaved");
  app.add_option("--backends", f.backends, "zw,nccl (default both) or one of them");
  CLI11_PARSE(app, argc, argv);
  return run(f);
}
