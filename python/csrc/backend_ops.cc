// The torch.distributed operations of ZwBackend, each mapped onto zerowire's collectives (see backend.h).
//
// Shapes follow torch: list-of-tensor variants (allgather, reduce_scatter) go through one flat buffer and a copy;
// the *_base / *_into_tensor variants pass the caller's buffers straight to zerowire (in-place included);
// coalesced variants issue one zerowire operation per pair under one work.
// PREMUL_SUM: on CUDA tensors zerowire pre-multiplies inside the reduction (CollectiveOptions::premul); where it
// cannot (host memory, a tensor factor, a device path that refuses) the input is first scaled into a temporary
// (input × factor, rounded to the input's dtype) and summed. Both give torch's definition: sum over ranks of
// factor·input.
// Destinations that peers write into on the host path (all-gather and all-to-all outputs, all-reduce and broadcast
// buffers, receives) get huge pages where torch's 4 KiB pages would slow the writes (prefer_huge_pages, host_pages.h).
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "backend.h"
#include "host_pages.h"
#include "tensors.h"

namespace zwt {
namespace {

using CollFn = zw::Result<zw::Work> (*)(zw::Communicator&, const zw::CollectiveOptions&);

void check_root(const char* op, int64_t root, int size) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "zerowire ", op, ": root rank ", root, " is outside 0..", size - 1);
}

Reduction checked_reduction(const char* op, const c10d::ReduceOp& rop, const at::Tensor& t) {
  Reduction r = reduction(op, rop);
  TORCH_CHECK_TYPE(!r.premultiplied() || at::isFloatingType(t.scalar_type()), "zerowire ", op,
                   ": PREMUL_SUM needs a floating-point tensor, got ", t.scalar_type());
  return r;
}

// factor·input in input's dtype (on CUDA enqueued on the current stream, before the operation that reads it).
at::Tensor premultiplied(const at::Tensor& input, const Reduction& r) {
  at::Tensor scaled = r.factor ? at::mul(input, r.factor->to(input.device())) : at::mul(input, r.premul);
  return scaled.to(input.scalar_type());
}

// Issues a reduction whose output, count and dtype are set in `o`, reading `input`.
void issue_reduction(Launch& launch, CollFn fn, zw::CollectiveOptions o, const Reduction& r,
                     const at::Tensor& input) {
  o.op = r.op;
  o.input = mem(input);
  if (!r.premultiplied()) {
    launch.issue(fn, o);
    return;
  }
  if (launch.cuda() && !r.factor) {
    o.premul = r.premul;
    zw::Result<zw::Work> work = launch.call(fn, o);
    if (work.ok() || work.status().code() != zw::Code::kUnsupported) {
      launch.add(std::move(work));
      return;
    }
  }
  at::Tensor scaled = premultiplied(input, r);
  launch.keep(scaled);
  o.input = mem(scaled);
  o.premul = 1.0;
  launch.issue(fn, o);
}

