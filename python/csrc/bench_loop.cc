// zerowire._C._bench_loop (see bench_loop.h).
#include "bench_loop.h"

#include <c10/util/Exception.h>

#include <chrono>

#include "backend.h"
#include "tensors.h"

namespace zwt {

double bench_loop(const c10::intrusive_ptr<c10d::Backend>& backend, const std::string& op, const at::Tensor& output,
                  const at::Tensor& input, int64_t iters, bool through_backend) {
  auto* zw_backend = dynamic_cast<ZwBackend*>(backend.get());
  TORCH_CHECK_VALUE(zw_backend != nullptr, "zerowire _bench_loop: the backend is ", backend->getBackendName(),
                    ", not zerowire (pass group._get_backend(torch.device('cpu')) of a zerowire group)");
  for (const at::Tensor* t : {&output, &input}) {
    check_tensor("_bench_loop", "tensor", *t);
    TORCH_CHECK_VALUE(t->is_cpu() && t->scalar_type() == at::kFloat,
                      "zerowire _bench_loop: takes float32 CPU tensors, got ", t->scalar_type(), " on ", t->device());
  }
  using Fn = zw::Result<zw::Work> (*)(zw::Communicator&, const zw::CollectiveOptions&);
  zw::CollectiveOptions o;
  o.dtype = zw::DataType::kFloat32;
  o.input = mem(input);
  o.output = mem(output);
  Fn fn = nullptr;
  if (op == "all_gather_into_tensor") {
    fn = zw::all_gather;
    o.count = static_cast<size_t>(input.numel());
  } else if (op == "reduce_scatter_tensor") {
    fn = zw::reduce_scatter;
    o.count = static_cast<size_t>(output.numel());
  } else if (op == "all_reduce") {
    fn = zw::all_reduce;
    o.input = o.output;
    o.count = static_cast<size_t>(output.numel());
  } else {
    TORCH_CHECK_VALUE(false, "zerowire _bench_loop: unknown op '", op,
                      "' (all_gather_into_tensor, reduce_scatter_tensor or all_reduce)");
  }
  zw::Communicator& comm = zw_backend->comm();
  auto t0 = std::chrono::steady_clock::now();
  if (through_backend) {
    at::Tensor out = output, in = input;
    std::vector<at::Tensor> one{out};
    for (int64_t i = 0; i < iters; ++i) {
      c10::intrusive_ptr<c10d::Work> work;
      if (fn == zw::all_gather) {
        work = zw_backend->_allgather_base(out, in, c10d::AllgatherOptions());
      } else if (fn == zw::reduce_scatter) {
        work = zw_backend->_reduce_scatter_base(out, in, c10d::ReduceScatterOptions());
      } else {
        work = zw_backend->allreduce(one, c10d::AllreduceOptions());
      }
      work->wait();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (int64_t i = 0; i < iters; ++i) {
    zw::Result<zw::Work> work = fn(comm, o);
    if (!work.ok()) raise("_bench_loop " + op, 0, work.status());
    zw::Status st = work.value().wait();
    if (!st.ok()) raise("_bench_loop " + op, 0, st);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace zwt
