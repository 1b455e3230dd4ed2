// zerowire._C: the Python module of the torch backend. zerowire/torch.py registers create_backend with
// torch.distributed.Backend.register_backend; _bench_loop serves bench/torch (bench_loop.h).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "backend.h"
#include "bench_loop.h"
#include "host_pages.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "zerowire's torch.distributed backend (C++ extension)";
  m.def("create_backend", &zwt::create_backend, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>(),
        "Creates the zerowire backend of a process group over the group's store (collective over the group).");
  m.def("_bench_loop", &zwt::bench_loop, py::arg("backend"), py::arg("op"), py::arg("output"), py::arg("input"),
        py::arg("iters"), py::arg("through_backend") = false, py::call_guard<py::gil_scoped_release>(),
        "Benchmark only: seconds for `iters` calls of op straight on the backend's communicator (bench_loop.h).");
  m.def("_huge_page_advice", &zwt::set_huge_page_advice, py::arg("enabled"),
        "Benchmark only: turns the huge-page advice for CPU destination tensors on or off (host_pages.h); returns the "
        "previous setting.");
}