// The one tensor of a call that takes a list of one per process.
at::Tensor& single(const char* op, std::vector<at::Tensor>& tensors) {
  check_count(op, "tensors (one per process)", tensors.size(), 1);
  check_tensor(op, "tensor", tensors[0]);
  return tensors[0];
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ZwBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                    const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  at::Tensor& t = single(op, tensors);
  check_root(op, opts.rootRank, getSize());
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "zerowire broadcast: one tensor per process (rootTensor must be 0)");
  Payload p = move_payload(t);
  Launch launch(*this, c10d::OpType::BROADCAST, op, t);
  zw::CollectiveOptions o = launch.options(opts.timeout);
  o.input = o.output = mem(t);
  o.count = p.count;
  o.dtype = p.dtype;
  o.root = static_cast<int>(opts.rootRank);
  prefer_huge_pages(t);
  launch.issue(zw::broadcast, o);
  launch.keep(t);
  launch.output(t);
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::reduce_one(c10d::OpType type, const char* op,
                                                     std::vector<at::Tensor>& tensors, const c10d::ReduceOp& rop,
                                                     int root, std::chrono::milliseconds timeout) {
  at::Tensor& t = single(op, tensors);
  Payload p = reduce_payload(op, t);
  Reduction r = checked_reduction(op, rop, t);
  Launch launch(*this, type, op, t);
  zw::CollectiveOptions o = launch.options(timeout);
  o.output = mem(t);
  o.count = p.count;
  o.dtype = p.dtype;
  o.root = root;
  if (type == c10d::OpType::ALLREDUCE) prefer_huge_pages(t);
  issue_reduction(launch, type == c10d::OpType::REDUCE ? zw::reduce : zw::all_reduce, o, r, t);
  launch.keep(t);
  launch.output(t);
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::AllreduceOptions& opts) {
  TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(), "zerowire allreduce: sparse tensors are not supported");
  return reduce_one(c10d::OpType::ALLREDUCE, "allreduce", tensors, opts.reduceOp, 0, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ZwBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  check_root("reduce", opts.rootRank, getSize());
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "zerowire reduce: one tensor per process (rootTensor must be 0)");
  return reduce_one(c10d::OpType::REDUCE, "reduce", tensors, opts.reduceOp, static_cast<int>(opts.rootRank),
                    opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ZwBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                              const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  TORCH_CHECK_VALUE(!tensors.empty(), "zerowire ", op, ": no tensors");
  std::vector<Payload> payloads;
  std::vector<Reduction> reductions;
  for (const at::Tensor& t : tensors) {
    check_tensor(op, "tensor", t);
    TORCH_CHECK_VALUE(t.device() == tensors[0].device(), "zerowire ", op, ": tensors on ", tensors[0].device(),
                      " and ", t.device(), "; all tensors of one operation must share a device");
    payloads.push_back(reduce_payload(op, t));
    reductions.push_back(checked_reduction(op, opts.reduceOp, t));
  }
  Launch launch(*this, c10d::OpType::ALLREDUCE_COALESCED, op, tensors[0]);
  for (size_t i = 0; i < tensors.size(); ++i) {
    zw::CollectiveOptions o = launch.options(opts.timeout);
    o.output = mem(tensors[i]);
    o.count = payloads[i].count;
    o.dtype = payloads[i].dtype;
    prefer_huge_pages(tensors[i]);
    issue_reduction(launch, zw::all_reduce, o, reductions[i], tensors[i]);
    launch.keep(tensors[i]);
    launch.output(tensors[i]);
  }
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  at::Tensor& in = single(op, inputs);
  check_count(op, "output lists (one per process)", outputs.size(), 1);
  std::vector<at::Tensor> outs = outputs[0];
  check_count(op, "output tensors (one per rank)", outs.size(), static_cast<size_t>(getSize()));
  for (const at::Tensor& out : outs) {
    check_like(op, "output tensor", in, out);
    check_numel(op, "output tensor", out, in.numel());
  }
  Payload p = move_payload(in);
  Launch launch(*this, c10d::OpType::ALLGATHER, op, in);
  at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
  zw::CollectiveOptions o = launch.options(opts.timeout);
  o.input = mem(in);
  o.output = mem(flat);
  o.count = p.count;
  o.dtype = p.dtype;
  prefer_huge_pages(flat);
  launch.issue(zw::all_gather, o);
  launch.keep(in);
  launch.keep(flat);
  for (const at::Tensor& out : outs) launch.output(out);
  const int64_t n = in.numel();
  launch.then([flat, outs, n] {
    for (size_t i = 0; i < outs.size(); ++i) outs[i].view(-1).copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n));
  });
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                          const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outs{output}, ins{input};
  return allgather_into_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> ZwBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                          std::vector<at::Tensor>& inputs,
                                                                          const c10d::AllgatherOptions& opts) {
  const char* op = outputs.size() == 1 ? "all_gather_into_tensor" : "allgather_into_tensor_coalesced";
  TORCH_CHECK_VALUE(!inputs.empty(), "zerowire ", op, ": no tensors");
  check_count(op, "output tensors (one per input)", outputs.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_like(op, "input", inputs[0], inputs[i]);
    check_like(op, "output", inputs[0], outputs[i]);
    check_numel(op, "output", outputs[i], inputs[i].numel() * getSize());
  }
  Launch launch(*this, c10d::OpType::_ALLGATHER_BASE, op, inputs[0]);
  for (size_t i = 0; i < inputs.size(); ++i) {
    Payload p = move_payload(inputs[i]);
    zw::CollectiveOptions o = launch.options(opts.timeout);
    o.input = mem(inputs[i]);
    o.output = mem(outputs[i]);
    o.count = p.count;
    o.dtype = p.dtype;
    prefer_huge_pages(outputs[i]);
    launch.issue(zw::all_gather, o);
    launch.keep(inputs[i]);
    launch.keep(outputs[i]);
    launch.output(outputs[i]);
  }
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  at::Tensor& out = single(op, outputs);
  check_count(op, "input lists (one per process)", inputs.size(), 1);
  std::vector<at::Tensor> ins = inputs[0];
  check_count(op, "input tensors (one per rank)", ins.size(), static_cast<size_t>(getSize()));
  std::vector<at::Tensor> flat_ins;
  for (const at::Tensor& in : ins) {
    check_like(op, "input tensor", out, in);
    check_numel(op, "input tensor", in, out.numel());
    flat_ins.push_back(in.reshape(-1));
  }
  Payload p = reduce_payload(op, out);
  Reduction r = checked_reduction(op, opts.reduceOp, out);
  Launch launch(*this, c10d::OpType::REDUCE_SCATTER, op, out);
  at::Tensor flat = at::cat(flat_ins);  // on CUDA enqueued on the current stream, before the operation
  zw::CollectiveOptions o = launch.options(opts.timeout);
  o.output = mem(out);
  o.count = p.count;
  o.dtype = p.dtype;
  issue_reduction(launch, zw::reduce_scatter, o, r, flat);
  launch.keep(flat);
  launch.keep(out);
  launch.output(out);
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                               const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> ZwBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                          std::vector<at::Tensor>& inputs,
                                                                          const c10d::ReduceScatterOptions& opts) {
  const char* op = outputs.size() == 1 ? "reduce_scatter_tensor" : "reduce_scatter_tensor_coalesced";
  TORCH_CHECK_VALUE(!inputs.empty(), "zerowire ", op, ": no tensors");
  check_count(op, "output tensors (one per input)", outputs.size(), inputs.size());
  std::vector<Payload> payloads;
  std::vector<Reduction> reductions;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_like(op, "input", inputs[0], inputs[i]);
    check_like(op, "output", inputs[0], outputs[i]);
    check_numel(op, "input", inputs[i], outputs[i].numel() * getSize());
    payloads.push_back(reduce_payload(op, outputs[i]));
    reductions.push_back(checked_reduction(op, opts.reduceOp, outputs[i]));
  }
  Launch launch(*this, c10d::OpType::_REDUCE_SCATTER_BASE, op, inputs[0]);
  for (size_t i = 0; i < inputs.size(); ++i) {
    zw::CollectiveOptions o = launch.options(opts.timeout);
    o.output = mem(outputs[i]);
    o.count = payloads[i].count;
    o.dtype = payloads[i].dtype;
    issue_reduction(launch, zw::reduce_scatter, o, reductions[i], inputs[i]);
    launch.keep(inputs[i]);
    launch.keep(outputs[i]);
    launch.output(outputs[i]);
  }
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                        std::vector<int64_t>& output_split_sizes,
                                                        std::vector<int64_t>& input_split_sizes,
                                                        const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  check_like(op, "input", input, input);
  check_like(op, "output", input, output);
  const int n = getSize();
  Launch launch(*this, c10d::OpType::ALLTOALL_BASE, op, input);
  prefer_huge_pages(output);
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    TORCH_CHECK_VALUE(input.numel() % n == 0, "zerowire ", op, ": input has ", input.numel(),
                      " elements, not a multiple of the group size ", n);
    check_numel(op, "output", output, input.numel());
    // zerowire's all_to_all has no in-place form: an aliased input is copied first.
    at::Tensor in = zw::ranges_overlap(input.data_ptr(), input.nbytes(), output.data_ptr(), output.nbytes())
                        ? input.clone() : input;
    Payload p = move_payload(in);
    zw::CollectiveOptions o = launch.options(opts.timeout);
    o.input = mem(in);
    o.output = mem(output);
    o.count = p.count / n;
    o.dtype = p.dtype;
    launch.issue(zw::all_to_all, o);
    launch.keep(in);
  } else {
    std::vector<zw::P2POp> ops = alltoall_ops(launch, output, input, output_split_sizes, input_split_sizes, opts);
    std::optional<c10::DeviceGuard> guard;
    if (launch.cuda()) guard.emplace(input.device());
    launch.add(zw::send_recv(*comm_, ops));
  }
  launch.keep(input);
  launch.keep(output);
  launch.output(output);
  return launch.finish();
}

