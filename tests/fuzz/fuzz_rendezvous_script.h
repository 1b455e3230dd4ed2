// tests/fuzz/fuzz_rendezvous_script.h — the input format of fuzz_rendezvous, shared with fuzz_corpus_gen, which
// writes its seeds: an 8-byte header, then records, each a tag byte and its arguments.
//
//   header: [world and rank] [eager slots] [eager bytes / 16] [kind + 8 x algo] [dtype] [reduction] [root] [count]
//   records (tag % kNumActions):
//     kControl..kControl+3  [peer] [len] [len bytes]   a control message arrives from `peer`
//     kNotify               [peer] [8 bytes]          a write's notification arrives from `peer`
//     kBegin                [seq - 1] [kind]          begin_op(seq) with the header's description and that kind
//     kPostRecv             [peer] [bytes:2] [tag]    post_recv
//     kSend                 [peer] [bytes:2] [tag]    send
//     kWaitRecv             [peer] [bytes:2] [tag]    wait_recv
//     kEndOp                                          end_op
//     kClose                [peer]                    the link to `peer` is lost
//     kWaitWrite            [peer]                    wait_write for the last write to `peer`
// A peer byte names rank (byte % world), or the next rank when that is the fuzzed rank itself.
// Non-goals: a general protocol simulator; the other ranks exist only as the messages the input gives.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace zw::fuzz::rv {

enum Action : uint8_t {
  kControl = 0,
  kNotify = 4,
  kBegin,
  kPostRecv,
  kSend,
  kWaitRecv,
  kEndOp,
  kClose,
  kWaitWrite,
  kNumActions
};

struct Header {
  uint8_t world_rank, slots, eager16, kind_algo, dtype, op, root, count;
};

inline std::string header(const Header& h) { return std::string(reinterpret_cast<const char*>(&h), sizeof h); }

inline std::string control(int peer, std::span<const std::byte> payload) {
  std::string out{char(kControl), char(peer), char(payload.size())};
  return out + std::string(reinterpret_cast<const char*>(payload.data()), payload.size());
}

inline std::string transfer(Action a, int peer, uint16_t bytes, uint8_t tag) {
  return std::string{char(a), char(peer), char(bytes & 0xFF), char(bytes >> 8), char(tag)};
}

inline std::string begin(uint8_t seq, uint8_t kind) { return std::string{char(kBegin), char(seq - 1), char(kind)}; }

}  // namespace zw::fuzz::rv
