// Registered regions and remote keys of the shm transport.
#include "transport/shm/shm_memory_region.h"

#include <unistd.h>

#include <cstring>
#include <string>

#include "transport/shm/shm_arena.h"

namespace zw::transport {
namespace {

constexpr uint32_t kKeyMagic = 0x4b53575a;       // "ZWSK"
constexpr uint32_t kArenaKeyMagic = 0x4153575a;  // "ZWSA"

}  // namespace

std::vector<std::byte> ShmRemoteKey::serialize() const {
  std::vector<std::byte> out(has_arena() ? kArenaBytes : kBytes);
  const uint32_t magic = has_arena() ? kArenaKeyMagic : kKeyMagic;
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &pid, 4);
  std::memcpy(out.data() + 8, &address, 8);
  std::memcpy(out.data() + 16, &length, 8);
  if (!has_arena()) return out;
  const uint32_t reserved = 0;
  std::memcpy(out.data() + 24, &memfd, 4);
  std::memcpy(out.data() + 28, &reserved, 4);
  std::memcpy(out.data() + 32, &arena_id, 8);
  std::memcpy(out.data() + 40, &arena_length, 8);
  std::memcpy(out.data() + 48, &arena_offset, 8);
  return out;
}

Result<ShmRemoteKey> ShmRemoteKey::parse(std::span<const std::byte> bytes) {
  uint32_t magic = 0;
  if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
  const bool plain = bytes.size() == kBytes && magic == kKeyMagic;
  const bool arena = bytes.size() == kArenaBytes && magic == kArenaKeyMagic;
  if (!plain && !arena)
    return Status(Code::kInvalidArgument, "remote key of " + std::to_string(bytes.size()) +
                                              " bytes is not an shm transport key (expected " + std::to_string(kBytes) +
                                              " or " + std::to_string(kArenaBytes) +
                                              " bytes from ShmMemoryRegion::remote_key)");
  ShmRemoteKey key;
  std::memcpy(&key.pid, bytes.data() + 4, 4);
  std::memcpy(&key.address, bytes.data() + 8, 8);
  std::memcpy(&key.length, bytes.data() + 16, 8);
  if (plain) return key;
  std::memcpy(&key.memfd, bytes.data() + 24, 4);
  std::memcpy(&key.arena_id, bytes.data() + 32, 8);
  std::memcpy(&key.arena_length, bytes.data() + 40, 8);
  std::memcpy(&key.arena_offset, bytes.data() + 48, 8);
  if (key.memfd < 0 || key.arena_id == 0 || key.arena_offset > key.arena_length ||
      key.length > key.arena_length - key.arena_offset)
    return Status(Code::kInvalidArgument, "malformed shm arena key from pid " + std::to_string(key.pid) +
                                              ": region of " + std::to_string(key.length) + " bytes at offset " +
                                              std::to_string(key.arena_offset) + " does not fit arena " +
                                              std::to_string(key.arena_id) + " of " + std::to_string(key.arena_length) +
                                              " bytes (memfd " + std::to_string(key.memfd) +
                                              "): was the key corrupted or made by another zerowire version?");
  return key;
}

ShmMemoryRegion::ShmMemoryRegion(MemRef mem) : MemoryRegion(mem), pid_(static_cast<int32_t>(::getpid())) {
  if (mem.bytes == 0) return;
  if (auto arena = find_shm_arena(mem.ptr, mem.bytes)) {
    arena_id_ = arena->id;
    memfd_ = arena->memfd;
    arena_base_ = arena->base;
    arena_length_ = arena->length;
  }
}

bool ShmMemoryRegion::still_valid() const {
  if (mem().bytes == 0) return true;
  auto arena = find_shm_arena(mem().ptr, mem().bytes);
  return arena ? arena->id == arena_id_ : arena_id_ == 0;
}

std::vector<std::byte> ShmMemoryRegion::remote_key() const {
  ShmRemoteKey key;
  key.pid = pid_;
  key.address = reinterpret_cast<uintptr_t>(mem().ptr);
  key.length = mem().bytes;
  if (arena_id_ != 0) {
    key.memfd = memfd_;
    key.arena_id = arena_id_;
    key.arena_length = arena_length_;
    key.arena_offset = key.address - arena_base_;
  }
  return key.serialize();
}

Result<std::unique_ptr<MemoryRegion>> register_shm_memory(MemRef mem) {
  if (mem.kind != MemKind::kHost)
    return Status(Code::kUnsupported, std::string("the shm transport cannot register ") + mem_kind_name(mem.kind) +
                                          " memory (device " + std::to_string(mem.device) +
                                          "): only host memory; use a transport with device_memory in its caps");
  if (mem.ptr == nullptr && mem.bytes != 0)
    return Status(Code::kInvalidArgument,
                  "cannot register a null pointer with " + std::to_string(mem.bytes) + " bytes");
  return std::unique_ptr<MemoryRegion>(new ShmMemoryRegion(mem));
}

}  // namespace zw::transport
