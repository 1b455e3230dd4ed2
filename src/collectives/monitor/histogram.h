// collectives/monitor/histogram.h — a fixed-bucket latency histogram: half-octave buckets from 1 µs to ~134 s plus
// an overflow bucket, counted with relaxed atomics (one writer, any number of readers), and percentiles read back
// from the counts by interpolating inside a bucket. Non-goals: exact quantiles (a bucket is 41 % wide; the
// interpolation is geometric), sub-microsecond resolution (everything under 1 µs shares the first bucket).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>

namespace zw::internal::monitor {

// The histogram's bucket bounds, 1000 · 2^(k/2) ns rounded, computed at compile time (no guard on the hot path).
constexpr std::array<uint64_t, 55> make_latency_bounds() {
  std::array<uint64_t, 55> out{};
  for (int k = 0; k < 55; ++k) {
    const double base = (k % 2 == 0) ? 1000.0 : 1414.2135623730951;
    out[static_cast<size_t>(k)] = static_cast<uint64_t>(base * static_cast<double>(uint64_t{1} << (k / 2)) + 0.5);
  }
  return out;
}
inline constexpr std::array<uint64_t, 55> kLatencyBounds = make_latency_bounds();

class LatencyHistogram {
 public:
  static constexpr int kFinite = 55;            // buckets with an upper bound: 1 µs · 2^(k/2), k = 0..54
  static constexpr int kBuckets = kFinite + 1;  // and one above the last bound

  // Upper bound of bucket k in nanoseconds (k < kFinite).
  static uint64_t upper_ns(int k) { return bounds()[static_cast<size_t>(k)]; }
  // The bucket of a duration: the first k with upper_ns(k) >= ns (kFinite above the last bound). O(1): the octave of
  // ns/1000 gives a bucket k0 with bound(k0) < ns, and the answer is at most 3 buckets above it (on the hot path, a
  // binary search over the bounds cost ~4 ns in mispredicted branches).
  static int bucket_of(uint64_t ns) {
    if (ns <= 1000) return 0;
    const auto& b = bounds();
    const int octave = 63 - __builtin_clzll(ns / 1000);  // bound(2·octave) <= ns
    int k = std::min(2 * octave - 1, kFinite);
    k = k < 0 ? 0 : k;
    while (k < kFinite && b[static_cast<size_t>(k)] < ns) ++k;
    return k;
  }

  // Writer only (relaxed load + store: one writer, no read-modify-write needed).
  void add(uint64_t ns) {
    auto& c = counts_[static_cast<size_t>(bucket_of(ns))];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  uint64_t count(int k) const { return counts_[static_cast<size_t>(k)].load(std::memory_order_relaxed); }
  // Copies the counts (a reader's consistent-enough view).
  std::array<uint64_t, kBuckets> copy() const {
    std::array<uint64_t, kBuckets> out{};
    for (int k = 0; k < kBuckets; ++k) out[static_cast<size_t>(k)] = count(k);
    return out;
  }

  // The q-quantile (0 < q ≤ 1) in nanoseconds of a copy of the counts; 0 when empty.
  static double quantile_ns(const std::array<uint64_t, kBuckets>& counts, double q) {
    uint64_t total = 0;
    for (uint64_t c : counts) total += c;
    if (total == 0) return 0;
    const double target = std::clamp(q, 0.0, 1.0) * static_cast<double>(total);
    double below = 0;
    for (int k = 0; k < kBuckets; ++k) {
      const double c = static_cast<double>(counts[static_cast<size_t>(k)]);
      if (c == 0 || below + c < target) {
        below += c;
        continue;
      }
      if (k == kFinite) return static_cast<double>(upper_ns(kFinite - 1));  // overflow: its lower bound
      const double hi = static_cast<double>(upper_ns(k));
      const double frac = std::clamp((target - below) / c, 0.0, 1.0);
      if (k == 0) return hi * frac;  // [0, 1 µs]: linear
      const double lo = static_cast<double>(upper_ns(k - 1));
      return lo * std::pow(hi / lo, frac);  // geometric inside the bucket
    }
    return static_cast<double>(upper_ns(kFinite - 1));
  }

 private:
  static const std::array<uint64_t, kFinite>& bounds() { return kLatencyBounds; }
  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
};

}  // namespace zw::internal::monitor
