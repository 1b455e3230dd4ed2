// tests/fuzz/fuzz_unique_id.cc — the unique-id decoder (src/bootstrap/unique_id.cc: decode_unique_id, and
// net::parse_host_port under it), which connect_unique_id and ncclCommInitRank* (src/nccl/comm.cc copies the 128
// bytes of an ncclUniqueId into a zw::UniqueId) run on bytes a user passes around.
//
// The input fills the 128-byte id (zero-padded, or cut). Checked: an id that decodes re-encodes to the same 128
// bytes (encode_unique_id), its token is 32 lowercase hex digits, and every failure is kInvalidArgument.
// Non-goals: connecting to the store it names (no sockets in a fuzz target).
#include <cstring>

#include "bootstrap/bootstrap_internal.h"
#include "fuzz_check.h"

using namespace zw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  UniqueId id{};
  std::memcpy(id.bytes, data, std::min(size, sizeof id.bytes));
  Result<UniqueIdParts> parts = decode_unique_id(id);
  if (!parts.ok()) {
    FUZZ_CHECK(parts.status().code() == Code::kInvalidArgument, parts.status().to_string());
    return 0;
  }
  FUZZ_CHECK(parts->token.size() == 32, parts->token);
  Result<UniqueId> again = encode_unique_id(parts->address, parts->token);
  FUZZ_CHECK(again.ok(), again.status().to_string());
  FUZZ_CHECK(std::memcmp(again->bytes, id.bytes, sizeof id.bytes) == 0, "decoded id does not re-encode as given");
  return 0;
}