std::vector<zw::P2POp> ZwBackend::alltoall_ops(Launch& launch, const at::Tensor& output, const at::Tensor& input,
                                               const std::vector<int64_t>& out_splits,
                                               const std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  const int n = getSize();
  // Splits count rows (dim 0); a missing side splits its rows evenly.
  auto rows = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    const int64_t total = t.dim() == 0 ? 1 : t.size(0);
    std::vector<int64_t> r = splits;
    if (r.empty()) {
      TORCH_CHECK_VALUE(total % n == 0, "zerowire ", op, ": ", what, " has ", total, " rows, not a multiple of ", n);
      r.assign(n, total / n);
    }
    check_count(op, (std::string(what) + " split sizes (one per rank)").c_str(), r.size(), static_cast<size_t>(n));
    int64_t sum = 0;
    for (int64_t v : r) {
      TORCH_CHECK_VALUE(v >= 0, "zerowire ", op, ": negative ", what, " split size ", v);
      sum += v;
    }
    TORCH_CHECK_VALUE(sum == total, "zerowire ", op, ": ", what, " split sizes add up to ", sum, " rows but the ",
                      what, " has ", total);
    return r;
  };
  const std::vector<int64_t> in_rows = rows(input, in_splits, "input");
  const std::vector<int64_t> out_rows = rows(output, out_splits, "output");
  const int64_t in_row_bytes = input.dim() == 0 || input.size(0) == 0 ? 0 : input.nbytes() / input.size(0);
  const int64_t out_row_bytes = output.dim() == 0 || output.size(0) == 0 ? 0 : output.nbytes() / output.size(0);
  std::vector<zw::P2POp> ops;
  int64_t in_off = 0, out_off = 0;
  for (int p = 0; p < n; ++p) {
    zw::P2POp recv{zw::P2PKind::kRecv, launch.options(opts.timeout)};
    recv.options.output = mem(output).slice(out_off * out_row_bytes, out_rows[p] * out_row_bytes);
    recv.options.count = out_rows[p] * out_row_bytes;
    recv.options.dtype = zw::DataType::kUInt8;
    recv.options.peer = p;
    zw::P2POp send{zw::P2PKind::kSend, launch.options(opts.timeout)};
    send.options.input = mem(input).slice(in_off * in_row_bytes, in_rows[p] * in_row_bytes);
    send.options.count = in_rows[p] * in_row_bytes;
    send.options.dtype = zw::DataType::kUInt8;
    send.options.peer = p;
    ops.push_back(recv);
    ops.push_back(send);
    in_off += in_rows[p];
    out_off += out_rows[p];
  }
  return ops;
}

