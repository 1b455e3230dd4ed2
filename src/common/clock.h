// Monotonic clocks and deadlines. All timeouts in zerowire are Deadlines computed once at the start of an
// operation, so that retries and partial progress never extend the time a caller waits.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace zw {

using Clock = std::chrono::steady_clock;

// Nanoseconds on the monotonic clock (for timing, not for wall-clock time).
inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// Seconds as messages print them: "2.5", "300", "1e+30" (printf's %g, not std::to_string's six decimals).
inline std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

class Deadline {
 public:
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  // `d` from `now`: a caller that has just read the clock passes its reading instead of reading it again. A
  // duration longer than the clock can count from `now` (~292 years in nanoseconds; milliseconds::max() as "no
  // limit") is never(): compared in its own units, since converting it would overflow.
  template <class Rep, class Period>
  static Deadline after(std::chrono::duration<Rep, Period> d, Clock::time_point now = Clock::now()) {
    using Given = std::chrono::duration<Rep, Period>;
    if (d <= Given::zero()) return Deadline(now);
    if (d >= std::chrono::duration_cast<Given>(Clock::time_point::max() - now)) return never();
    return Deadline(now + std::chrono::duration_cast<Clock::duration>(d));
  }
  // NaN counts as no time left (the settings refuse it before it gets here).
  static Deadline after_seconds(double s, Clock::time_point now = Clock::now()) {
    return std::isnan(s) ? Deadline(now) : after(std::chrono::duration<double>(s), now);
  }
  bool is_never() const { return at_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, INT32_MAX]; for poll(2) and friends.
  int remaining_ms() const {
    if (is_never()) return INT32_MAX;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return left <= 0 ? 0 : (left > INT32_MAX ? INT32_MAX : static_cast<int>(left));
  }
  std::chrono::nanoseconds remaining() const {
    if (is_never()) return std::chrono::nanoseconds::max();
    auto left = at_ - Clock::now();
    return left.count() <= 0 ? std::chrono::nanoseconds(0) : std::chrono::duration_cast<std::chrono::nanoseconds>(left);
  }
  Clock::time_point time_point() const { return at_; }
  // The earlier of two deadlines.
  static Deadline min(Deadline a, Deadline b) { return a.at_ < b.at_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace zw
