// The store record of a rank at communicator creation (peer_record.h).
#include "collectives/peer_record.h"

#include <sys/random.h>
#include <unistd.h>

#include <cstdio>

namespace zw::internal {
namespace {

std::string to_hex(const unsigned char* p, size_t n) {
  std::string out;
  char hex[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", p[i]);
    out += hex;
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// False (out untouched) unless `text` is an even number of hex digits.
bool from_hex(const std::string& text, std::vector<std::byte>* out) {
  if (text.size() % 2 != 0) return false;
  std::vector<std::byte> bytes;
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = hex_digit(text[i]), lo = hex_digit(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes.push_back(static_cast<std::byte>(hi * 16 + lo));
  }
  *out = std::move(bytes);
  return true;
}

// A decimal integer in [lo, hi] written as the encoder writes it: digits only, no sign, blanks or leading zeros
// (strtol alone would take " +0012").
bool parse_int(const std::string& text, long lo, long hi, long* out) {
  if (text.empty() || text.size() > 10 || text[0] == '0') return false;
  long v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

// An address or host name: not empty, no NUL (C-string users would see another name than the store holds).
bool plain_text(const std::string& text) { return !text.empty() && text.find('\0') == std::string::npos; }

}  // namespace

std::string random_hex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return to_hex(raw.data(), raw.size());
}

std::string encode_peer_record(const std::string& address, int world_size, const std::vector<std::byte>& inbox_key) {
  return address + "\n" + rank_host_name() + "\n" + std::to_string(getpid()) + "\n" + std::to_string(world_size) +
         "\n" + to_hex(reinterpret_cast<const unsigned char*>(inbox_key.data()), inbox_key.size());
}

Result<PeerRecord> decode_peer_record(const std::string& text, int peer) {
  std::vector<std::string> lines;
  for (size_t at = 0;;) {
    size_t nl = text.find('\n', at);
    lines.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  PeerRecord r;
  long pid = 0, world = 0;
  if (lines.size() != 5 || !plain_text(lines[0]) || !plain_text(lines[1]) ||
      !parse_int(lines[2], 1, 0x7fffffffL, &pid) || !parse_int(lines[3], 1, 0x7fffffffL, &world) ||
      !from_hex(lines[4], &r.inbox_key))
    return Status(Code::kProtocolError, "malformed address record of rank " + std::to_string(peer) +
                                            " in the store (is it running the same zerowire version?)");
  r.address = lines[0];
  r.info.host = lines[1];
  r.info.pid = static_cast<int>(pid);
  r.world_size = static_cast<int>(world);
  return r;
}

}  // namespace zw::internal
