// bench/cpu_adam/cpu_adam_bench.cc — zw_cpu_adam_bench: throughput of zero::adam_step against torch.optim.
//
// Purpose: time one AdamW step over N fp32 parameters (default 100M; master, m, v, grad in huge-page buffers) at
// 1 thread and at all threads, interleaved per repetition with torch_adam.py (torch.optim.Adam and AdamW, same
// thread count), and print medians, the zw/torch ratios and the memory-bandwidth bound: 28 bytes move per
// parameter per step (read master, m, v, grad; write master, m, v), divided into the measured copy bandwidth.
// The kernel is validated against the scalar path before timing. Non-goals: Google Benchmark (one 100M-element
// step is a long, memory-bound operation; medians of whole steps are what matters), GPU.
//
// Usage: zw_cpu_adam_bench [--params N] [--steps S] [--reps R] [--threads T] [--no-torch] [--bf16] [--torch-heap]
//                          [--python PATH]   (the interpreter that has torch; default /usr/bin/python3, Debian's)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "zero/optim/cpu_adam.h"
#include "zero/optim/pinned_buffer.h"

namespace {

using zw::zero::AdamParams;
using zw::zero::ThreadPool;
namespace kernels = zw::kernels;

struct Options {
  size_t params = 100'000'000;
  int steps = 5;
  int reps = 3;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool torch = true;
  bool bf16 = false;
  bool torch_heap = false;  // also run torch with glibc's mmap disabled, so its temporaries reuse heap pages
  std::string python = "/usr/bin/python3";  // runs torch_adam.py
};

// torch allocates fresh temporaries each step; glibc serves them with new mmaps whose first touch is slow on these
// VMs. This environment keeps them on the heap (reused) — a fairer view of torch's kernels themselves.
constexpr const char* kTorchHeapEnv =
    "MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=1073741824 ";

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "zw_cpu_adam_bench: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T* take(zw::Result<zw::zero::PinnedBuffer>& r, std::vector<zw::zero::PinnedBuffer>& keep) {
  if (!r.ok()) die(r.status().to_string());
  keep.push_back(std::move(r.value()));
  return keep.back().as<T>();
}

struct State {
  std::vector<zw::zero::PinnedBuffer> buffers;
  float *master, *m, *v, *grad;
  uint16_t* bf16 = nullptr;
  size_t n;
};

State make_state(size_t n, bool bf16) {
  State s;
  s.n = n;
  for (float** p : {&s.master, &s.m, &s.v, &s.grad}) {
    auto r = zw::zero::alloc_pinned_hugepage(n * sizeof(float));
    *p = take<float>(r, s.buffers);
  }
  if (bf16) {
    auto r = zw::zero::alloc_pinned_hugepage(n * sizeof(uint16_t));
    s.bf16 = take<uint16_t>(r, s.buffers);
  }
  for (size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>((i * 2654435761u) % 1000003u) * 1e-6f - 0.5f;
    s.master[i] = x;
    s.grad[i] = x * 2e-2f;
  }
  return s;  // m and v are zero-filled by the mapping
}

// The best ISA and the scalar kernel must agree bit for bit on a slice before anything is timed.
void validate(const AdamParams& p) {
  const size_t n = 4099;
  std::vector<float> a(4 * n), b;
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7919) % 1009) * 1e-3f - 0.5f;
  for (size_t i = 2 * n; i < 3 * n; ++i) a[i] = std::abs(a[i]) * 1e-3f;  // v >= 0
  b = a;
  std::vector<uint16_t> ba(n), bb(n);
  auto run = [&](kernels::Isa isa, std::vector<float>& x, std::vector<uint16_t>& o) {
    zw::Status st = adam_step_isa(isa, p, x.data(), x.data() + n, x.data() + 2 * n, x.data() + 3 * n, n, o.data(),
                                  nullptr, 3, nullptr);
    if (!st.ok()) die(st.to_string());
  };
  run(kernels::best_isa(), a, ba);
  run(kernels::Isa::kScalar, b, bb);
  if (a != b || ba != bb) die("validation failed: best ISA and scalar kernel disagree");
}

// Median seconds per step over `steps` steps.
double time_zw(State& s, const AdamParams& p, int steps, ThreadPool* pool, int& step_counter) {
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    const double t0 = now_s();
    zw::Status st = zw::zero::adam_step(p, s.master, s.m, s.v, s.grad, s.n, s.bf16, nullptr, ++step_counter, pool);
    t.push_back(now_s() - t0);
    if (!st.ok()) die(st.to_string());
  }
  return median(t);
}

