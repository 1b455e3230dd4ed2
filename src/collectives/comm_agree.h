// Settings every rank of a communicator must share, compared when it is created. A knob that changes what travels on
// the wire or which algorithm runs (the transport, ZW_ALGO, ZW_TREE_THRESHOLD, ZW_CHUNK_BYTES, ZW_EAGER_BYTES,
// ZW_EAGER_SLOTS, ZW_SHM_DIRECT_AG_MAX_RANKS, ZW_CUDA_PATH, ZW_CUDA_STAGING_CHUNK) set differently on two ranks used
// to surface only as a timeout in the first collective that depended on it (or as a desync naming no knob); now
// creation fails on every rank, naming the knob, the ranks and both values.
// Non-goals: knobs that are local to a rank (timeouts, spin times, socket buffers, ZW_SLOTS: the receiver's own
// staging) may differ and are not compared.
#pragma once

#include <string>

#include "collectives/comm_impl.h"
#include "common/clock.h"
#include "zerowire/store.h"

namespace zw::internal {

// "KNOB=value:meaning" lines, one per knob: ranks agree when the meanings match (a value that makes no difference
// in this communicator, such as ZW_TREE_THRESHOLD under ZW_ALGO=ring, means the same on every rank).
std::string agreement_record(const CommSettings& settings, int world_size);

// The first differences between two records, as "ZW_CHUNK_BYTES is 1048576 on rank 0 but 65536 on rank 2", joined
// with "; " (empty when they agree).
std::string agreement_differences(const std::string& mine, int my_rank, const std::string& theirs, int peer);

// Publishes this rank's record under "agree/<rank>" and compares it with every other rank's (waiting for them until
// `deadline`); an error names every rank that differs from this one.
Status check_settings_agree(Store& store, int rank, int size, const CommSettings& settings, Deadline deadline);

}  // namespace zw::internal
