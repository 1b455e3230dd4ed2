// The c10d::Store adapter (see store_adapter.h).
#include "store_adapter.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

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
    bool present = false;
    ZW_TRY(guarded("check", key, [&] { present = store_->check({key}); }));
    if (!present && timeout < kShortWait) {
      // Short waits (the blame protocol polls peers' reports with 1 ms) poll with check(): a TCPStore wait() that
      // times out leaves its connection slow (~150 ms for each later wait on torch 2.11), which stretched a
      // stuck-peer error from the group's 6 s timeout to 11 s.
      ZW_TRY(poll(key, timeout));
    } else if (!present) {
      ZW_TRY(guarded("wait", key, [&] { store_->wait({key}, timeout); }));
    }
    ZW_TRY(guarded("get", key, [&] { bytes = store_->get(key); }));
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
  static constexpr Timeout kShortWait{1000};  // shorter waits poll with check()

  // Until `key` is set (ok) or `timeout` has passed (kTimeout), checking every 1-10 ms.
  zw::Status poll(const std::string& key, Timeout timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
      bool present = false;
      ZW_TRY(guarded("check", key, [&] { present = store_->check({key}); }));
      if (present) return zw::Status();
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline)
        return zw::Status(zw::Code::kTimeout,
                          "torch store get(" + key + "): not set within " + std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(10));
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

std::shared_ptr<zw::Store> adapt_store(const c10::intrusive_ptr<c10d::Store>& store) {
  return std::make_shared<C10dStore>(store->clone());
}

}  // namespace zwt
