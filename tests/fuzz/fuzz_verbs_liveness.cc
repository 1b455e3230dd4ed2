// tests/fuzz/fuzz_verbs_liveness.cc — what a client of a verbs liveness listener sends (src/transport/verbs,
// verbs_liveness_wire.h: LivenessReader, fed by LivenessMonitor::service): an 8-byte hello {magic, rank}, then
// anything, of which only the goodbye byte counts. The listener is unauthenticated, so any process that reaches the
// port may send these bytes.
//
// The first byte picks the accepting rank and world size (rank < world <= 64) and how the rest is cut into the
// pieces recv() would return. Checked: the reader accepts exactly the hello the real encoder (encode_liveness_hello)
// writes for a lower rank, and refuses every other complete hello; the verdict, the peer and the goodbye flag do not
// depend on how the bytes were cut; a goodbye is seen exactly when a goodbye byte follows an accepted hello; nothing
// after a refusal changes the verdict.
// Non-goals: the sockets, keep-alive and the monitor thread (tests/transport/verbs/verbs_liveness_test.cc).
#include <cstring>

#include "fuzz_check.h"
#include "transport/verbs/verbs_liveness_wire.h"

using namespace zw::transport::verbs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int world = 1 + data[0] % 64;
  const int rank = data[1] % world;
  const uint8_t cut = data[0] ^ data[1];
  data += 2;
  size -= 2;

  LivenessReader whole(rank, world), pieces(rank, world);
  whole.feed({data, size});
  LivenessReader::State last = LivenessReader::State::kHello;
  for (size_t at = 0, i = 0; at < size; ++i) {
    const size_t n = std::min<size_t>(size - at, 1 + ((cut >> (i % 8)) & 7) * (i % 3 + 1));
    const auto state = pieces.feed({data + at, n});
    FUZZ_CHECK(last != LivenessReader::State::kBad || state == LivenessReader::State::kBad, "a refusal was undone");
    last = state;
    at += n;
  }
  FUZZ_CHECK(whole.state() == pieces.state() && whole.peer() == pieces.peer() && whole.goodbye() == pieces.goodbye(),
             "the verdict depends on how the bytes arrived");

  if (size < kLivenessHelloBytes) {
    FUZZ_CHECK(whole.state() == LivenessReader::State::kHello && whole.peer() == -1 && !whole.goodbye(),
               "a verdict before the whole hello");
    return 0;
  }
  uint32_t claimed = 0;
  std::memcpy(&claimed, data + 4, 4);
  const bool valid =
      claimed < static_cast<uint32_t>(rank) &&
      std::memcmp(data, encode_liveness_hello(static_cast<int>(claimed)).data(), kLivenessHelloBytes) == 0;
  FUZZ_CHECK(whole.state() == (valid ? LivenessReader::State::kPeer : LivenessReader::State::kBad),
             "hello for rank " + std::to_string(claimed) + " at rank " + std::to_string(rank) + " of " +
                 std::to_string(world));
  FUZZ_CHECK(!valid || whole.peer() == static_cast<int>(claimed), "wrong peer");
  const bool bye = valid && std::memchr(data + kLivenessHelloBytes, kLivenessGoodbye, size - kLivenessHelloBytes);
  FUZZ_CHECK(whole.goodbye() == bye, "goodbye flag wrong");
  return 0;
}
