// ZwBackend's gather, scatter and list all_to_all (see backend.h), on zerowire's gather, scatter and send_recv.
//
// gather and scatter take a list of one tensor per rank on the root; zerowire's gather/scatter move one flat
// buffer of size × count elements, so the root gathers into a flat temporary and copies it out into the list
// (after completion on the host, on the current stream for CUDA tensors), or concatenates the list before a
// scatter. all_to_all's lists may hold tensors of different sizes per rank: one send_recv batch, a receive into each
// output tensor and a send of each input tensor, no copies (as all_to_all_single with split sizes).
// Non-goals: recvAnysource (zerowire receives from a named rank only; torch's default raises for it).
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "backend.h"
#include "tensors.h"

namespace zwt {
namespace {

// Checks the per-rank list a root passes (or that a non-root passes none) and returns it (empty off the root).
std::vector<at::Tensor> root_list(const char* op, const char* what, std::vector<std::vector<at::Tensor>>& lists,
                                  bool root, int rootRank, int size, const at::Tensor& like) {
  if (!root) {
    TORCH_CHECK_VALUE(lists.empty() || (lists.size() == 1 && lists[0].empty()), "zerowire ", op, ": ", what,
                      " are given on a rank that is not the root (root is rank ", rootRank, "); pass None there");
    return {};
  }
  check_count(op, (std::string(what) + " lists on the root").c_str(), lists.size(), 1);
  std::vector<at::Tensor> list = lists[0];
  check_count(op, (std::string(what) + " (one per rank)").c_str(), list.size(), static_cast<size_t>(size));
  for (const at::Tensor& t : list) {
    check_like(op, what, like, t);
    check_numel(op, what, t, like.numel());
  }
  return list;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ZwBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                 std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const char* op = "gather";
  check_count(op, "input tensors (one per process)", inputs.size(), 1);
  check_tensor(op, "input", inputs[0]);
  at::Tensor& in = inputs[0];
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "zerowire gather: root rank ", opts.rootRank,
                    " is outside 0..", getSize() - 1);
  const bool root = opts.rootRank == getRank();
  std::vector<at::Tensor> outs = root_list(op, "output tensors", outputs, root, opts.rootRank, getSize(), in);
  Payload p = move_payload(in);
  Launch launch(*this, c10d::OpType::GATHER, op, in);
  zw::CollectiveOptions o = launch.options(opts.timeout);
  o.input = mem(in);
  o.count = p.count;
  o.dtype = p.dtype;
  o.root = static_cast<int>(opts.rootRank);
  at::Tensor flat;
  if (root) {
    flat = at::empty({getSize() * in.numel()}, in.options());
    o.output = mem(flat);
  }
  launch.issue(zw::gather, o);
  launch.keep(in);
  if (root) {
    launch.keep(flat);
    for (const at::Tensor& out : outs) launch.output(out);
    const int64_t n = in.numel();
    launch.then([flat, outs, n] {
      for (size_t i = 0; i < outs.size(); ++i) outs[i].view(-1).copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n));
    });
  }
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::scatter(std::vector<at::Tensor>& outputs,
                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                  const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  check_count(op, "output tensors (one per process)", outputs.size(), 1);
  check_tensor(op, "output", outputs[0]);
  at::Tensor& out = outputs[0];
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "zerowire scatter: root rank ", opts.rootRank,
                    " is outside 0..", getSize() - 1);
  const bool root = opts.rootRank == getRank();
  std::vector<at::Tensor> ins = root_list(op, "input tensors", inputs, root, opts.rootRank, getSize(), out);
  Payload p = move_payload(out);
  Launch launch(*this, c10d::OpType::SCATTER, op, out);
  zw::CollectiveOptions o = launch.options(opts.timeout);
  o.output = mem(out);
  o.count = p.count;
  o.dtype = p.dtype;
  o.root = static_cast<int>(opts.rootRank);
  at::Tensor flat;
  if (root) {
    std::vector<at::Tensor> flat_ins;
    for (const at::Tensor& t : ins) flat_ins.push_back(t.reshape(-1));
    flat = at::cat(flat_ins);  // on CUDA enqueued on the current stream, before the operation
    o.input = mem(flat);
    launch.keep(flat);
  }
  launch.issue(zw::scatter, o);
  launch.keep(out);
  launch.output(out);
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                   const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all";
  const int n = getSize();
  check_count(op, "input tensors (one per rank)", inputs.size(), static_cast<size_t>(n));
  check_count(op, "output tensors (one per rank)", outputs.size(), static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    check_like(op, "input tensor", inputs[0], inputs[p]);
    check_like(op, "output tensor", inputs[0], outputs[p]);
  }
  Launch launch(*this, c10d::OpType::ALLTOALL, op, inputs[0]);
  std::vector<zw::P2POp> ops;
  for (int p = 0; p < n; ++p) {
    // Sizes may differ per rank (torch allows it); a receive of the wrong size fails naming both ranks.
    zw::P2POp recv{zw::P2PKind::kRecv, launch.options(opts.timeout)};
    recv.options.output = mem(outputs[p]);
    recv.options.count = outputs[p].nbytes();
    recv.options.dtype = zw::DataType::kUInt8;
    recv.options.peer = p;
    zw::P2POp send{zw::P2PKind::kSend, launch.options(opts.timeout)};
    send.options.input = mem(inputs[p]);
    send.options.count = inputs[p].nbytes();
    send.options.dtype = zw::DataType::kUInt8;
    send.options.peer = p;
    ops.push_back(recv);
    ops.push_back(send);
  }
  {
    std::optional<c10::DeviceGuard> guard;
    if (launch.cuda()) guard.emplace(inputs[0].device());
    launch.add(zw::send_recv(*comm_, ops));
  }
  for (int p = 0; p < n; ++p) {
    launch.keep(inputs[p]);
    launch.keep(outputs[p]);
    launch.output(outputs[p]);
  }
  return launch.finish();
}

}  // namespace zwt
