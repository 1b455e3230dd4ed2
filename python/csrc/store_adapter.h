// store_adapter.h — zerowire's bootstrap Store over the c10d::Store that torch.distributed hands a backend.
//
// zerowire's communicator finds its peers through this adapter, so a process group needs no second port or
// rendezvous: the keys land in torch's store under the group's prefix. The adapter works on a clone of torch's store
// (its own connection for a TCPStore), so zerowire's threads never share a socket with torch's. c10d exceptions
// become Status values (a wait past its timeout is kTimeout, anything else kConnectionFailed) naming the key. A get
// with a timeout under 1 s polls with check() instead of torch's wait() (see get()).
// Non-goals: anything beyond zw::Store's five calls.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>

#include "zerowire/store.h"

namespace zwt {

std::shared_ptr<zw::Store> adapt_store(const c10::intrusive_ptr<c10d::Store>& store);

}  // namespace zwt
