// The TCP store's request logic, independent of sockets: the key-value map, the atomic counters, and the
// parked GET/WAIT requests that SET/ADD wake up.
//
// The server thread feeds it the payloads of authenticated connections and sends the encoded replies it
// returns. A GET or WAIT on a missing key parks its connection (at most one parked request per connection,
// since the server stops reading a connection while it is parked); waiters are indexed by the key they still
// miss, so a SET touches only the waiters of its key, and expire() answers overdue ones with TIMEOUT.
// Threading: not thread-safe; owned and used by the server thread only. Non-goals: I/O, authentication.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bootstrap/store_frame.h"
#include "common/clock.h"
#include "zerowire/status.h"

namespace zw::store {

class StoreEngine {
 public:
  struct Out {
    uint64_t conn;      // connection the reply goes to
    std::string frame;  // encoded reply frame
  };

  // Handles one request payload of connection `conn`; replies (to `conn` and to waiters it woke) are appended
  // to `out`. A non-ok Status means the payload was malformed: the caller answers ERROR and drops `conn`.
  Status handle(uint64_t conn, std::string_view payload, Clock::time_point now, std::vector<Out>* out);
  // Answers TIMEOUT to every parked request whose deadline is at or before `now`.
  void expire(Clock::time_point now, std::vector<Out>* out);
  // The connection closed: forget its parked request.
  void forget(uint64_t conn);
  bool parked(uint64_t conn) const { return parked_.count(conn) != 0; }
  // The earliest deadline of a parked request, if any.
  std::optional<Clock::time_point> next_deadline() const;
  size_t size() const { return kv_.size(); }

 private:
  struct Parked {
    Op op;                          // kGet or kWait
    std::vector<std::string> keys;  // the keys requested (one for GET)
    std::string waiting_on;         // the missing key this request is indexed under
    Clock::time_point deadline;     // when it times out
    int64_t timeout_ms;             // as requested, for the message
  };

  void set(const std::string& key, std::string value, std::vector<Out>* out);
  void get_or_wait(uint64_t conn, Request request, Clock::time_point now, std::vector<Out>* out);
  // Replies to `conn` and returns true when every key of `p` exists; else indexes `p` under a missing key.
  bool try_complete(uint64_t conn, Parked& p, std::vector<Out>* out);
  void wake(const std::string& key, std::vector<Out>* out);
  void unindex(uint64_t conn, const std::string& key);

  std::unordered_map<std::string, std::string> kv_;
  std::unordered_map<uint64_t, Parked> parked_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;  // missing key -> parked connections
};

}  // namespace zw::store