// Copy bandwidth (bytes read + written per second) of a threaded memcpy over 256 MiB, median of 5.
double copy_bandwidth(ThreadPool* pool) {
  const size_t bytes = size_t{256} << 20;
  auto src = zw::zero::alloc_pinned_hugepage(bytes), dst = zw::zero::alloc_pinned_hugepage(bytes);
  if (!src.ok() || !dst.ok()) die("copy buffers: out of memory");
  std::memset(src->data(), 1, bytes);
  struct Ctx {
    char* d;
    const char* s;
    size_t chunk;
  } ctx{dst->as<char>(), src->as<char>(), size_t{4} << 20};
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const double t0 = now_s();
    pool->parallel_for(
        bytes / ctx.chunk,
        [](void* c, size_t i) {
          auto* x = static_cast<Ctx*>(c);
          std::memcpy(x->d + i * x->chunk, x->s + i * x->chunk, x->chunk);
        },
        &ctx);
    t.push_back(now_s() - t0);
  }
  return 2.0 * bytes / median(t);
}

// Loads all four streams, then stores three, like the kernel (an interleaved load/store order would stall on 4 KiB
// aliasing: the arrays are 2 MiB-aligned at equal offsets). AVX-512 when the CPU has it (-O2 does not vectorize).
__attribute__((target("avx512f"))) void stream_pass_avx512(float* p, float* m, float* v, const float* g, size_t n) {
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 z = _mm512_mul_ps(_mm512_loadu_ps(g + j), _mm512_setzero_ps());
    const __m512 a = _mm512_add_ps(_mm512_loadu_ps(p + j), z), b = _mm512_add_ps(_mm512_loadu_ps(m + j), z);
    const __m512 c = _mm512_add_ps(_mm512_loadu_ps(v + j), z);
    _mm512_storeu_ps(p + j, a);
    _mm512_storeu_ps(m + j, b);
    _mm512_storeu_ps(v + j, c);
  }
  for (; j < n; ++j) p[j] += g[j] * 0.0f;
}

void stream_pass(float* p, float* m, float* v, const float* g, size_t n) {
  if (kernels::isa_supported(kernels::Isa::kAvx512)) return stream_pass_avx512(p, m, v, g, n);
  for (size_t j = 0; j < n; ++j) {
    const float z = g[j] * 0.0f, a = p[j] + z, b = m[j] + z, c = v[j] + z;
    p[j] = a;
    m[j] = b;
    v[j] = c;
  }
}

// The same 28 B/param access pattern with no math worth the name (x += g·0 on master, m and v): the achievable
// streaming rate of this machine for the optimizer's traffic, in params/s, median of 3 passes.
double stream_rate(State& s, ThreadPool* pool) {
  struct Ctx {
    State* s;
    size_t chunk;
  } ctx{&s, size_t{32} << 10};
  std::vector<double> t;
  for (int r = 0; r < 3; ++r) {
    const double t0 = now_s();
    pool->parallel_for((s.n + ctx.chunk - 1) / ctx.chunk,
                       [](void* c, size_t i) {
                         auto* x = static_cast<Ctx*>(c);
                         const size_t begin = i * x->chunk, end = std::min(x->s->n, begin + x->chunk);
                         stream_pass(x->s->master + begin, x->s->m + begin, x->s->v + begin, x->s->grad + begin,
                                     end - begin);
                       },
                       &ctx);
    t.push_back(now_s() - t0);
  }
  return s.n / median(t);
}

