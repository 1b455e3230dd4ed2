// Straggler judgement over one window of collectives' run times, and the exchange that gathers the windows (see
// straggler.h).
#include "collectives/monitor/straggler.h"

#include <algorithm>
#include <cstring>

#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"

namespace zw::internal::monitor {

StragglerVerdict judge_window(const std::vector<std::vector<uint32_t>>& d, double share, double min_late_ns) {
  StragglerVerdict v;
  const size_t n = d.size();
  v.last_share.assign(n, 0.0);
  v.median_late_ns.assign(n, 0.0);
  if (n < 2) return v;
  size_t ops = d[0].size();
  for (const auto& row : d) ops = std::min(ops, row.size());
  v.ops = ops;
  if (ops == 0) return v;
  std::vector<std::vector<double>> late(n);
  for (size_t i = 0; i < ops; ++i) {
    size_t last = 0;
    for (size_t r = 1; r < n; ++r)
      if (d[r][i] < d[last][i]) last = r;
    uint32_t next = UINT32_MAX;
    for (size_t r = 0; r < n; ++r)
      if (r != last) next = std::min(next, d[r][i]);
    late[last].push_back(1000.0 * (static_cast<double>(next) - d[last][i]));
  }
  double best = -1;
  for (size_t r = 0; r < n; ++r) {
    v.last_share[r] = static_cast<double>(late[r].size()) / static_cast<double>(ops);
    if (late[r].empty()) continue;
    auto mid = late[r].begin() + static_cast<std::ptrdiff_t>(late[r].size() / 2);
    std::nth_element(late[r].begin(), mid, late[r].end());
    v.median_late_ns[r] = *mid;
    if (v.last_share[r] >= share && v.median_late_ns[r] >= min_late_ns && v.last_share[r] > best) {
      best = v.last_share[r];
      v.named = static_cast<int>(r);
    }
  }
  return v;
}

std::string encode_durations(const uint32_t* us, size_t n) {
  std::string out(n * 4, '\0');
  for (size_t i = 0; i < n; ++i)
    for (int b = 0; b < 4; ++b) out[i * 4 + static_cast<size_t>(b)] = static_cast<char>((us[i] >> (8 * b)) & 0xFF);
  return out;
}

bool decode_durations(const std::string& value, size_t n, std::vector<uint32_t>* out) {
  if (value.size() != n * 4) return false;
  out->assign(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (int b = 0; b < 4; ++b)
      (*out)[i] |= static_cast<uint32_t>(static_cast<unsigned char>(value[i * 4 + static_cast<size_t>(b)])) << (8 * b);
  return true;
}

namespace {
constexpr double kLeadS = 0.25;   // how far ahead of its own counting rank 0 asks (the others see the ask a tick or
                                  // a few later: their service threads may wait for a core)
constexpr int kMaxLeadShift = 6;  // the lead doubles with each window missed in a row, up to 64×
constexpr int kGiveUpTicks = 40;  // rank 0 gives up on a window this many ticks after publishing its own capture
const char* const kAskKey = "monitor/straggler/ask";
}  // namespace

StragglerExchange::StragglerExchange(StragglerPeers peers, size_t window, std::shared_ptr<Store> store,
                                     std::mutex& count_mutex)
    : peers_(std::move(peers)), window_(window), store_(std::move(store)), count_mutex_(count_mutex) {
  capture_.runs.assign(window_, 0);
}

void StragglerExchange::count(uint64_t coll_index, uint64_t run_ns, bool failed) {
  next_coll_ = coll_index + 1;
  Capture& c = capture_;
  if (failed) windows_stopped_ = true;
  if (c.window < 0 || c.missed || c.fill == window_) return;
  const uint64_t first = static_cast<uint64_t>(c.window) * window_;
  if (coll_index < first) return;
  if (failed || coll_index != first + c.fill) {  // a record of the window lost (or the communicator failed)
    c.missed = true;
    return;
  }
  c.runs[c.fill++] = static_cast<uint32_t>(std::min<uint64_t>(run_ns / 1000, UINT32_MAX));
}

StragglerVerdict StragglerExchange::verdict() const {
  std::lock_guard<std::mutex> lock(verdict_mutex_);
  return verdict_;
}

std::string StragglerExchange::window_key(uint64_t window, int rank) const {
  return "monitor/straggler/" + std::to_string(window) + "/" + std::to_string(rank);
}

// Begins capturing `window`; one counted already (the ask came too late), or any after a failed collective, is
// published as missed at once.
void StragglerExchange::start_capture(int64_t window) {
  bool missed;
  {
    std::lock_guard<std::mutex> lock(count_mutex_);
    Capture& c = capture_;
    c.window = window;
    c.fill = 0;
    c.missed = missed = windows_stopped_ || next_coll_ > static_cast<uint64_t>(window) * window_;
  }
  if (missed) publish(take_capture());
}

// The capture once it is full or missed (then the counting captures nothing until the next start); else window -1.
StragglerExchange::Capture StragglerExchange::take_capture() {
  std::lock_guard<std::mutex> lock(count_mutex_);
  Capture& c = capture_;
  if (c.window < 0 || (!c.missed && c.fill < window_)) return Capture{};
  Capture taken{c.window, c.fill, c.missed, {}};
  if (!c.missed) taken.runs = c.runs;
  c.window = -1;
  return taken;
}

uint64_t StragglerExchange::colls_counted() const {
  std::lock_guard<std::mutex> lock(count_mutex_);
  return next_coll_;
}

// A missed capture is published as an empty value, so that rank 0 need not wait for it.
void StragglerExchange::publish(const Capture& t) {
  const std::string value = t.missed ? std::string() : encode_durations(t.runs.data(), t.runs.size());
  ZW_TRACE(kColl, "straggler window %lld: published%s", static_cast<long long>(t.window), t.missed ? " (missed)" : "");
  Status s = store_->set(window_key(static_cast<uint64_t>(t.window), peers_.rank), value);
  if (!s.ok())
    ZW_INFO(kColl, "straggler window %lld not published: %s", static_cast<long long>(t.window), s.to_string().c_str());
  published_ = true;
}

void StragglerExchange::tick() {
  if (peers_.rank == 0) {
    if (Capture t = take_capture(); t.window >= 0) publish(t);
    drive_judge();
  } else {
    follow_ask();
  }
}

// Ranks other than 0: publish a finished capture if rank 0 still wants it, and while nothing is being captured, read
// which window rank 0 wants now (one request per tick).
void StragglerExchange::follow_ask() {
  Capture t = take_capture();
  if (asked_ >= 0 && !published_ && t.window < 0) return;  // capturing
  Result<int64_t> ask = store_->add(kAskKey, 0);
  const int64_t wanted = ask.ok() ? ask.value() - 1 : asked_;
  if (t.window >= 0) {
    if (t.window == wanted)
      publish(t);
    else
      published_ = true;  // rank 0 gave up on it meanwhile: dropped, so that no key is left behind
  }
  if (wanted <= asked_) return;
  ZW_TRACE(kColl, "straggler window %lld: capturing (%llu collectives counted)", static_cast<long long>(wanted),
           static_cast<unsigned long long>(colls_counted()));
  asked_ = wanted;
  published_ = false;
  start_capture(asked_);
}

// Rank 0: judges the window it asked for once every rank published it (or gives up on it), then asks for the next.
void StragglerExchange::drive_judge() {
  const int64_t now = static_cast<int64_t>(now_ns());
  const uint64_t colls = colls_counted();
  const bool first = rate_ns_ == 0;
  if (!first && now > rate_ns_) rate_ = double(colls - rate_colls_) * 1e9 / double(now - rate_ns_);
  rate_colls_ = colls;
  rate_ns_ = now;
  if (first) return;  // the lead needs the collectives' rate: the first ask waits a tick
  if (asked_open_) judge_asked();
  if (!asked_open_) ask_next();
}

void StragglerExchange::ask_next() {
  // The first window that starts at least kLeadS (× 2^misses) of collectives beyond what rank 0 has counted (and at
  // least a window ahead).
  const double lead = kLeadS * double(1 << std::min(misses_in_row_, kMaxLeadShift));
  const uint64_t ahead = std::max<uint64_t>(static_cast<uint64_t>(rate_ * lead), window_);
  const uint64_t from = colls_counted() + ahead;
  const int64_t window = static_cast<int64_t>((from + window_ - 1) / window_);
  Result<int64_t> ask = store_->add(kAskKey, window + 1 - ask_value_);
  if (!ask.ok()) {
    ZW_INFO(kColl, "straggler window %lld not asked for: %s", static_cast<long long>(window),
            ask.status().to_string().c_str());
    return;
  }
  ZW_TRACE(kColl, "straggler window %lld asked for (%llu collectives counted, %.0f/s)", static_cast<long long>(window),
           static_cast<unsigned long long>(colls_counted()), rate_);
  ask_value_ = ask.value();
  asked_ = window;
  asked_open_ = true;
  published_ = false;
  ticks_waited_ = 0;
  start_capture(window);
}

void StragglerExchange::judge_asked() {
  if (!published_) return;  // rank 0's own capture is not complete yet
  std::vector<std::string> keys;
  for (int r = 0; r < peers_.size; ++r) keys.push_back(window_key(static_cast<uint64_t>(asked_), r));
  const bool all = store_->wait(keys, Store::Timeout(0)).ok();  // answers at once
  if (!all && ++ticks_waited_ < kGiveUpTicks) return;
  std::vector<std::vector<uint32_t>> runs(static_cast<size_t>(peers_.size));
  bool whole = all;
  for (int r = 0; r < peers_.size; ++r) {
    const std::string& key = keys[static_cast<size_t>(r)];
    if (whole) {
      auto value = store_->get(key, Store::Timeout(0));
      whole = value.ok() && decode_durations(value.value(), window_, &runs[static_cast<size_t>(r)]);
    }
    (void)store_->del(key);
  }
  asked_open_ = false;
  const char* outcome = whole ? "judged" : all ? "missed by a rank" : "given up";
  ZW_TRACE(kColl, "straggler window %lld: %s", static_cast<long long>(asked_), outcome);
  if (!whole) {
    ++misses_in_row_;
    missed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  misses_in_row_ = 0;
  const Knobs& k = knobs();
  StragglerVerdict v = judge_window(runs, k.straggler_share, k.straggler_min_us * 1000.0);
  v.window = static_cast<uint64_t>(asked_);
  if (v.named >= 0) {
    const size_t r = static_cast<size_t>(v.named);
    log::set_thread_rank(peers_.rank);  // the verdict is rank 0's
    ZW_WARN(kColl,
            "straggler: rank %d (host %s, pid %d) arrived last at %.0f%% of the last %llu collectives of "
            "communicator '%s', median %.2f ms behind the next-latest rank (ZW_STRAGGLER_WINDOW/_SHARE/_MIN_US)",
            v.named, peers_.hosts[r].c_str(), peers_.pids[r], 100.0 * v.last_share[r],
            static_cast<unsigned long long>(v.ops), peers_.comm.c_str(), v.median_late_ns[r] / 1e6);
  }
  {
    std::lock_guard<std::mutex> lock(verdict_mutex_);
    verdict_ = std::move(v);
  }
  judged_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace zw::internal::monitor
