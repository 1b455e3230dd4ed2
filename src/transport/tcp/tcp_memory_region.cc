// Registered memory of the tcp transport (see tcp_memory_region.h).
#include "transport/tcp/tcp_memory_region.h"

#include <cstring>
#include <string>

namespace zw::transport::tcp {

std::vector<std::byte> encode_key(const RemoteKey& key) {
  std::vector<std::byte> out(sizeof key);
  std::memcpy(out.data(), &key, sizeof key);
  return out;
}

Result<RemoteKey> decode_key(std::span<const std::byte> bytes) {
  RemoteKey key;
  if (bytes.size() != sizeof key)
    return Status(Code::kInvalidArgument, "remote key of " + std::to_string(bytes.size()) +
                                              " bytes is not a tcp key (" + std::to_string(sizeof key) +
                                              " bytes); was it made by another transport?");
  std::memcpy(&key, bytes.data(), sizeof key);
  if (key.magic != kRemoteKeyMagic)
    return Status(Code::kInvalidArgument, "remote key is not a tcp key (bad magic); was it made by another transport?");
  return key;
}

uint32_t RegionTable::add(const MemRef& mem) {
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t id = next_id_++;
  regions_.emplace(id, mem);
  return id;
}

void RegionTable::remove(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  regions_.erase(id);
}

bool RegionTable::lookup(uint32_t id, MemRef* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) return false;
  *out = it->second;
  return true;
}

TcpMemoryRegion::TcpMemoryRegion(MemRef mem, int rank, std::shared_ptr<RegionTable> table)
    : MemoryRegion(mem), rank_(rank), id_(table->add(mem)), table_(std::move(table)) {}

TcpMemoryRegion::~TcpMemoryRegion() { table_->remove(id_); }

std::vector<std::byte> TcpMemoryRegion::remote_key() const {
  RemoteKey key;
  key.region_id = id_;
  key.length = mem().bytes;
  key.base = reinterpret_cast<uintptr_t>(mem().ptr);
  key.rank = rank_;
  return encode_key(key);
}

}  // namespace zw::transport::tcp
