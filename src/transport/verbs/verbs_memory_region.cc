// Memory registration and remote keys of the verbs transport.
#include "transport/verbs/verbs_memory_region.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/log.h"

namespace zw::transport::verbs {
namespace detail {

std::atomic<uint64_t> g_registrations_destroyed{0};  // registrations_destroyed()

}  // namespace detail

std::vector<std::byte> VerbsRemoteKey::serialize() const {
  std::vector<std::byte> out(kBytes);
  std::memcpy(out.data(), device ? &kDeviceKeyMagic : &kKeyMagic, 4);
  std::memcpy(out.data() + 4, &rkey, 4);
  std::memcpy(out.data() + 8, &address, 8);
  std::memcpy(out.data() + 16, &length, 8);
  return out;
}

Result<VerbsRemoteKey> VerbsRemoteKey::parse(std::span<const std::byte> bytes) {
  VerbsRemoteKey key;
  if (!decode(bytes, &key))
    return Status(Code::kInvalidArgument, "remote key of " + std::to_string(bytes.size()) +
                                              " bytes is not a verbs transport key (expected " +
                                              std::to_string(kBytes) + " bytes from VerbsMemoryRegion::remote_key)");
  return key;
}

VerbsRegistration::VerbsRegistration(std::shared_ptr<VerbsDevice> device_in, ibv_mr* mr_in, uintptr_t start_in,
                                     size_t bytes_in)
    : device(std::move(device_in)), mr(mr_in), start(start_in), bytes(bytes_in) {}

VerbsRegistration::~VerbsRegistration() {
  detail::g_registrations_destroyed.fetch_add(1, std::memory_order_acq_rel);
  if (mr && ibv_dereg_mr(mr) != 0) ZW_WARN(kVerbs, "ibv_dereg_mr: %s", std::strerror(errno));
}

VerbsMemoryRegion::VerbsMemoryRegion(MemRef mem, std::shared_ptr<VerbsRegistration> reg,
                                     std::shared_ptr<const RegistrationValidator> validator)
    : MemoryRegion(mem), reg_(std::move(reg)), validator_(std::move(validator)) {}

std::vector<std::byte> VerbsMemoryRegion::remote_key() const {
  VerbsRemoteKey key;
  key.rkey = reg_->mr ? reg_->mr->rkey : 0;
  key.address = reinterpret_cast<uintptr_t>(mem().ptr);
  key.length = mem().bytes;
  key.device = mem().kind == MemKind::kCudaDevice;
  return key.serialize();
}

Result<std::shared_ptr<VerbsRegistration>> register_verbs_range(const std::shared_ptr<VerbsDevice>& device,
                                                                 MemRef mem) {
  if (mem.kind != MemKind::kHost)
    return Status(Code::kUnsupported, std::string("the verbs transport cannot register ") + mem_kind_name(mem.kind) +
                                          " memory (device " + std::to_string(mem.device) +
                                          ") as host memory");
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
  return std::make_shared<VerbsRegistration>(device, mr, reinterpret_cast<uintptr_t>(mem.ptr), mem.bytes);
}

}  // namespace zw::transport::verbs
