// Shared sweep of the anchor collective drivers (see coll_sweep.h): flag parsing, buffers, validation,
// timing and the nccl-tests table. Non-goals: anything a single library-specific driver does not need.
#include "coll_sweep.h"

#include <sys/mman.h>

#include <cctype>
#include <cstddef>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace zwcmp {
namespace {

// "4K", "256M", "1G" or plain bytes; false when malformed.
bool parse_bytes(const char* s, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) return false;
  if (const char* unit = std::strchr("KMG", std::toupper(static_cast<unsigned char>(*end))); *end && unit) {
    v *= static_cast<double>(size_t{1} << (10 * (unit - "KMG" + 1)));
    ++end;
  }
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v);
  return true;
}

void usage(const char* program) {
  std::printf(
      "usage: %s all_gather|reduce_scatter [-b BYTES] [-e BYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]\n"
      "       [-d float] [-o sum] [-t TRANSPORT_LABEL] [--store DIR]\n"
      "nccl-tests flags and columns (float32, sum only); sizes accept K, M, G suffixes.\n",
      program);
}

// Host memory allocated once at the largest size: huge-page advised, pre-faulted, and starting on a 2 MiB boundary
// (mapped 2 MiB longer and trimmed) — the same policy as zerowire's own benchmark (bench/coll_perf.cc), so that
// neither side runs some sizes on the 4 KiB-paged head of an unaligned mapping.
class Arena {
 public:
  static constexpr size_t kAlign = size_t{2} << 20;
  explicit Arena(size_t bytes) : bytes_(bytes ? bytes : 1), map_bytes_(bytes_ + kAlign) {
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base_ = static_cast<std::byte*>(p);
    std::byte* aligned = base_ + (kAlign - reinterpret_cast<uintptr_t>(base_) % kAlign) % kAlign;
    madvise(aligned, bytes_, MADV_HUGEPAGE);
    std::memset(aligned, 0, bytes_);
    ptr_ = reinterpret_cast<float*>(aligned);
  }
  ~Arena() {
    if (base_) munmap(base_, map_bytes_);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  float* get() const { return ptr_; }

 private:
  size_t bytes_;
  size_t map_bytes_;
  std::byte* base_ = nullptr;  // the mapping
  float* ptr_ = nullptr;       // 2 MiB-aligned start inside it
};

// Value of element g (index in the n*count vector) contributed by rank r: small integers, exact in float.
float input_value(int r, size_t g) { return static_cast<float>(r + 1 + static_cast<int>(g % 61)); }

// Buffers of one placement; `in_arena` and `out_arena` each hold n*count elements.
Bufs buffers_for(Coll coll, bool in_place, size_t count, int rank, float* in_arena, float* out_arena) {
  if (!in_place) return {in_arena, out_arena, count, false};
  const float* in = coll == Coll::kAllGather ? out_arena + rank * count : out_arena;
  return {in, out_arena, count, true};
}

// Writes this rank's input pattern where the collective reads it and poisons the rest of the output.
void fill_pattern(Coll coll, const Bufs& b, int rank, int n, float* in_arena) {
  const size_t whole = b.count * n;
  for (size_t i = 0; i < whole; ++i) b.out[i] = -1.0f;
  float* in = b.in_place ? b.out : in_arena;
  if (coll == Coll::kAllGather) {
    float* mine = b.in_place ? b.out + rank * b.count : in;
    for (size_t j = 0; j < b.count; ++j) mine[j] = input_value(rank, rank * b.count + j);
  } else {
    for (size_t g = 0; g < whole; ++g) in[g] = input_value(rank, g);
  }
}

int64_t count_wrong(Coll coll, const Bufs& b, int rank, int n) {
  int64_t wrong = 0;
  if (coll == Coll::kAllGather) {
    for (size_t g = 0; g < b.count * n; ++g)
      if (b.out[g] != input_value(static_cast<int>(g / b.count), g)) ++wrong;
    return wrong;
  }
  for (size_t j = 0; j < b.count; ++j) {  // the result is the first count elements of out, in both placements
    size_t g = rank * b.count + j;
    float want = 0;
    for (int r = 0; r < n; ++r) want += input_value(r, g);
    if (b.out[j] != want) ++wrong;
  }
  return wrong;
}

struct Measured {
  bool have = false;
  double us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
};

Measured measure(Backend& be, const Flags& f, const Bufs& b, float* in_arena) {
  const int n = be.size();
  Measured m;
  m.have = true;
  be.prepare(f.coll, b);
  if (f.check) {
    fill_pattern(f.coll, b, be.rank(), n, in_arena);
    be.barrier();  // Gloo writes straight into a peer's bound buffer: no rank may still be filling it
    be.run(f.coll, b);
    m.wrong = static_cast<int64_t>(be.sum(static_cast<double>(count_wrong(f.coll, b, be.rank(), n))));
  }
  std::memset(b.out, 0, b.count * n * sizeof(float));  // zeros keep repeated sums bounded
  if (!b.in_place) std::memset(in_arena, 0, b.count * n * sizeof(float));
  be.barrier();
  for (int i = 0; i < f.warmup; ++i) be.run(f.coll, b);
  be.barrier();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < f.iters; ++i) be.run(f.coll, b);
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / f.iters;
  m.us = be.sum(us) / n;
  const double size = static_cast<double>(b.count) * n * sizeof(float);
  m.algbw = m.us > 0 ? size / (m.us * 1e3) : 0;  // bytes per ns = GB/s
  m.busbw = m.algbw * (n - 1) / n;
  return m;
}