c10::intrusive_ptr<c10d::Work> ZwBackend::point_to_point(zw::P2PKind kind, std::vector<at::Tensor>& tensors,
                                                         int peer) {
  const char* op = kind == zw::P2PKind::kSend ? "send" : "recv";
  at::Tensor& t = single(op, tensors);
  TORCH_CHECK_VALUE(peer >= 0 && peer < getSize(), "zerowire ", op, ": peer rank ", peer, " is outside 0..",
                    getSize() - 1);
  Payload p = move_payload(t);
  Launch launch(*this, kind == zw::P2PKind::kSend ? c10d::OpType::SEND : c10d::OpType::RECV, op, t);
  zw::P2POp p2p{kind, launch.options(std::chrono::milliseconds(0))};
  (kind == zw::P2PKind::kSend ? p2p.options.input : p2p.options.output) = mem(t);
  p2p.options.count = p.count;
  p2p.options.dtype = p.dtype;
  p2p.options.peer = peer;
  if (kind == zw::P2PKind::kRecv) prefer_huge_pages(t);
  if (coalescing_) {
    // Posted together at endCoalescing (batch_isend_irecv): a send may wait for its receive, so exchanges in both
    // directions must be one zerowire batch.
    p2p_.ops.push_back(p2p);
    p2p_.tensors.push_back(t);
    return launch.defer(p2p_.deferred);
  }
  launch.issue(kind == zw::P2PKind::kSend ? zw::send : zw::recv, p2p.options);
  launch.keep(t);
  launch.output(t);
  return launch.finish();
}

c10::intrusive_ptr<c10d::Work> ZwBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return point_to_point(zw::P2PKind::kSend, tensors, dst);
}

c10::intrusive_ptr<c10d::Work> ZwBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return point_to_point(zw::P2PKind::kRecv, tensors, src);
}

}  // namespace zwt
