// Straggler judgement over one window of collectives' run times (see straggler.h).
#include "collectives/monitor/straggler.h"

#include <algorithm>
#include <cstring>

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

}  // namespace zw::internal::monitor
