// The blame protocol: who an operation that timed out really waits for.
//
// A rank that times out usually waits on a neighbour that is only waiting itself, so naming the neighbour blames the
// wrong rank. On a timeout (only then: nothing here runs on the normal path but a few stores per message), the rank
// 1. writes its report to the store (which survives dead links) under "blame/<op>/<rank>": the operation it is in,
//    the peer and the message it waits for, the ranks it sees stopped on its own host (/proc), and the last operation
//    each peer's messages belonged to;
// 2. asks every peer over the links to do the same (BLAME_QUERY; a peer answers from its wait loop, so a rank that is
//    stopped, dead, hung outside zerowire or not calling collectives cannot);
// 3. collects the reports for a short grace (kGraceMax, at most half the timeout) and follows the wait-for edges:
//    a rank that someone waits for and that did not report is the culprit. Its name, whether a rank on its host saw it
//    stopped, and the last operation its messages carried (number and description) end the error, which the rank
//    then forwards to all (the communicator's abort), so every survivor names the same rank. This works across
//    hosts; /proc only adds "is stopped" where a reporter shares the culprit's host.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "collectives/rendezvous/rendezvous.h"
#include "collectives/rendezvous/rendezvous_wire.h"
#include "common/knobs.h"
#include "common/process.h"
#include "common/socket.h"

namespace zw::internal {
namespace {

constexpr double kGraceMax = 1.0;  // seconds the timed-out rank waits for the others' reports
constexpr auto kPoll = std::chrono::milliseconds(20);

struct Report {
  uint64_t seq = 0;
  std::string desc;
  int waits = -1;  // the peer it waits for (-1: none, or its own writes)
  std::string what;
  std::vector<int> stopped;                              // ranks on its host in state T
  std::map<int, std::pair<uint64_t, std::string>> seen;  // peer -> last operation its messages carried
};

// Lines "key value": seq, desc, waits, what, stopped r r ..., seen peer seq desc (one per peer).
Report parse_report(const std::string& text) {
  Report r;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    std::string rest;
    std::getline(ls >> std::ws, rest);
    if (key == "seq") r.seq = std::strtoull(rest.c_str(), nullptr, 10);
    if (key == "desc") r.desc = rest;
    if (key == "waits") r.waits = std::atoi(rest.c_str());
    if (key == "what") r.what = rest;
    if (key == "stopped") {
      std::istringstream rs(rest);
      for (int x; rs >> x;) r.stopped.push_back(x);
    }
    if (key == "seen") {
      std::istringstream rs(rest);
      int peer = -1;
      uint64_t seq = 0;
      rs >> peer >> seq;
      std::string desc;
      std::getline(rs >> std::ws, desc);
      if (peer >= 0) r.seen[peer] = {seq, desc};
    }
  }
  return r;
}

std::string key_of(uint64_t seq, int rank) { return "blame/" + std::to_string(seq) + "/" + std::to_string(rank); }

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return ranks.size() > 8 ? out + " and " + std::to_string(ranks.size() - 8) + " more" : out;
}

}  // namespace

std::string rank_host_name() { return knobs().hostname.empty() ? net::hostname() : knobs().hostname; }

std::vector<int> Rendezvous::stopped_local_ranks() const {
  std::vector<int> out;
  if (rank_ < 0 || rank_ >= static_cast<int>(peers_.size())) return out;
  for (size_t p = 0; p < peers_.size(); ++p) {
    if (static_cast<int>(p) == rank_ || peers_[p].pid <= 0 || peers_[p].host != peers_[size_t(rank_)].host) continue;
    char state = '?';
    uint64_t start = 0;
    if (read_proc_stat(peers_[p].pid, &state, &start) && (state == 'T' || state == 't')) out.push_back(int(p));
  }
  return out;
}

std::string Rendezvous::blame_record() const {
  std::string out = "seq " + std::to_string(seq_) + "\ndesc " + desc_.describe() + "\nwaits " +
                    std::to_string(waiting_peer_ == rank_ ? -1 : waiting_peer_) + "\nwhat " + waiting_what_ +
                    "\nstopped";
  for (int r : stopped_local_ranks()) out += " " + std::to_string(r);
  out += "\n";
  for (size_t p = 0; p < state_.size(); ++p)
    if (state_[p].seen_seq > 0)
      out += "seen " + std::to_string(p) + " " + std::to_string(state_[p].seen_seq) + " " +
             state_[p].seen_desc.describe() + "\n";
  return out;
}