// Runs torch_adam.py and returns {optimizer name -> Mparam/s}; also remembers torch's flag line.
std::map<std::string, double> run_torch(const Options& o, int threads, std::string& flags, const char* env) {
  const std::string cmd = std::string(env) + o.python + " " + ZW_CPU_ADAM_TORCH_SCRIPT + " --params " +
                          std::to_string(o.params) + " --steps " + std::to_string(o.steps) + " --threads " +
                          std::to_string(threads);
  std::map<std::string, double> out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    char name[64] = {};
    double mps = 0;
    if (std::sscanf(line, "%63s %lf", name, &mps) == 2) out[name] = mps;
    if (const char* brace = std::strchr(line, '{')) flags = brace;
  }
  const int rc = pclose(f);
  if (rc != 0 || out.empty())
    die("torch_adam.py failed under " + o.python + " (exit status " + std::to_string(rc) +
        "): is torch importable there? Pass --python PATH to an interpreter with torch, or --no-torch");
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> long {
      if (i + 1 >= argc) die("missing value after " + a);
      return std::atol(argv[++i]);
    };
    if (a == "--params")
      o.params = static_cast<size_t>(next());
    else if (a == "--steps")
      o.steps = static_cast<int>(next());
    else if (a == "--reps")
      o.reps = static_cast<int>(next());
    else if (a == "--threads")
      o.threads = static_cast<int>(next());
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--bf16")
      o.bf16 = true;
    else if (a == "--torch-heap")
      o.torch_heap = true;
    else if (a == "--python" && i + 1 < argc)
      o.python = argv[++i];
    else
      die("unknown argument " + a + " (see the file header for usage)");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  AdamParams p;
  p.weight_decay = 0.01f;  // AdamW, as torch.optim.AdamW's default
  validate(p);
  auto one = ThreadPool::create(1), all = ThreadPool::create(o.threads);
  if (!one.ok() || !all.ok()) die("cannot create thread pools");
  State s = make_state(o.params, o.bf16);
  const double bw1 = copy_bandwidth(one->get()), bwn = copy_bandwidth(all->get());
  const double bytes_per_param = 28.0 + (o.bf16 ? 2.0 : 0.0);
  const double stream1 = stream_rate(s, one->get()), streamn = stream_rate(s, all->get());
  std::printf("# zw_cpu_adam_bench: %zu params, isa %s, bf16 copy-out %s, %d steps x %d reps, medians\n", o.params,
              kernels::isa_name(kernels::best_isa()), o.bf16 ? "on" : "off", o.steps, o.reps);
  std::printf("# copy bandwidth (read+write): 1 thread %.1f GB/s, %d threads %.1f GB/s; %.0f B/param/step\n", bw1 / 1e9,
              o.threads, bwn / 1e9, bytes_per_param);
  std::printf(
      "# streaming the optimizer's own 28 B/param pattern (no math): 1 thread %.1f Mparam/s (%.1f GB/s), "
      "%d threads %.1f Mparam/s (%.1f GB/s)\n",
      stream1 / 1e6, stream1 * 28 / 1e9, o.threads, streamn / 1e6, streamn * 28 / 1e9);
  int step = 0;
  std::map<std::string, std::vector<double>> samples;  // key "<who>@<threads>" -> Mparam/s
  std::string flags;
  const int counts[2] = {1, o.threads};
  for (int r = 0; r < o.reps; ++r) {
    for (int c = 0; c < (o.threads > 1 ? 2 : 1); ++c) {
      ThreadPool* pool = c == 0 ? one->get() : all->get();
      const std::string at = "@" + std::to_string(counts[c]);
      samples["zw" + at].push_back(o.params / time_zw(s, p, o.steps, pool, step) / 1e6);
      if (!o.torch) continue;
      for (auto& [name, mps] : run_torch(o, counts[c], flags, "")) samples["torch." + name + at].push_back(mps);
      if (!o.torch_heap) continue;
      for (auto& [name, mps] : run_torch(o, counts[c], flags, kTorchHeapEnv)) {
        samples["torchheap." + name + at].push_back(mps);
      }
    }
  }
  if (!flags.empty()) std::printf("# torch optimizer flags: %s", flags.c_str());
  std::printf("%-8s %-10s %12s %12s %12s %7s %7s %10s %7s %10s %9s\n", "threads", "torch-env", "zw Mparam/s",
              "torch Adam", "torch AdamW", "x Adam", "x AdamW", "copybound", "% copyb", "streamb", "% streamb");
  for (const char* variant : {"torch", "torchheap"}) {
    if (std::string(variant) == "torchheap" && !o.torch_heap) continue;
    for (int c = 0; c < (o.threads > 1 ? 2 : 1); ++c) {
      const std::string at = "@" + std::to_string(counts[c]), v = variant;
      const double zw = median(samples["zw" + at]);
      const double ta = median(samples[v + ".Adam" + at]), tw = median(samples[v + ".AdamW" + at]);
      const double bound = (c == 0 ? bw1 : bwn) / bytes_per_param / 1e6;
      const double sbound = (c == 0 ? stream1 : streamn) / 1e6;
      std::printf("%-8d %-10s %12.1f %12.1f %12.1f %7.2f %7.2f %10.1f %6.0f%% %10.1f %8.0f%%\n", counts[c],
                  v == "torch" ? "default" : "heap", zw, ta, tw, ta > 0 ? zw / ta : 0.0, tw > 0 ? zw / tw : 0.0, bound,
                  100.0 * zw / bound, sbound, 100.0 * zw / sbound);
    }
  }
  return 0;
}
