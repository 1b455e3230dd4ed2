// PrefixStore's out-of-line member: wait() prefixes every key before waiting on the base store.
#include "zerowire/store.h"

namespace zw {

Status PrefixStore::wait(const std::vector<std::string>& keys, Timeout timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
  return base_->wait(prefixed, timeout);
}

}  // namespace zw
