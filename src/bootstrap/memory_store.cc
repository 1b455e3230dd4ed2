// The in-memory store: a map guarded by a mutex, with a condition variable that set/add notify, for ranks
// that are threads of one process (unit tests, ranks-as-threads).
//
// Same semantics and error messages as the TCP store (shared through store_util.h). Thread-safe. Non-goals:
// sharing across processes, fairness between waiters.
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "bootstrap/store_util.h"
#include "zerowire/store.h"

namespace zw {
namespace {

class MemoryStore final : public Store {
 public:
  Status set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      kv_[key] = value;
    }
    cv_.notify_all();
    return Status();
  }

  Result<std::string> get(const std::string& key, Timeout timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<std::string> keys{key};
    ZW_TRY(wait_locked(lock, keys, timeout));
    return kv_.at(key);
  }

  Status wait(const std::vector<std::string>& keys, Timeout timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    return wait_locked(lock, keys, timeout);
  }

  Result<int64_t> add(const std::string& key, int64_t delta) override {
    int64_t sum = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = kv_.find(key);
      ZW_ASSIGN_OR_RETURN(sum, store::add_to_counter(key, it == kv_.end() ? nullptr : &it->second, delta));
      kv_[key] = std::to_string(sum);
    }
    cv_.notify_all();
    return sum;
  }

  Result<bool> del(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return kv_.erase(key) != 0;
  }

 private:
  bool all_present(const std::vector<std::string>& keys) const {
    for (const std::string& k : keys)
      if (kv_.count(k) == 0) return false;
    return true;
  }

  Status wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys, Timeout timeout) {
    Deadline deadline = store::to_deadline(timeout);
    while (!all_present(keys)) {
      if (deadline.is_never()) {
        cv_.wait(lock);
      } else if (cv_.wait_until(lock, deadline.time_point()) == std::cv_status::timeout && !all_present(keys)) {
        std::vector<std::string> missing;
        for (const std::string& k : keys)
          if (kv_.count(k) == 0) missing.push_back(k);
        return store::key_timeout(missing, keys.size(), timeout.count());
      }
    }
    return Status();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::string> kv_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

}  // namespace zw
