// tests/fuzz/fuzz_peer_record.cc — the record every rank puts in the store when a communicator is created
// (src/collectives/peer_record.h: decode_peer_record), read back by every other rank. The store holds whatever a
// peer, or anyone with the job's token, wrote under that key.
//
// Checked: a refused record is a protocol error naming the rank; an accepted record is canonical — its fields,
// printed as encode_peer_record prints them, give the input back (hex digits in either case), with a pid and a world
// size in [1, 2^31), and an address and a host that are not empty and hold no NUL; and what the real encoder makes
// of the decoded fields decodes to the same fields.
// Non-goals: whether the address is reachable (the transport's connect says so).
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "collectives/peer_record.h"
#include "fuzz_check.h"

using namespace zw;
using namespace zw::internal;

namespace {

std::string hex_of(const std::vector<std::byte>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    out += digits[static_cast<uint8_t>(b) >> 4];
    out += digits[static_cast<uint8_t>(b) & 15];
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  Result<PeerRecord> r = decode_peer_record(text, 3);
  if (!r.ok()) {
    FUZZ_CHECK(r.status().code() == Code::kProtocolError, r.status().to_string());
    FUZZ_CHECK(r.status().message().find("rank 3") != std::string::npos, r.status().to_string());
    return 0;
  }
  FUZZ_CHECK(r->info.pid >= 1 && r->world_size >= 1, "pid " + std::to_string(r->info.pid));
  FUZZ_CHECK(!r->address.empty() && !r->info.host.empty(), "an empty address or host was accepted");
  FUZZ_CHECK(r->address.find('\0') == std::string::npos && r->info.host.find('\0') == std::string::npos,
             "a NUL in the address or host was accepted");
  const std::string printed = r->address + "\n" + r->info.host + "\n" + std::to_string(r->info.pid) + "\n" +
                              std::to_string(r->world_size) + "\n" + hex_of(r->inbox_key);
  std::string lowered = text;
  const size_t last = lowered.rfind('\n') + 1;
  std::transform(lowered.begin() + last, lowered.end(), lowered.begin() + last,
                 [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  FUZZ_CHECK(printed == lowered, "not canonical: accepted '" + text + "'");

  Result<PeerRecord> again = decode_peer_record(encode_peer_record(r->address, r->world_size, r->inbox_key), 3);
  FUZZ_CHECK(again.ok(), again.status().to_string());
  FUZZ_CHECK(again->address == r->address && again->world_size == r->world_size && again->inbox_key == r->inbox_key &&
                 again->info.pid == getpid(),
             "the encoder's record decodes differently");
  return 0;
}
