// qkv.Embedder's compiled part: a sentence-transformers folder loaded once (infer::SentenceEmbedder),
// texts embedded with the GIL released; Ctrl-C stops between batches.
#include <memory>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "qkv/infer/embed.h"

namespace qkv::python {
namespace {

struct PyEmbedder {
  std::shared_ptr<const infer::SentenceEmbedder> embedder;
};

}  // namespace

void register_embedder(nb::module_& m) {
  nb::class_<PyEmbedder>(m, "_Embedder")
      .def("__init__",
           [](PyEmbedder* self, const std::string& path) {
             std::shared_ptr<const infer::SentenceEmbedder> e;
             {
               nb::gil_scoped_release release;
               e = std::make_shared<const infer::SentenceEmbedder>(infer::SentenceEmbedder::from_folder(path));
             }
             new (self) PyEmbedder{std::move(e)};
           },
           nb::arg("path"))
      .def_prop_ro("dimension", [](const PyEmbedder& p) { return p.embedder->dimension(); })
      .def_prop_ro("normalizes", [](const PyEmbedder& p) { return p.embedder->pooling().normalize; })
      .def_prop_ro("pooling", [](const PyEmbedder& p) {
        return std::string(p.embedder->pooling().mode == infer::Pooling::Mean ? "mean" : "cls");
      })
      // texts -> float32 [N, C] (NumPy). progress(done, total), if not None, is called after each batch.
      .def("encode",
           [](const PyEmbedder& p, const std::vector<std::string>& texts, std::int64_t batch_size, bool normalize,
              nb::object progress) {
             infer::EmbedOptions o{.batch_size = batch_size};
             // Called between batches on this thread: takes the GIL for Python's signal check
             // (KeyboardInterrupt unwinds the call) and the progress callback.
             o.progress = [&progress](std::int64_t done, std::int64_t total) {
               nb::gil_scoped_acquire gil;
               if (PyErr_CheckSignals() != 0) throw nb::python_error();
               if (!progress.is_none()) progress(done, total);
             };
             Tensor e;
             {
               nb::gil_scoped_release release;
               e = p.embedder->embed(texts, o);
               if (normalize && !p.embedder->pooling().normalize) e = infer::l2_normalize(e);
             }
             return export_array(e, Kind::Numpy);
           },
           nb::arg("texts"), nb::arg("batch_size"), nb::arg("normalize"), nb::arg("progress").none())
      // a [N, C], b [M, C] -> cosine similarities [N, M] (float64 sums, returned as float32).
      .def_static("similarity", [](nb::handle a, nb::handle b) {
        const Imported x = import_array(a, "similarity", "a"), y = import_array(b, "similarity", "b");
        Tensor s;
        {
          nb::gil_scoped_release release;
          s = infer::cosine_similarity_matrix(x.t, y.t).to(DType::F32);
        }
        return export_array(s, x.kind);
      }, nb::arg("a"), nb::arg("b"));
}

}  // namespace qkv::python
