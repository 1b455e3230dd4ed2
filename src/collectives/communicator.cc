// Communicator: creation from a store or from the environment, and its small accessors.
#include "collectives/comm_impl.h"
#include "common/log.h"
#include "zerowire/bootstrap.h"
#include "zerowire/communicator.h"

namespace zw {

Communicator::Communicator(std::unique_ptr<internal::CommImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

Result<std::unique_ptr<Communicator>> Communicator::create(std::shared_ptr<Store> store, int rank, int world_size,
                                                           const CommConfig& config) {
  if (!store) return Status(Code::kInvalidArgument, "Communicator::create needs a store");
  ZW_ASSIGN_OR_RETURN(internal::CommSettings settings, internal::resolve_settings(config));
  ZW_ASSIGN_OR_RETURN(auto impl, internal::CommImpl::create(std::move(store), rank, world_size, settings));
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Result<std::unique_ptr<Communicator>> Communicator::create_from_environment(const CommConfig& config) {
  ZW_ASSIGN_OR_RETURN(internal::CommSettings settings, internal::resolve_settings(config));
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(settings.timeout_s * 1000));
  ZW_ASSIGN_OR_RETURN(Bootstrap boot, bootstrap_from_environment(timeout));
  log::set_process_rank(boot.info.rank);
  settings.store_address = boot.info.store_address;
  ZW_ASSIGN_OR_RETURN(auto impl, internal::CommImpl::create(boot.store, boot.info.rank, boot.info.world_size, settings));
  impl->adopt_store_server(std::move(boot.server));
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
const char* Communicator::transport_name() const { return impl_->transport_name(); }
std::string Communicator::describe_rank(int rank) const { return impl_->describe(rank); }
void Communicator::abort(const Status& reason) { impl_->abort(reason); }

}  // namespace zw
