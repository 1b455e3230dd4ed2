// Small pieces shared by the in-memory store, the TCP store server and its client: deadlines from timeouts,
// the message of a timed-out wait, counter arithmetic for add(), and constant-time token comparison.
//
// Keeping these in one place makes every store fail with the same words for the same problem.
// Non-goals: anything that touches sockets or threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "zerowire/status.h"
#include "zerowire/store.h"

namespace zw::store {

// Timeouts at or above this many milliseconds (about 10 years) mean "wait forever".
inline constexpr int64_t kForeverMs = int64_t{10} * 365 * 24 * 3600 * 1000;

// `now + timeout_ms`, saturating at time_point::max() (forever); a negative timeout counts as zero.
Clock::time_point deadline_after(Clock::time_point now, int64_t timeout_ms);

// The Deadline of an operation that may wait `timeout` (Deadline::never() for huge timeouts).
Deadline to_deadline(Store::Timeout timeout);

// `s` seconds (ZW_TIMEOUT, which the knob table takes as any finite number >= 0) as a store timeout: kForeverMs at
// or past it, 0 when not positive. Multiplying first would overflow int64 for 1e30 s.
Store::Timeout timeout_from_seconds(double s);

// "30 s", "1.5 s" or "250 ms".
std::string describe_timeout(int64_t timeout_ms);

// kTimeout: "timed out after 30 s waiting for store key 'addr/3' (is rank 3 running?)". `missing` lists the
// keys still absent, `total` how many the caller waited for.
Status key_timeout(const std::vector<std::string>& missing, size_t total, int64_t timeout_ms);

// The value add() stores: `current` (null when the key is missing, counting as 0) plus `delta`. Fails with
// kInvalidArgument when `current` is not a decimal int64 or when the sum overflows.
Result<int64_t> add_to_counter(const std::string& key, const std::string* current, int64_t delta);

// Whether two tokens are equal, taking the same time whatever bytes differ (the length may leak).
bool tokens_equal(std::string_view a, std::string_view b);

}  // namespace zw::store
