// The TCP store's request logic: key-value map, counters and parked waiters.
#include "bootstrap/store_engine.h"

#include <algorithm>
#include <utility>

#include "bootstrap/store_util.h"

namespace zw::store {
namespace {

std::string frame_of(Op op, std::string text = {}, int64_t number = 0) {
  Reply r;
  r.op = op;
  r.text = std::move(text);
  r.number = number;
  return encode_reply(r);
}

std::string error_frame(const Status& status) { return encode_reply(error_reply(status)); }

}  // namespace

Status StoreEngine::handle(uint64_t conn, std::string_view payload, Clock::time_point now, std::vector<Out>* out) {
  ZW_ASSIGN_OR_RETURN(Request request, decode_request(payload));
  switch (request.op) {
    case Op::kSet:
      set(request.key, std::move(request.value), out);
      out->push_back({conn, frame_of(Op::kOk)});
      return Status();
    case Op::kGet:
    case Op::kWait:
      get_or_wait(conn, std::move(request), now, out);
      return Status();
    case Op::kAdd: {
      auto it = kv_.find(request.key);
      Result<int64_t> sum = add_to_counter(request.key, it == kv_.end() ? nullptr : &it->second, request.number);
      if (!sum.ok()) {
        out->push_back({conn, error_frame(sum.status())});
        return Status();
      }
      set(request.key, std::to_string(*sum), out);
      out->push_back({conn, frame_of(Op::kInt, {}, *sum)});
      return Status();
    }
    case Op::kDel: {
      bool existed = kv_.erase(request.key) != 0;
      out->push_back({conn, frame_of(Op::kBool, {}, existed ? 1 : 0)});
      return Status();
    }
    default:
      return Status(Code::kProtocolError, "unexpected HELLO on an authenticated connection");
  }
}

void StoreEngine::set(const std::string& key, std::string value, std::vector<Out>* out) {
  kv_[key] = std::move(value);
  wake(key, out);
}

void StoreEngine::get_or_wait(uint64_t conn, Request request, Clock::time_point now, std::vector<Out>* out) {
  Parked p;
  p.op = request.op;
  p.keys = request.op == Op::kGet ? std::vector<std::string>{std::move(request.key)} : std::move(request.keys);
  p.timeout_ms = request.number;
  p.deadline = deadline_after(now, request.number);
  if (try_complete(conn, p, out)) return;
  if (p.deadline <= now) {  // a zero timeout answers at once
    unindex(conn, p.waiting_on);
    std::vector<std::string> missing;
    for (const std::string& k : p.keys)
      if (kv_.count(k) == 0) missing.push_back(k);
    out->push_back({conn, error_frame(key_timeout(missing, p.keys.size(), p.timeout_ms))});
    return;
  }
  parked_.emplace(conn, std::move(p));
}

bool StoreEngine::try_complete(uint64_t conn, Parked& p, std::vector<Out>* out) {
  for (const std::string& k : p.keys) {
    if (kv_.count(k) != 0) continue;
    p.waiting_on = k;
    waiters_[k].push_back(conn);
    return false;
  }
  if (p.op == Op::kGet)
    out->push_back({conn, frame_of(Op::kValue, kv_[p.keys[0]])});
  else
    out->push_back({conn, frame_of(Op::kOk)});
  return true;
}

void StoreEngine::wake(const std::string& key, std::vector<Out>* out) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<uint64_t> conns = std::move(it->second);
  waiters_.erase(it);
  for (uint64_t conn : conns) {
    auto p = parked_.find(conn);
    if (p == parked_.end() || p->second.waiting_on != key) continue;
    if (try_complete(conn, p->second, out)) parked_.erase(p);
  }
}

void StoreEngine::unindex(uint64_t conn, const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), conn), v.end());
  if (v.empty()) waiters_.erase(it);
}

void StoreEngine::expire(Clock::time_point now, std::vector<Out>* out) {
  for (auto it = parked_.begin(); it != parked_.end();) {
    Parked& p = it->second;
    if (p.deadline > now) {
      ++it;
      continue;
    }
    std::vector<std::string> missing;
    for (const std::string& k : p.keys)
      if (kv_.count(k) == 0) missing.push_back(k);
    out->push_back({it->first, error_frame(key_timeout(missing, p.keys.size(), p.timeout_ms))});
    unindex(it->first, p.waiting_on);
    it = parked_.erase(it);
  }
}

void StoreEngine::forget(uint64_t conn) {
  auto it = parked_.find(conn);
  if (it == parked_.end()) return;
  unindex(conn, it->second.waiting_on);
  parked_.erase(it);
}

std::optional<Clock::time_point> StoreEngine::next_deadline() const {
  std::optional<Clock::time_point> next;
  for (const auto& [conn, p] : parked_)
    if (!next || p.deadline < *next) next = p.deadline;
  return next;
}

}  // namespace zw::store
