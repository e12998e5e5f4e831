// Decoder models written as GGUF (see decoder_io.h), through the architecture's table of tensor
// names: the loader's table, read the other way.
#include <algorithm>
#include <filesystem>

#include <unistd.h>

#include <fmt/format.h>

#include "../arch/arch.h"
#include "../arch/common.h"
#include "../gguf_tensors.h"
#include "qkv/core/error.h"
#include "qkv/io/gguf.h"
#include "qkv/models/decoder_io.h"
#include "tensor_slots.h"

namespace qkv::models {
namespace {

using namespace gguf_out;

// Matrices stored one after the other (the views of a fused tensor) as one matrix, or nullopt
// when they are not adjacent rows of one type.
std::optional<kernels::QMatrix> stacked(std::initializer_list<const kernels::QMatrix*> ms) {
  kernels::QMatrix out = **ms.begin();
  out.rows8 = nullptr;
  const auto* end = static_cast<const std::uint8_t*>(out.data) + out.rows * out.row_bytes;
  for (auto it = ms.begin() + 1; it != ms.end(); ++it) {
    const kernels::QMatrix& m = **it;
    if (m.data != end || m.type != out.type || m.cols != out.cols || m.row_bytes != out.row_bytes) return std::nullopt;
    out.rows += m.rows;
    end += m.rows * m.row_bytes;
  }
  return out;
}

// llama.cpp fixes how each architecture weighs its experts and clamps their SwiGLU (GGUF says
// nothing of either): a model that does otherwise would read back as another model. Checked
// before anything is written, on a twin of the file's header (the same metadata and tensor
// names, one float each) in the temp directory: whatever is at `path` stays as it was.
void check_read_back(const DecoderSpec& c, const Architecture& a, const io::GGUFMetadata& meta,
                     const std::vector<io::GGUFTensorData>& tensors, const std::string& path) {
  static const float zero = 0.f;
  std::vector<io::GGUFTensorData> twin;
  for (const io::GGUFTensorData& t : tensors) twin.push_back({t.name, kernels::QType::F32, {1}, &zero, sizeof(float)});
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() /
                                    fmt::format("qkv-header-check-{}-{}.gguf", ::getpid(), static_cast<const void*>(&c));
  DecoderSpec back;
  try {
    io::write_gguf(tmp.string(), meta, twin);
    back = decoder_spec_from_gguf(io::GGUFFile::open_header(tmp.string()));
  } catch (...) {
    std::filesystem::remove(tmp);
    throw;
  }
  std::filesystem::remove(tmp);
  if (back.moe.swiglu_limit != c.moe.swiglu_limit || back.moe.swiglu_alpha != c.moe.swiglu_alpha)
    throw ValueError(fmt::format("convert: {}'s experts clamp their SwiGLU at limit {} with alpha {}, but llama.cpp's "
                                 "{} architecture uses {} and {}; the file would hold another model, so {} was not "
                                 "written",
                                 c.arch, c.moe.swiglu_limit, c.moe.swiglu_alpha, a.gguf_name, back.moe.swiglu_limit,
                                 back.moe.swiglu_alpha, path));
  if (back.moe.routing.renormalize != c.moe.routing.renormalize)
    throw ValueError(fmt::format("convert: {} {} the experts' weights, but llama.cpp's {} architecture {}; "
                                 "the file would hold another model, so {} was not written",
                                 c.arch, c.moe.routing.renormalize ? "renormalises" : "does not renormalise",
                                 a.gguf_name, back.moe.routing.renormalize ? "always does" : "never does", path));
}

}  // namespace

void save_decoder_gguf(const DecoderLM& m, const std::string& path, const GgufQuant& quant,
                       const io::GGUFMetadata& tokenizer, const std::string& name) {
  const DecoderSpec& c = m.spec();
  const DecoderWeights& w = m.weights();
  const Architecture* a = find_architecture(c.arch);
  if (!a) throw ValueError("save_decoder_gguf: the spec's architecture '" + c.arch + "' is not registered");
  const auto moe_layers = std::count_if(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.moe; });
  if (moe_layers > 0 && (moe_layers != c.num_layers() || !has_slot(*a, Slot::ExpertGate)))
    throw ValueError("convert: " + c.arch + " with dense layers between its mixtures of experts has no GGUF form "
                     "llama.cpp reads (every layer of its GGUF architecture is a mixture)");
  const RopeSpec& rope = c.ropes.front();
  const bool want_interleaved = a->gguf_interleaved_rope;
  const bool is_interleaved = rope.style == kernels::RopeStyle::Interleaved;
  std::vector<i64> pq, pk;
  if (want_interleaved != is_interleaved) {
    if (rope.dims != c.head_dim)
      throw ValueError(fmt::format("convert: a partial rotary model (rope_dim {} of head_dim {}) cannot be rearranged "
                                   "for llama.cpp's RoPE",
                                   rope.dims, c.head_dim));
    pq = rope_permutation(c.num_heads, c.head_dim, want_interleaved);
    pk = rope_permutation(c.num_kv_heads, c.head_dim, want_interleaved);
  }
  const i64 HD = c.num_heads * c.head_dim, KD = c.num_kv_heads * c.head_dim;
  // Linear attention's value heads in Hugging Face's grouped order (value head h reads key head
  // h / (Hv / Hk)) are written in llama.cpp's tiled one (h reads h % Hk), as its converter does:
  // tiled head j is grouped head (j % Hk) (Hv / Hk) + j / Hk. Every tensor indexed by value head
  // follows (rows, elements, or out_proj's columns); the spec written says tiled.
  const LinearAttnSpec& G = c.linear;
  std::vector<i64> vheads;  // vheads[j] = the source of written value head j (empty: as stored)
  if (!G.tiled && G.key_heads != G.value_heads &&
      std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.mixer == Mixer::GatedDeltaNet; }))
    for (i64 j = 0; j < G.value_heads; ++j)
      vheads.push_back(j % G.key_heads * (G.value_heads / G.key_heads) + j / G.key_heads);
  // The rows (or elements) of a value-head-indexed tensor: `lead` rows kept, then heads of `width`.
  auto head_rows = [&](i64 lead, i64 width) {
    std::vector<i64> perm;
    for (i64 r = 0; r < lead; ++r) perm.push_back(r);
    for (i64 h : vheads)
      for (i64 d = 0; d < width; ++d) perm.push_back(lead + h * width + d);
    return perm;
  };
  Tensors t;
  // In llama.cpp's order: the embedding, the layers one after the other, then the rest.
  auto emit = [&](const TensorName& tn, i64 l) {
    {
      const std::string gname = expand_name(tn.gguf, l);
      const Need need = slot_need(c, *a, tn.slot, l);
      if (need == Need::No || need == Need::Ignored) return;
      const DecoderLayerWeights* L = slot_is_per_layer(tn.slot) ? &w.layers[static_cast<std::size_t>(l)] : nullptr;
      switch (tn.slot) {
        case Slot::RopeFreqs: {
          // llama3 rope scaling: llama.cpp keeps the per-frequency divisors as a tensor.
          std::vector<float> factors = rope.freq_factors;
          if (factors.empty() && rope.scaling.type == kernels::RopeScaling::Type::Llama3) {
            const std::vector<float> base = kernels::rope_inv_freq(rope.dims, rope.theta, {});
            const std::vector<float> scaled = kernels::rope_inv_freq(rope.dims, rope.theta, rope.scaling);
            for (std::size_t i = 0; i < base.size(); ++i) factors.push_back(base[i] / scaled[i]);
          }
          if (!factors.empty()) t.add_vector(gname, factors.data(), static_cast<i64>(factors.size()));
          break;
        }
        case Slot::RopeLong:
        case Slot::RopeShort: {
          const std::vector<float>& f =
              tn.slot == Slot::RopeLong ? rope.scaling.long_factor : rope.scaling.short_factor;
          if (!f.empty()) t.add_vector(gname, f.data(), static_cast<i64>(f.size()));
          break;
        }
        case Slot::QKV:
        case Slot::GateUp: {
          const auto whole = tn.slot == Slot::QKV ? stacked({&L->q.w, &L->k.w, &L->v.w}) : stacked({&L->gate.w, &L->up.w});
          if (!whole) throw ValueError("convert: " + gname + ": the fused matrix's parts are not stored together");
          std::vector<i64> perm;
          if (tn.slot == Slot::QKV && !pq.empty()) {  // q's and k's rows rearranged, v's kept
            for (i64 r : pq) perm.push_back(r);
            for (i64 r : pk) perm.push_back(HD + r);
            for (i64 r = 0; r < KD; ++r) perm.push_back(HD + KD + r);
          }
          t.add_matrix(gname, *whole, perm);
          break;
        }
        case Slot::Router: {  // F32 whatever the weights' type, as llama.cpp's converter writes it
          const kernels::QMatrix& r = L->router.w;
          std::vector<float> f(static_cast<std::size_t>(r.rows * r.cols));
          for (i64 i = 0; i < r.rows; ++i)
            kernels::dequantize_row(r.type, static_cast<const std::uint8_t*>(r.data) + i * r.row_bytes, f.data() + i * r.cols,
                                    r.cols);
          t.add_float_matrix(gname, f.data(), r.rows, r.cols, r.cols);
          break;
        }
        case Slot::ExpertGate:
          t.add_experts(gname, L->expert_gate);
          break;
        case Slot::ExpertUp:
          t.add_experts(gname, L->expert_up);
          break;
        case Slot::ExpertDown:
          t.add_experts(gname, L->expert_down);
          break;
        case Slot::ExpertGateBias:
        case Slot::ExpertUpBias:
        case Slot::ExpertDownBias:
        case Slot::SharedExpertGate: {  // F32 [E, n] (gpt-oss's expert biases) or [1, C], as the converter writes them
          const Shape sh = slot_shape(c, tn.slot, l);
          t.add_float_matrix(gname, vector_of(w, tn.slot, l), sh[0], sh[1], sh[1]);
          break;
        }
        case Slot::LinConv: {  // [Cc, K] float32, as the converter writes ssm_conv1d; value channels by head
          const Shape sh = slot_shape(c, tn.slot, l);
          const float* x = vector_of(w, tn.slot, l);
          if (vheads.empty()) {
            t.add_float_matrix(gname, x, sh[0], sh[1], sh[1]);
          } else {
            const std::vector<i64> rows = head_rows(2 * G.key_heads * G.key_dim, G.value_dim);
            std::vector<float> y(static_cast<std::size_t>(sh[0] * sh[1]));
            for (i64 r = 0; r < sh[0]; ++r)
              std::copy(x + rows[static_cast<std::size_t>(r)] * sh[1], x + (rows[static_cast<std::size_t>(r)] + 1) * sh[1],
                        y.begin() + r * sh[1]);
            t.add_float_matrix(gname, y.data(), sh[0], sh[1], sh[1]);
          }
          break;
        }
        case Slot::LinQKV:
        case Slot::LinZ:
        case Slot::LinBeta:
        case Slot::LinAlpha:
          if (vheads.empty()) {
            t.add_matrix(gname, *matrix_of(w, tn.slot, l), {});
          } else {
            const i64 lead = tn.slot == Slot::LinQKV ? 2 * G.key_heads * G.key_dim : 0;
            const i64 width = tn.slot == Slot::LinQKV || tn.slot == Slot::LinZ ? G.value_dim : 1;
            t.add_matrix(gname, *matrix_of(w, tn.slot, l), head_rows(lead, width));
          }
          break;
        case Slot::LinOut:
          if (vheads.empty())
            t.add_matrix(gname, *matrix_of(w, tn.slot, l), {});
          else
            t.add_matrix_column_blocks(gname, *matrix_of(w, tn.slot, l), vheads, G.value_dim);
          break;
        case Slot::LinDecay:
        case Slot::LinDtBias: {
          const std::vector<float> v = permuted(vector_of(w, tn.slot, l), vheads, G.value_heads);
          t.add_vector(gname, v.data(), G.value_heads);
          break;
        }
        case Slot::QBias:
        case Slot::KBias: {
          const std::vector<i64>& perm = tn.slot == Slot::QBias ? pq : pk;
          const i64 n = tn.slot == Slot::QBias ? HD : KD;
          const std::vector<float> b = permuted(vector_of(w, tn.slot, l), perm, n);
          t.add_vector(gname, b.data(), n);
          break;
        }
        default:
          if (slot_is_matrix(tn.slot)) {
            t.add_matrix(gname, *matrix_of(w, tn.slot, l), tn.slot == Slot::Q ? pq : tn.slot == Slot::K ? pk : std::vector<i64>{});
          } else {
            t.add_vector(gname, vector_of(w, tn.slot, l), slot_shape(c, tn.slot, l)[0]);
          }
      }
    }
  };
  for (const TensorName& tn : a->tensors)
    if (tn.gguf && tn.slot == Slot::Embed) emit(tn, 0);
  for (i64 l = 0; l < c.num_layers(); ++l)
    for (const TensorName& tn : a->tensors)
      if (tn.gguf && slot_is_per_layer(tn.slot)) emit(tn, l);
  for (const TensorName& tn : a->tensors)
    if (tn.gguf && !slot_is_per_layer(tn.slot) && tn.slot != Slot::Embed) emit(tn, 0);
  // The types: as stored, or llama-quantize's for the file type asked (it reads these facts).
  const std::uint32_t file_type = t.apply(quant, QuantMixModel{.arch = a->gguf_name,
                                                               .n_layer = c.num_layers(),
                                                               .n_head = c.num_heads,
                                                               .n_head_kv = c.num_kv_heads,
                                                               .n_expert = c.moe.experts});
  io::GGUFMetadata meta;
  meta.emplace_back("general.architecture", GGUFMeta::string(a->gguf_name));
  meta.emplace_back("general.type", GGUFMeta::string("model"));
  meta.emplace_back("general.name", GGUFMeta::string(name));
  const std::string prefix = a->gguf_name + ".";
  DecoderSpec written = c;  // (the value heads as written)
  if (!vheads.empty()) written.linear.tiled = true;
  arch::write_common_gguf_metadata(written, prefix, meta);
  if (a->gguf_metadata) a->gguf_metadata(written, prefix, meta);
  meta.emplace_back("general.file_type", GGUFMeta::u32(file_type));
  meta.emplace_back("general.quantization_version", GGUFMeta::u32(2));
  meta.insert(meta.end(), tokenizer.begin(), tokenizer.end());
  if (moe_layers > 0) check_read_back(c, *a, meta, t.list, path);
  io::write_gguf(path, meta, t.list);
}

}  // namespace qkv::models
