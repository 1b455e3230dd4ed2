// Consumer of an installed zerowire: uses the in-memory store and a dtype name, so that linking needs the
// bootstrap and common libraries, and prints a line install_test.sh checks.
#include <zerowire/config.h>
#include <zerowire/store.h>
#include <zerowire/types.h>

#include <chrono>
#include <cstdio>

int main() {
  std::shared_ptr<zw::Store> store = zw::make_memory_store();
  if (!store->set("key", "value").ok()) return 1;
  zw::Result<std::string> got = store->get("key", std::chrono::milliseconds(1000));
  if (!got.ok() || *got != "value") return 1;
  std::printf("zerowire %s consumer ok: %s\n", ZW_VERSION, zw::dtype_name(zw::DataType::kBFloat16));
  return 0;
}
