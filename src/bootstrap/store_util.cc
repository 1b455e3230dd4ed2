// Helpers shared by the stores: deadlines, timeout messages, counters, token comparison.
#include "bootstrap/store_util.h"

#include <charconv>
#include <chrono>
#include <cstdio>

namespace zw::store {
namespace {

// "3" when the key's last '/'-separated component is a rank number, else "".
std::string rank_in_key(const std::string& key) {
  size_t slash = key.rfind('/');
  std::string last = slash == std::string::npos ? key : key.substr(slash + 1);
  if (last.empty() || last.size() > 9) return "";
  for (char c : last)
    if (c < '0' || c > '9') return "";
  return last;
}

}  // namespace

Clock::time_point deadline_after(Clock::time_point now, int64_t timeout_ms) {
  if (timeout_ms >= kForeverMs) return Clock::time_point::max();
  if (timeout_ms < 0) timeout_ms = 0;
  return now + std::chrono::milliseconds(timeout_ms);
}

Deadline to_deadline(Store::Timeout timeout) {
  if (timeout.count() >= kForeverMs) return Deadline::never();
  return Deadline::after(timeout);
}

Store::Timeout timeout_from_seconds(double s) {
  if (!(s > 0)) return Store::Timeout(0);
  if (s >= static_cast<double>(kForeverMs) / 1000) return Store::Timeout(kForeverMs);
  return Store::Timeout(static_cast<int64_t>(s * 1000));
}

std::string describe_timeout(int64_t timeout_ms) {
  if (timeout_ms < 1000) return std::to_string(timeout_ms < 0 ? 0 : timeout_ms) + " ms";
  if (timeout_ms % 1000 == 0) return std::to_string(timeout_ms / 1000) + " s";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(timeout_ms) / 1000.0);
  return buf;
}

Status key_timeout(const std::vector<std::string>& missing, size_t total, int64_t timeout_ms) {
  std::string what = "timed out after " + describe_timeout(timeout_ms) + " waiting for store key";
  if (missing.size() == 1) {
    std::string rank = rank_in_key(missing[0]);
    what += " '" + missing[0] + "' (";
    if (total > 1) what += "1 of " + std::to_string(total) + " keys missing; ";
    what += rank.empty() ? "is every rank running?)" : "is rank " + rank + " running?)";
    return Status(Code::kTimeout, what);
  }
  what += "s";
  constexpr size_t kShown = 8;
  for (size_t i = 0; i < missing.size() && i < kShown; ++i) what += (i == 0 ? " '" : ", '") + missing[i] + "'";
  if (missing.size() > kShown) what += ", ...";
  what +=
      " (" + std::to_string(missing.size()) + " of " + std::to_string(total) + " keys missing; is every rank running?)";
  return Status(Code::kTimeout, what);
}

Result<int64_t> add_to_counter(const std::string& key, const std::string* current, int64_t delta) {
  int64_t value = 0;
  if (current != nullptr) {
    const char* begin = current->data();
    const char* end = begin + current->size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (current->empty() || ec != std::errc() || ptr != end)
      return Status(Code::kInvalidArgument, "store key '" + key + "' holds a value that is not a decimal integer (" +
                                                std::to_string(current->size()) +
                                                " bytes); add() needs an integer value or a missing key");
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum))
    return Status(Code::kInvalidArgument, "adding " + std::to_string(delta) + " to store key '" + key + "' (" +
                                              std::to_string(value) + ") overflows a 64-bit integer");
  return sum;
}

bool tokens_equal(std::string_view a, std::string_view b) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace zw::store
