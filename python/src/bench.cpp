// _bench_sdpa: the C++ side of bench/bench_python.py's overhead measurement -- the library's
// scaled_dot_product_attention called in a C++ loop on the same imported arrays, in the same
// process, so that a Python call's extra cost is the difference of the two.
#include <chrono>
#include <vector>

#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "qkv/ops/attention.h"

namespace qkv::python {

void register_bench(nb::module_& m) {
  m.def("_bench_sdpa",
        [](nb::handle query, nb::handle key, nb::handle value, int repeat) {
          const char* op = "_bench_sdpa";
          const Imported q = import_array(query, op, "query"), k = import_array(key, op, "key"),
                         v = import_array(value, op, "value");
          std::vector<double> seconds;
          seconds.reserve(static_cast<std::size_t>(repeat));
          nb::gil_scoped_release release;
          for (int i = 0; i < repeat; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            const AttentionOutput a = scaled_dot_product_attention(q.t, k.t, v.t);
            const auto t1 = std::chrono::steady_clock::now();
            seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
          }
          return seconds;
        },
        nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("repeat"),
        "Seconds of each of `repeat` calls of the library's scaled_dot_product_attention from C++ (benchmarks).");
}

}  // namespace qkv::python
