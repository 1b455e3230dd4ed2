// Registered regions and remote keys of the shm transport.
#include "transport/shm/shm_memory_region.h"

#include <unistd.h>

#include <cstring>
#include <string>

namespace zw::transport {
namespace {

constexpr uint32_t kKeyMagic = 0x4b53575a;  // "ZWSK"

}  // namespace

std::vector<std::byte> ShmRemoteKey::serialize() const {
  std::vector<std::byte> out(kBytes);
  std::memcpy(out.data(), &kKeyMagic, 4);
  std::memcpy(out.data() + 4, &pid, 4);
  std::memcpy(out.data() + 8, &address, 8);
  std::memcpy(out.data() + 16, &length, 8);
  return out;
}

Result<ShmRemoteKey> ShmRemoteKey::parse(std::span<const std::byte> bytes) {
  uint32_t magic = 0;
  if (bytes.size() == kBytes) std::memcpy(&magic, bytes.data(), 4);
  if (magic != kKeyMagic)
    return Status(Code::kInvalidArgument, "remote key of " + std::to_string(bytes.size()) +
                                              " bytes is not an shm transport key (expected " + std::to_string(kBytes) +
                                              " bytes from ShmMemoryRegion::remote_key)");
  ShmRemoteKey key;
  std::memcpy(&key.pid, bytes.data() + 4, 4);
  std::memcpy(&key.address, bytes.data() + 8, 8);
  std::memcpy(&key.length, bytes.data() + 16, 8);
  return key;
}

ShmMemoryRegion::ShmMemoryRegion(MemRef mem) : MemoryRegion(mem), pid_(static_cast<int32_t>(::getpid())) {}

std::vector<std::byte> ShmMemoryRegion::remote_key() const {
  ShmRemoteKey key;
  key.pid = pid_;
  key.address = reinterpret_cast<uintptr_t>(mem().ptr);
  key.length = mem().bytes;
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
