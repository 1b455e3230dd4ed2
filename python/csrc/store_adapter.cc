// The c10d::Store adapter (see store_adapter.h).
#include "store_adapter.h"

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace zwt {
namespace {

// Runs `fn`, turning a c10d exception into a Status that names the call and the key.
template <typename Fn>
zw::Status guarded(const char* call, const std::string& key, Fn&& fn) {
  try {
    fn();
    return zw::Status();
  } catch (const c10::DistStoreError& e) {
    const std::string what = e.what_without_backtrace();
    const bool timeout = what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos;
    return zw::Status(timeout ? zw::Code::kTimeout : zw::Code::kConnectionFailed,
                      std::string("torch store ") + call + "(" + key + "): " + what);
  } catch (const c10::Error& e) {
    return zw::Status(zw::Code::kConnectionFailed,
                      std::string("torch store ") + call + "(" + key + "): " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return zw::Status(zw::Code::kConnectionFailed, std::string("torch store ") + call + "(" + key + "): " + e.what());
  }
}

class C10dStore final : public zw::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  zw::Status set(const std::string& key, const std::string& value) override {
    return guarded("set", key, [&] { store_->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
  }
  zw::Result<std::string> get(const std::string& key, Timeout timeout) override {
    std::vector<uint8_t> bytes;
    ZW_TRY(guarded("get", key, [&] {
      store_->wait({key}, timeout);
      bytes = store_->get(key);
    }));
    return std::string(bytes.begin(), bytes.end());
  }
  zw::Status wait(const std::vector<std::string>& keys, Timeout timeout) override {
    return guarded("wait", keys.empty() ? std::string() : keys.front(), [&] { store_->wait(keys, timeout); });
  }
  zw::Result<int64_t> add(const std::string& key, int64_t delta) override {
    int64_t value = 0;
    ZW_TRY(guarded("add", key, [&] { value = store_->add(key, delta); }));
    return value;
  }
  zw::Result<bool> del(const std::string& key) override {
    bool existed = false;
    ZW_TRY(guarded("deleteKey", key, [&] { existed = store_->deleteKey(key); }));
    return existed;
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

std::shared_ptr<zw::Store> adapt_store(const c10::intrusive_ptr<c10d::Store>& store) {
  return std::make_shared<C10dStore>(store->clone());
}

}  // namespace zwt