void print_header(const Flags& f, const char* library, int n) {
  const char* name = f.coll == Coll::kAllGather ? "all_gather" : "reduce_scatter";
  std::printf(
      "# %s %s_perf: nranks %d transport %s minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d "
      "iters: %d validation: %d\n#\n",
      library, name, n, f.transport, f.min_bytes, f.max_bytes, f.factor, f.warmup, f.iters, f.check);
  std::printf("%-60s%s\n", "#", "out-of-place                       in-place");
  std::printf("#%12s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%12s %13s %9s %7s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

std::string columns(const Measured& m, int check) {
  char buf[96];
  if (!m.have) {
    std::snprintf(buf, sizeof(buf), " %8s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
  } else {
    std::snprintf(buf, sizeof(buf), " %8.2f %7.2f %7.2f %6s", m.us, m.algbw, m.busbw,
                  check ? std::to_string(m.wrong).c_str() : "N/A");
  }
  return buf;
}

}  // namespace

int parse_flags(int argc, char** argv, const char* program, Flags* f) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage(program);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "all_gather")) {
    f->coll = Coll::kAllGather;
  } else if (!std::strcmp(argv[1], "reduce_scatter")) {
    f->coll = Coll::kReduceScatter;
  } else {
    std::fprintf(stderr, "%s: unknown collective '%s' (all_gather or reduce_scatter)\n", program, argv[1]);
    return 2;
  }
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      usage(program);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: flag %s needs a value\n", program, flag.c_str());
      return 2;
    }
    const char* v = argv[i + 1];
    bool ok = true;
    if (flag == "-b")
      ok = parse_bytes(v, &f->min_bytes);
    else if (flag == "-e")
      ok = parse_bytes(v, &f->max_bytes);
    else if (flag == "-f")
      ok = (f->factor = std::atof(v)) > 1;
    else if (flag == "-n")
      ok = (f->iters = std::atoi(v)) > 0;
    else if (flag == "-w")
      ok = (f->warmup = std::atoi(v)) >= 0;
    else if (flag == "-c")
      f->check = std::atoi(v);
    else if (flag == "-d")
      ok = !std::strcmp(v, "float");
    else if (flag == "-o")
      ok = !std::strcmp(v, "sum");
    else if (flag == "-t")
      f->transport = v;
    else if (flag == "--store")
      f->store_dir = v;
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, "%s: bad flag or value '%s %s' (only -d float and -o sum are supported)\n", program,
                   flag.c_str(), v);
      return 2;
    }
  }
  return -1;
}

int run_sweep(const Flags& f, const char* library, Backend& be) {
  const int n = be.size(), r = be.rank();
  const size_t unit = sizeof(float) * n;
  std::vector<size_t> counts;  // per-rank counts, nccl-tests' rounding of each size down to n floats
  for (double s = static_cast<double>(f.min_bytes ? f.min_bytes : 1); s <= f.max_bytes; s *= f.factor)
    if (static_cast<size_t>(s) / unit > 0) counts.push_back(static_cast<size_t>(s) / unit);
  const size_t max_elems = counts.empty() ? 1 : counts.back() * n;
  Arena in(max_elems * sizeof(float)), out(max_elems * sizeof(float));
  if (!in.get() || !out.get()) {
    std::fprintf(stderr, "rank %d: cannot allocate 2 x %zu bytes of benchmark buffers\n", r, max_elems * 4);
    return 1;
  }
  if (r == 0) print_header(f, library, n);
  int64_t wrong_total = 0;
  double bw_sum = 0;
  int bw_count = 0;
  for (size_t count : counts) {
    Measured m[2];
    for (int ip = 0; ip < 2; ++ip) {
      if (!be.supports(f.coll, ip == 1)) continue;
      m[ip] = measure(be, f, buffers_for(f.coll, ip == 1, count, r, in.get(), out.get()), in.get());
      wrong_total += m[ip].wrong;
      bw_sum += m[ip].busbw;
      ++bw_count;
    }
    if (r != 0) continue;
    std::printf(" %12zu %13zu %9s %7s %6s%s%s\n", count * unit, count * n, "float",
                f.coll == Coll::kAllGather ? "none" : "sum", "-1", columns(m[0], f.check).c_str(),
                columns(m[1], f.check).c_str());
    std::fflush(stdout);
  }
  if (r == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total),
                wrong_total ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g \n#\n", bw_count ? bw_sum / bw_count : 0.0);
  }
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace zwcmp