void Rendezvous::on_blame_query(int peer, std::span<const std::byte> payload) {
  BlameQueryWire w;
  if (!blame_store_ || payload.size() < sizeof w) return;
  std::memcpy(&w, payload.data(), sizeof w);
  if (w.seq == answered_blame_) return;
  answered_blame_ = w.seq;
  (void)peer;
  (void)blame_store_->set(key_of(w.seq, rank_), blame_record());
}

Status Rendezvous::blame_timeout(int peer, const std::string& waited) {
  const int n = static_cast<int>(peers_.size());
  std::map<int, Report> reports;
  reports[rank_] = parse_report(blame_record());
  if (blame_store_ && n > 1) {
    (void)blame_store_->set(key_of(seq_, rank_), blame_record());
    std::byte buf[sizeof(BlameQueryWire)];
    BlameQueryWire w{};
    w.type = kCtrlBlameQuery;
    w.seq = seq_;
    std::memcpy(buf, &w, sizeof w);
    for (auto& ep : endpoints_)
      if (ep) (void)ep->send(std::span<const std::byte>(buf, sizeof w));
    const auto until = Clock::now() + std::chrono::duration<double>(std::min(kGraceMax, timeout_s_ / 2));
    for (bool first = true; first || Clock::now() < until; first = false) {
      (void)pump();  // answers the queries of ranks that timed out too (their aborts change nothing now)
      for (int p = 0; p < n; ++p) {
        // A rank one operation behind or ahead (it timed out there, or answered a query from there) reported under
        // that operation's number.
        for (uint64_t s : {seq_, seq_ - 1, seq_ + 1}) {
          if (reports.count(p) || s == 0) continue;
          auto got = blame_store_->get(key_of(s, p), std::chrono::milliseconds(1));
          if (got.ok()) reports[p] = parse_report(got.value());
        }
      }
      if (static_cast<int>(reports.size()) == n) break;
      std::this_thread::sleep_for(kPoll);
    }
  }
  // Who is waited for and did not report; who reported from another operation.
  std::set<int> waited_on{peer}, stopped;
  std::map<int, std::pair<uint64_t, std::string>> last;
  for (const auto& [r, rep] : reports) {
    if (rep.waits >= 0) waited_on.insert(rep.waits);
    stopped.insert(rep.stopped.begin(), rep.stopped.end());
    for (const auto& [p, s] : rep.seen)
      if (s.first >= last[p].first) last[p] = s;
  }
  for (int p = 0; p < n; ++p)
    if (state_[p].seen_seq > last[p].first) last[p] = {state_[p].seen_seq, state_[p].seen_desc.describe()};
  std::vector<int> culprits, waiting;
  std::string elsewhere;  // reporters in another operation: "rank 3 in #6"
  for (int p : waited_on)
    if (p != rank_ && p >= 0 && p < n && !reports.count(p)) culprits.push_back(p);
  for (const auto& [r, rep] : reports) {
    if (rep.seq == seq_) {
      waiting.push_back(r);
    } else {
      elsewhere += ", rank " + std::to_string(r) + " in #" + std::to_string(rep.seq) +
                   (culprits.empty() ? " " + rep.desc : std::string());
    }
  }
  std::string verdict;
  for (size_t i = 0; i < culprits.size() && i < 3; ++i) {
    const int q = culprits[i];
    const char* state = stopped.count(q)        ? " is stopped (SIGSTOP or a debugger)"
                        : last[q].first >= seq_ ? " does not answer"  // it started this operation
                                                : " never arrived";
    verdict += "; " + describe(q) + state;
    if (last[q].first > 0) verdict += ", last seen in #" + std::to_string(last[q].first) + " " + last[q].second;
  }
  if (verdict.empty() && elsewhere.empty())
    return Status(Code::kTimeout, waited +
                                      ": it may be stuck, much slower, or not calling this collective; "
                                      "raise ZW_TIMEOUT if it is only slow");
  // The culprits come last: a reason forwarded to the other ranks keeps its head and its tail.
  return Status(Code::kTimeout, waited + " (ranks " + rank_list(waiting) + " reported waiting in #" +
                                    std::to_string(seq_) + elsewhere + "; raise ZW_TIMEOUT if ranks are only slow)" +
                                    verdict);
}

}  // namespace zw::internal
