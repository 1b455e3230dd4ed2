// bench/cpu_adam/offload_bench.cc — zw_offload_bench: how much of the gradient/weight copy time the offload
// pipeline (zero/offload/offload_pipeline.h) hides behind the CPU Adam update.
//
// Purpose: for N parameters (default 100M) with the gradient and the 16-bit weights in device memory, time one
// optimizer step (median of --reps) four ways:
//   update   the fused host path, host f32 gradient and host 16-bit weights (no copies): the CPU work alone
//   copies   the same tile copies alone, one after another on one stream: every gradient tile down, every weight
//            tile up (what the pipeline has to hide)
//   serial   the tiled path with OffloadPipelineOptions::serialize: copy down, update, copy up, tile by tile
//   pipelined the tiled path, double (or --buffers) buffered
// and print the fraction of the copy time the pipeline hides, 1 − max(0, pipelined − update) / copies (100%: the
// pipelined step costs no more than the update alone), and each step's cost over the update alone. Before timing,
// a 2M + 12345-element shard with padding gaps is stepped twice by the pipelined and the serial path and compared bit
// for bit with the host path (master, m, v, the device weights); a mismatch exits 1. Exit 77 without a CUDA device.
// Non-goals: Google Benchmark (a step is one long operation; medians of whole steps matter), multiple GPUs.
//
// Usage: zw_offload_bench [--params N] [--tile N] [--buffers B] [--grad bf16|fp16|fp32] [--weights bf16|fp16]
//                         [--threads T] [--reps R] [--sub-group N]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/element.h"
#include "zero/offload/offload_pipeline.h"
#include "zero/optim/pinned_buffer.h"

