// Memory registration and remote keys of the verbs transport.
#include "transport/verbs/verbs_memory_region.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "common/log.h"

namespace zw::transport::verbs {
namespace {

constexpr uint32_t kKeyMagic = 0x4b56575a;  // "ZWVK"

}  // namespace

std::vector<std::byte> VerbsRemoteKey::serialize() const {
  std::vector<std::byte> out(kBytes);
  std::memcpy(out.data(), &kKeyMagic, 4);
  std::memcpy(out.data() + 4, &rkey, 4);
  std::memcpy(out.data() + 8, &address, 8);
  std::memcpy(out.data() + 16, &length, 8);
  return out;
}

Result<VerbsRemoteKey> VerbsRemoteKey::parse(std::span<const std::byte> bytes) {
  uint32_t magic = 0;
  if (bytes.size() == kBytes) std::memcpy(&magic, bytes.data(), 4);
  if (magic != kKeyMagic)
    return Status(Code::kInvalidArgument, "remote key of " + std::to_string(bytes.size()) +
                                              " bytes is not a verbs transport key (expected " +
                                              std::to_string(kBytes) + " bytes from VerbsMemoryRegion::remote_key)");
  VerbsRemoteKey key;
  std::memcpy(&key.rkey, bytes.data() + 4, 4);
  std::memcpy(&key.address, bytes.data() + 8, 8);
  std::memcpy(&key.length, bytes.data() + 16, 8);
  return key;
}

VerbsMemoryRegion::VerbsMemoryRegion(MemRef mem, std::shared_ptr<VerbsDevice> device, ibv_mr* mr)
    : MemoryRegion(mem), device_(std::move(device)), mr_(mr) {}

VerbsMemoryRegion::~VerbsMemoryRegion() {
  if (mr_ && ibv_dereg_mr(mr_) != 0) ZW_WARN(kVerbs, "ibv_dereg_mr: %s", std::strerror(errno));
}

std::vector<std::byte> VerbsMemoryRegion::remote_key() const {
  VerbsRemoteKey key;
  key.rkey = mr_ ? mr_->rkey : 0;
  key.address = reinterpret_cast<uintptr_t>(mem().ptr);
  key.length = mem().bytes;
  return key.serialize();
}

Result<std::unique_ptr<MemoryRegion>> register_verbs_memory(const std::shared_ptr<VerbsDevice>& device, MemRef mem) {
  if (mem.kind != MemKind::kHost)
    return Status(Code::kUnsupported, std::string("the verbs transport cannot register ") + mem_kind_name(mem.kind) +
                                          " memory (device " + std::to_string(mem.device) +
                                          ") yet: only host memory (GPUDirect RDMA is not implemented)");
  if (mem.ptr == nullptr && mem.bytes != 0)
    return Status(Code::kInvalidArgument,
                  "cannot register a null pointer with " + std::to_string(mem.bytes) + " bytes");
  ibv_mr* mr = nullptr;
  if (mem.bytes > 0) {
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    mr = ibv_reg_mr(device->pd(), mem.ptr, mem.bytes, access);
    if (mr == nullptr) {
      int err = errno;
      std::string hint = err == ENOMEM || err == EAGAIN
                             ? ": the locked-memory limit is probably too low (ulimit -l; set it to unlimited)"
                             : "";
      return system_error("ibv_reg_mr of " + std::to_string(mem.bytes) + " bytes on " + device->name() + hint, err);
    }
  }
  return std::unique_ptr<MemoryRegion>(new VerbsMemoryRegion(mem, device, mr));
}

}  // namespace zw::transport::verbs
