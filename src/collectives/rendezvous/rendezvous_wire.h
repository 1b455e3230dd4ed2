// Control messages of the rendezvous protocol, as they travel in transport control messages. Ranks of one job
// share an architecture, so the structs are copied as they are.
#pragma once

#include <cstdint>

#include "transport/transport.h"

namespace zw::internal {

enum : uint8_t { kCtrlCts = 1, kCtrlAbort = 2, kCtrlEager = 3, kCtrlCredit = 4, kCtrlRefuse = 5, kCtrlBlameQuery = 6 };

// The operation a message belongs to, for desync checks.
struct OpWire {
  uint8_t kind;
  uint8_t algo;
  uint8_t dtype;
  uint8_t op;
  uint32_t root;
  uint64_t count;
  uint64_t seq;
};

// Clear-to-send, followed by the remote key bytes.
struct CtsWire {
  uint8_t type;
  uint8_t key_len;
  uint16_t reserved;
  uint32_t credits;  // eager slots 0..31 of the receiver of this message that its sender returns (piggybacked)
  OpWire op;
  uint64_t tag;
  uint64_t offset;
  uint64_t bytes;
};
constexpr size_t kMaxKey = transport::Message::kMaxControl - sizeof(CtsWire);

// Eager data announced: it lies in inbox slot `slot` of the receiver.
struct EagerWire {
  uint8_t type;
  uint8_t reserved[3];
  uint32_t slot;
  OpWire op;
  uint64_t tag;
  uint64_t bytes;
  uint64_t credits;  // bit i: the sender of this message returns slot i of the receiver's inbox (piggybacked)
};

// The receiver returns inbox slots to their sender: bit i of `slots` is slot i.
struct CreditWire {
  uint8_t type;
  uint8_t reserved[7];
  uint64_t slots;
};

// The sender refused its call of operation `seq` as a usage error (refusal.h); the reason's text follows.
struct RefuseWire {
  uint8_t type;
  uint8_t reserved[7];
  uint64_t seq;
};

// The sender timed out in operation `seq` and asks for every rank's report in the store (blame.cc).
struct BlameQueryWire {
  uint8_t type;
  uint8_t reserved[7];
  uint64_t seq;
};

// The sender failed (or was aborted) and stops; the reason's text follows, cut to fit (broadcast_abort). The ranks
// it lost travel apart from the text, so that every rank's error names them however long the reason: up to
// kMaxAbortLost of them (those it found dead, those whose link failed, and those that ranks aborting before it lost).
constexpr size_t kMaxAbortLost = 4;
struct AbortWire {
  uint8_t type;
  uint8_t listed;     // entries of lost[] in use
  uint16_t reserved;
  uint32_t lost_total;  // how many ranks it lost, listed or not
  uint32_t lost[kMaxAbortLost];
};

// Notify value of eager writes (ignored: the EAGER message that follows carries the meaning).
constexpr uint64_t kEagerNotify = uint64_t{1} << 63;

inline OpWire to_wire(const OpDesc& d, uint64_t seq) {
  return OpWire{static_cast<uint8_t>(d.kind), static_cast<uint8_t>(d.algo), static_cast<uint8_t>(d.dtype),
                static_cast<uint8_t>(d.op), d.root, d.count, seq};
}

// Whether every field names something this build knows (a peer's message is checked before from_wire).
inline bool known_op(const OpWire& w) {
  return w.kind <= static_cast<uint8_t>(OpKind::kSendRecv) && w.algo <= static_cast<uint8_t>(Algo::kTree) &&
         w.dtype < kNumDataTypes && w.op < kNumReduceOps;
}

inline OpDesc from_wire(const OpWire& w) {
  return OpDesc{static_cast<OpKind>(w.kind), static_cast<Algo>(w.algo), static_cast<DataType>(w.dtype),
                static_cast<ReduceOp>(w.op), w.root, w.count};
}

}  // namespace zw::internal