namespace {

using namespace zw;        // NOLINT(google-build-using-namespace): benchmark shorthand
using namespace zw::zero;  // NOLINT(google-build-using-namespace)

struct Options {
  int64_t params = 100'000'000;
  int64_t tile = int64_t{1} << 22;
  int buffers = 2;
  DataType grad = DataType::kBFloat16;
  DataType weights = DataType::kBFloat16;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  int reps = 5;
  int64_t sub_group = 1'000'000'000;
};

[[noreturn]] void die(const std::string& what, int code = 1) {
  std::fprintf(stderr, "zw_offload_bench: %s\n", what.c_str());
  std::exit(code);
}
void check(const Status& st) {
  if (!st.ok()) die(st.to_string());
}
void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// A shard: host master/m/v (+ host f32 gradient and 16-bit weights for the host path), device gradient and weights.
struct Shard {
  int64_t n;
  DataType gd, wd;
  PinnedBuffer master, m, v, grad32, w16;
  void* dgrad = nullptr;
  void* dw16 = nullptr;
  Shard(int64_t count, DataType g, DataType w) : n(count), gd(g), wd(w) {
    for (PinnedBuffer* b : {&master, &m, &v, &grad32}) *b = take(alloc_pinned_hugepage(size_t(n) * 4));
    w16 = take(alloc_pinned_hugepage(size_t(n) * 2));
    cuda(cudaMalloc(&dgrad, size_t(n) * dtype_size(gd)), "cudaMalloc(gradient)");
    cuda(cudaMalloc(&dw16, size_t(n) * 2), "cudaMalloc(weights)");
    std::vector<uint16_t> g16(static_cast<size_t>(count));
    for (int64_t i = 0; i < n; ++i) {
      const float x = float((uint64_t(i) * 2654435761u) % 1000003u) * 1e-6f - 0.5f;
      master.as<float>()[i] = x;
      grad32.as<float>()[i] = x * 2e-2f;
      if (gd == DataType::kBFloat16) {  // the device gradient is 16-bit: the host one is its exact widening
        g16[size_t(i)] = kernels::f32_to_bf16(x * 2e-2f);
        grad32.as<float>()[i] = kernels::bf16_to_f32(g16[size_t(i)]);
      } else if (gd == DataType::kFloat16) {
        g16[size_t(i)] = kernels::f32_to_f16(x * 2e-2f);
        grad32.as<float>()[i] = kernels::f16_to_f32(g16[size_t(i)]);
      }
    }
    const void* src = gd == DataType::kFloat32 ? static_cast<const void*>(grad32.data()) : g16.data();
    cuda(cudaMemcpy(dgrad, src, size_t(n) * dtype_size(gd), cudaMemcpyHostToDevice), "cudaMemcpy(gradient)");
    cuda(cudaMemset(dw16, 0, size_t(n) * 2), "cudaMemset(weights)");
  }
  ~Shard() {
    cudaFree(dgrad);
    cudaFree(dw16);
  }
  static PinnedBuffer take(Result<PinnedBuffer> r) {
    if (!r.ok()) die(r.status().to_string());
    return std::move(r.value());
  }
  OptimizerShard host_view() {
    OptimizerShard s{n,
                     master.as<float>(),
                     m.as<float>(),
                     v.as<float>(),
                     MemRef::host(grad32.data(), size_t(n) * 4),
                     DataType::kFloat32,
                     MemRef::host(w16.data(), size_t(n) * 2),
                     wd};
    return s;
  }
  OptimizerShard device_view() {
    OptimizerShard s = host_view();
    s.grad = MemRef{dgrad, size_t(n) * dtype_size(gd), MemKind::kCudaDevice, 0};
    s.grad_dtype = gd;
    s.weights16 = MemRef{dw16, size_t(n) * 2, MemKind::kCudaDevice, 0};
    return s;
  }
};

AdamParams params() {
  AdamParams p;
  p.weight_decay = 0.01f;
  return p;
}

// Decay ranges of 1000..101000 elements with 16-element gaps, alternating decay.
std::vector<DecayRange> gapped_ranges(int64_t n) {
  std::vector<DecayRange> r;
  for (int64_t at = 0, i = 0; at < n; ++i) {
    const int64_t k = std::min(n - at, 1000 + (i * 7919) % 100000);
    r.push_back(DecayRange{at, k, i % 2 == 0});
    at += k + 16;
  }
  return r;
}

void validate(const Options& o, ThreadPool* threads) {
  const int64_t n = 2'000'000 + 12345;
  const std::vector<DecayRange> ranges = gapped_ranges(n);
  for (bool serialize : {false, true}) {
    Shard ref(n, o.grad, o.weights), got(n, o.grad, o.weights);
    OffloadPipelineOptions po;
    po.tile_elems = std::min<int64_t>(o.tile, 300'007);
    po.buffers = o.buffers;
    po.serialize = serialize;
    po.threads = threads;
    auto host = OffloadPipeline::create(po), dev = OffloadPipeline::create(po);
    check(host.status());
    check(dev.status());
    for (int t = 1; t <= 2; ++t) {
      check((*host)->step(params(), t, ref.host_view(), ranges, 700'001));
      check((*dev)->step(params(), t, got.device_view(), ranges, 700'001));
    }
    check((*dev)->synchronize());
    cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cuda(cudaMemcpy(got.w16.data(), got.dw16, size_t(n) * 2, cudaMemcpyDeviceToHost), "cudaMemcpy(weights)");
    for (auto [a, b, bytes] : {std::tuple{&ref.master, &got.master, size_t(n) * 4},
                               {&ref.m, &got.m, size_t(n) * 4},
                               {&ref.v, &got.v, size_t(n) * 4}}) {
      if (std::memcmp(a->data(), b->data(), bytes) != 0) die("validation failed: master/m/v differ from the host path");
    }
    // Padding of the device weights was zero-filled and stays zero; the host path leaves its zeros too.
    if (std::memcmp(ref.w16.data(), got.w16.data(), size_t(n) * 2) != 0)
      die("validation failed: device 16-bit weights differ from the host path");
  }
}

double time_step(const std::function<void()>& step, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    step();
    t.push_back(now_s() - t0);
  }
  return median(t);
}

// Every tile's gradient copied down into one pinned tile, then every tile's weights copied up, on one stream.
double time_copies(Shard& s, int64_t tile, int reps) {
  void* stage = nullptr;
  const size_t gsz = dtype_size(s.gd);
  cuda(cudaHostAlloc(&stage, size_t(tile) * 4, cudaHostAllocPortable), "cudaHostAlloc");
  cudaStream_t st;
  cuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
  const double t = time_step(
      [&] {
        for (int64_t a = 0; a < s.n; a += tile)
          cuda(cudaMemcpyAsync(stage, static_cast<char*>(s.dgrad) + size_t(a) * gsz,
                               size_t(std::min(tile, s.n - a)) * gsz, cudaMemcpyDeviceToHost, st),
               "copy down");
        for (int64_t a = 0; a < s.n; a += tile)
          cuda(cudaMemcpyAsync(static_cast<char*>(s.dw16) + size_t(a) * 2, stage, size_t(std::min(tile, s.n - a)) * 2,
                               cudaMemcpyHostToDevice, st),
               "copy up");
        cuda(cudaStreamSynchronize(st), "cudaStreamSynchronize");
      },
      reps);
  cudaStreamDestroy(st);
  cudaFreeHost(stage);
  return t;
}

DataType parse_dtype_arg(const std::string& v) {
  if (v == "bf16") return DataType::kBFloat16;
  if (v == "fp16") return DataType::kFloat16;
  if (v == "fp32") return DataType::kFloat32;
  die("unknown dtype " + v + " (bf16, fp16, fp32)");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) die("missing value after " + a);
    const std::string v = argv[++i];
    if (a == "--params")
      o.params = std::atoll(v.c_str());
    else if (a == "--tile")
      o.tile = std::atoll(v.c_str());
    else if (a == "--buffers")
      o.buffers = std::atoi(v.c_str());
    else if (a == "--grad")
      o.grad = parse_dtype_arg(v);
    else if (a == "--weights")
      o.weights = parse_dtype_arg(v);
    else if (a == "--threads")
      o.threads = std::atoi(v.c_str());
    else if (a == "--reps")
      o.reps = std::atoi(v.c_str());
    else if (a == "--sub-group")
      o.sub_group = std::atoll(v.c_str());
    else
      die("unknown argument " + a + " (see the file header for usage)");
  }
  if (o.weights == DataType::kFloat32) die("--weights must be bf16 or fp16");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) die("no CUDA device", 77);
  cudaDeviceProp prop{};
  cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  auto pool = ThreadPool::create(o.threads);
  check(pool.status());
  validate(o, pool->get());
  Shard s(o.params, o.grad, o.weights);
  const std::vector<DecayRange> ranges{DecayRange{0, o.params, true}};
  OffloadPipelineOptions po;
  po.tile_elems = o.tile;
  po.buffers = o.buffers;
  po.threads = pool->get();
  auto host = OffloadPipeline::create(po), pipe = OffloadPipeline::create(po);
  po.serialize = true;
  auto serial = OffloadPipeline::create(po);
  for (auto* p : {&host, &pipe, &serial}) check(p->status());
  int step = 0;
  auto run = [&](OffloadPipeline& p, const OptimizerShard& view) {
    check(p.step(params(), ++step, view, ranges, o.sub_group));
    check(p.synchronize());
  };
  run(**pipe, s.device_view());  // warm-up: staging allocation, first touch
  run(**serial, s.device_view());
  const double t_update = time_step([&] { run(**host, s.host_view()); }, o.reps);
  const double t_copy = time_copies(s, o.tile, o.reps);
  const double t_serial = time_step([&] { run(**serial, s.device_view()); }, o.reps);
  const double t_pipe = time_step([&] { run(**pipe, s.device_view()); }, o.reps);
  const double link_bytes = double(o.params) * double(dtype_size(o.grad) + 2);
  std::printf(
      "# zw_offload_bench: %lld params on %s, gradient %s and weights %s in device memory, tile %lld, "
      "%d buffers, sub_group_size %lld, %d threads, isa %s, medians of %d; validated bit-exact\n",
      (long long)o.params, prop.name, dtype_name(o.grad), dtype_name(o.weights), (long long)o.tile, o.buffers,
      (long long)o.sub_group, o.threads, kernels::isa_name(kernels::best_isa()), o.reps);
  std::printf("%-10s %10s %12s %12s\n", "mode", "ms/step", "Mparam/s", "link GB/s");
  for (auto [name, t] :
       {std::pair{"update", t_update}, {"copies", t_copy}, {"serial", t_serial}, {"pipelined", t_pipe}}) {
    char link[32] = "-";
    if (std::string(name) != "update") std::snprintf(link, sizeof link, "%.1f", link_bytes / t / 1e9);
    std::printf("%-10s %10.2f %12.1f %12s\n", name, t * 1e3, double(o.params) / t / 1e6, link);
  }
  // Exposed copy time: what the pipelined step costs beyond the CPU work alone (never below zero: the tiled update can
  // be cheaper than the fused one, it reads a 16-bit gradient and writes 16-bit weights into a cache-sized tile).
  const double exposed = std::max(0.0, t_pipe - t_update);
  std::printf("copy time hidden: %.0f%% (exposed max(0, pipelined - update) = %.2f ms of %.2f ms of copies)\n",
              100.0 * (1.0 - std::min(1.0, exposed / t_copy)), exposed * 1e3, t_copy * 1e3);
  std::printf("pipelined over update alone: %+.1f%%; serial over update alone: %+.1f%%; serial - pipelined: %.2f ms\n",
              100.0 * (t_pipe / t_update - 1.0), 100.0 * (t_serial / t_update - 1.0), (t_serial - t_pipe) * 1e3);
  return 0;
}
