// transport/verbs/verbs_liveness_wire.h — the bytes of a verbs liveness connection (verbs_liveness.h): the 8-byte
// hello {magic, rank} the lower rank of a pair sends when it connects, and the goodbye byte either side sends before
// an orderly close; LivenessReader makes sense of what an accepted connection sends, in whatever pieces it arrives.
// Header-only and free of ibverbs, so tests/fuzz (fuzz_verbs_liveness) builds it anywhere.
// Non-goals: the sockets themselves (verbs_liveness.cc).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>

namespace zw::transport::verbs {

constexpr uint32_t kLivenessMagic = 0x4c56575a;  // "ZWVL"
constexpr uint8_t kLivenessGoodbye = 'B';
constexpr size_t kLivenessHelloBytes = 8;

inline std::array<uint8_t, kLivenessHelloBytes> encode_liveness_hello(int rank) {
  std::array<uint8_t, kLivenessHelloBytes> out{};
  const uint32_t r = static_cast<uint32_t>(rank);
  std::memcpy(out.data(), &kLivenessMagic, 4);
  std::memcpy(out.data() + 4, &r, 4);
  return out;
}

// The accepted side of one liveness connection of rank `rank` in a world of `world_size`: the peer must be a lower
// rank (the lower rank of a pair connects). Bytes after the hello are ignored except the goodbye byte.
class LivenessReader {
 public:
  enum class State { kHello, kPeer, kBad };  // hello incomplete; hello from a valid lower rank; a bad hello (drop it)

  LivenessReader(int rank, int world_size) : rank_(rank), world_size_(world_size) {}

  // The connecting side: the peer sends no hello, only (perhaps) its goodbye.
  void connected_to(int peer) {
    state_ = State::kPeer;
    claimed_ = static_cast<uint32_t>(peer);
  }

  State feed(std::span<const uint8_t> bytes) {
    size_t used = 0;
    while (state_ == State::kHello && got_ < kLivenessHelloBytes && used < bytes.size()) hello_[got_++] = bytes[used++];
    if (state_ == State::kHello && got_ == kLivenessHelloBytes) {
      uint32_t magic = 0;
      std::memcpy(&magic, hello_, 4);
      std::memcpy(&claimed_, hello_ + 4, 4);
      const bool ok = magic == kLivenessMagic && claimed_ < static_cast<uint32_t>(world_size_) &&
                      static_cast<int64_t>(claimed_) < rank_;
      state_ = ok ? State::kPeer : State::kBad;
    }
    if (state_ == State::kPeer)
      for (size_t i = used; i < bytes.size(); ++i)
        if (bytes[i] == kLivenessGoodbye) goodbye_ = true;
    return state_;
  }

  State state() const { return state_; }
  int peer() const { return state_ == State::kPeer ? static_cast<int>(claimed_) : -1; }
  uint32_t claimed() const { return claimed_; }  // the rank a complete hello named (valid or not)
  bool goodbye() const { return goodbye_; }

 private:
  int rank_, world_size_;
  State state_ = State::kHello;
  uint8_t hello_[kLivenessHelloBytes] = {};
  size_t got_ = 0;
  uint32_t claimed_ = 0;
  bool goodbye_ = false;
};

}  // namespace zw::transport::verbs
