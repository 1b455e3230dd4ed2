// collectives/peer_record.h — the record each rank puts in the store at communicator creation (transport address,
// host, pid, world size, eager inbox key) and its decoding on the other ranks, plus the job's random id.
// The store may hold anything a peer (or a stranger with the token) wrote: decoding never throws and names the rank.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/rendezvous/rendezvous.h"
#include "zerowire/status.h"

namespace zw::internal {

struct PeerRecord {
  std::string address;               // the peer transport's address
  PeerInfo info;                     // host and pid
  int world_size = 0;                // the world size the peer was created with
  std::vector<std::byte> inbox_key;  // remote key of the peer's eager inbox (empty: eager off)
};

// One line each: transport address, this host's name, pid, world size, eager inbox key (hex).
std::string encode_peer_record(const std::string& address, int world_size, const std::vector<std::byte>& inbox_key);
// The record of rank `peer`; kProtocolError naming it when the text is not one.
Result<PeerRecord> decode_peer_record(const std::string& text, int peer);
// `bytes` random bytes (getrandom) as lowercase hex.
std::string random_hex(size_t bytes);

}  // namespace zw::internal
