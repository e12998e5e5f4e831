// KV cache for autoregressive decoding: the keys and values of every layer,
// preallocated once as [B, H_kv, T_max, D] (from the engine's block cache), with a
// length per sequence. H_kv = num_kv_heads key/value heads (grouped-query attention: the
// H = num_heads query heads share them, H_kv dividing H; multi-query when H_kv = 1); by
// default H_kv = H (multi-head attention, GPT-2). Sequence b keeps its keys at positions [0, length(b)) of
// its slot: a batch of prompts of different lengths needs no padding in the
// cache, and new entries are written in place after the old ones (which are
// never moved or copied).
//
//   KVCache cache({.num_layers = 12, .batch = 4, .num_heads = 12, .max_len = 1024, .head_dim = 64});
//   cache.check_room(n_new);                  // ValueError before any write if a sequence would pass max_len
//   for each layer l: cache.write(l, k, v, n_new); o = cache.attend(l, q, n_new, scale);
//   cache.advance(n_new);                     // lengths += n_new
//
// Letters (docs/shapes.md): B batch (sequence slots), H query heads, H_kv key/value heads,
// T_max capacity, Tn new tokens per step (the longest of the batch), D head dim.
//
// Thread safety: a cache is one request's mutable state: use each from one thread at a time.
// The model that fills it may be shared by many caches in many threads.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/kernels/attention.h"

namespace qkv::nn {
class MultiHeadAttention;
}

namespace qkv::infer {

// The element type of a cache's keys and values: float32 (exact, the default) or IEEE half
// (float16: half the memory and half the bytes every decode step reads at depth, as llama.cpp's
// default cache; each key and value rounded to nearest once when written, widened exactly when
// read, and the attention's arithmetic is float32's on those values; as in llama.cpp's f16 cache,
// a key or value beyond the half range, |x| > 65504, becomes +-inf).
enum class KVType { F32, F16 };
// "f32" / "f16" -> the type; ValueError naming `what` and the text otherwise.
KVType parse_kv_type(const std::string& text, const std::string& what);

struct KVCacheOptions {
  std::int64_t num_layers = 0;
  std::int64_t batch = 1;
  std::int64_t num_heads = 1;     // H: query heads
  std::int64_t num_kv_heads = 0;  // H_kv: key/value heads stored, dividing num_heads; 0 means num_heads
  std::int64_t max_len = 0;       // T_max: positions per sequence
  std::int64_t head_dim = 0;
  // true: every page of the cache is written (zeros) when it is built, so first use takes no page
  // faults (a server's slots: steady latency, the memory counted from the start, as llama.cpp
  // clears its cache buffer); false: pages arrive as positions are first written.
  bool populate = false;
  KVType dtype = KVType::F32;
  // true: the cache also keeps each position's token id (token_ids), for a model that must run a
  // sequence's prefix again (LongRoPE's switch to its long factors, models/decoder.h).
  bool keep_ids = false;
  // Per layer, the floats of a recurrent state each sequence keeps in that layer instead of keys
  // and values (a Gated DeltaNet layer's convolution window and matrices, models/decoder.h); 0
  // for an attention layer. Empty: every layer attends. A state starts at zeros.
  std::vector<std::int64_t> state_floats;
};

class KVCache {
 public:
  // Allocates 2 * num_layers buffers [B, H_kv, T_max, D] (float32 tensors, or halves). Sizes must be >= 1 (layers >= 0),
  // num_kv_heads must divide num_heads (ValueError naming both); the total is checked for overflow
  // and named in the error (AllocError) before anything is allocated.
  explicit KVCache(const KVCacheOptions& o);

  // The options, num_kv_heads resolved (never 0).
  const KVCacheOptions& options() const { return opt_; }
  std::int64_t length(std::int64_t b) const;
  const std::vector<std::int64_t>& lengths() const { return len_; }
  std::int64_t bytes() const;  // of keys and values of every layer
  KVType dtype() const { return opt_.dtype; }

  // ValueError naming the sequence, its length, n_new and max_len if any
  // length(b) + n_new[b] > max_len (or n_new has the wrong size or a negative entry).
  void check_room(const std::vector<std::int64_t>& n_new) const;
  // Copies the new keys and values of `layer` into place: k_new, v_new [B, H_kv, Tn, D] (any
  // strides); rows t < n_new[b] go to positions length(b) + t, rows t >= n_new[b] are ignored.
  // Bitwise copies (a float16 cache: each value rounded to the nearest half, kernels/half.h).
  // Checks everything first (nothing is written on error).
  void write(std::int64_t layer, const Tensor& k_new, const Tensor& v_new, const std::vector<std::int64_t>& n_new);
  // Attention of the new queries q [B, H, Tn, D] (after write() of this layer, before advance()):
  // query t < n_new[b] of sequence b, at position p = length(b) + t, sees its keys [0, p]
  // (bottom-right causal), and with a sliding window W >= 1 only keys j > p - W (Mistral's
  // sliding_window; 0: none). Query head h reads key/value head h / (H / H_kv).
  // Returns [B, Tn, H, D] (rows t >= n_new[b] are zero). Few new queries run the decode kernel
  // (a key/value head's query heads together, split-K over threads for long contexts); longer
  // ones the tiled FlashAttention kernel.
  Tensor attend(std::int64_t layer, const Tensor& q, const std::vector<std::int64_t>& n_new, double scale,
                std::int64_t window = 0) const;
  // The prefill half of attend for one sequence: FlashAttention (kernels/attention.h; the
  // tiled or row kernel, as it chooses) of sequence b's n new
  // queries over its first Lk cached keys and values (1 <= n <= Lk <= capacity; causal, bottom-
  // right aligned: query t sits at position Lk - n + t, and with a window W >= 1 sees keys
  // j > its position - W). Query t of head h is read from q + h * q_sh + t * q_st (D contiguous
  // floats), its output written to o + h * o_sh + t * o_st. A float16 cache first widens to
  // float32 its Lk keys and values (KVCache::widen; O(Lk D) beside the kernel's O(n Lk D), in a
  // buffer of the calling thread): the values the decode kernel widens as it
  // goes. For a model that attends in place (Llama) as attend does.
  // The scores' scale, window and soft-cap are `sp`'s (kernels/attention.h).
  void attend_prefill(std::int64_t layer, std::int64_t b, std::int64_t n, std::int64_t Lk, const float* q,
                      std::int64_t q_sh, std::int64_t q_st, float* o, std::int64_t o_sh, std::int64_t o_st,
                      const kernels::ScoreParams& sp) const;
  // Once every layer was written: length(b) += n_new[b].
  void advance(const std::vector<std::int64_t>& n_new);

  void reset(std::int64_t b);  // empties slot b for reuse (its recurrent states back to zeros)
  // Keeps only the first n positions of slot b (0 <= n <= length(b), ValueError otherwise): a
  // sequence rewound to a shared prefix continues from there. A cache with recurrent states can
  // only go back to where it can rebuild them: to 0, to its length, or to the position of its
  // last checkpoint (rewind_point); ValueError naming them otherwise.
  void truncate(std::int64_t b, std::int64_t n);
  void reset();                // every slot
  // The largest position <= n (and <= length(b)) truncate can keep: n itself for a cache without
  // recurrent states.
  std::int64_t rewind_point(std::int64_t b, std::int64_t n) const;
  // Saves sequence b's recurrent states at its current length (one checkpoint per sequence; a new
  // one replaces it; a no-op without recurrent states): truncate can then come back here, as
  // speculative decoding does after a rejected draft.
  void checkpoint(std::int64_t b);
  // Whether some layer keeps a recurrent state; layer l's state of sequence b (state_floats[l]
  // floats; ValueError for an attention layer).
  bool has_state() const { return !state_.empty(); }
  float* state(std::int64_t layer, std::int64_t b);
  const float* state(std::int64_t layer, std::int64_t b) const;
  bool layer_has_kv(std::int64_t layer) const;

  // Sequence b's token ids at positions [0, max_len) (those past length(b) unspecified), written by
  // the model that fills the cache; ValueError when the cache was made without keep_ids.
  std::int64_t* token_ids(std::int64_t b);
  const std::int64_t* token_ids(std::int64_t b) const;

  // The whole buffers [B, H_kv, T_max, D] (entries at or past length(b) are unspecified) of a
  // float32 cache; TypeError for a float16 one.
  const Tensor& keys(std::int64_t layer) const;
  const Tensor& values(std::int64_t layer) const;
  // A float16 cache's buffers, the same layout, IEEE half bits (kernels/half.h); TypeError for a
  // float32 one. Writable for a model that appends its keys in place (as keys(l).data<float>()).
  std::uint16_t* keys_f16(std::int64_t layer) const;
  std::uint16_t* values_f16(std::int64_t layer) const;
  // A float16 cache's keys and values of sequence b in `layer`, positions [0, Lk) of every
  // key/value head, widened to float32 -> k_out, v_out [H_kv, Lk, D] each (threads share the
  // heads). What attend_prefill's FlashAttention reads: the values the decode kernel widens as it
  // goes.
  void widen(std::int64_t layer, std::int64_t b, std::int64_t Lk, float* k_out, float* v_out) const;

 private:
  void check_slot(std::int64_t b, const char* what) const;
  void check_layer(std::int64_t layer, const char* what, KVType want) const;
  KVCacheOptions opt_;
  std::vector<Tensor> k_, v_;  // float32
  // float16 (shared by copies of the cache, as the float32 tensors' storage is)
  std::vector<std::shared_ptr<std::uint16_t[]>> kh_, vh_;
  std::vector<std::int64_t> len_;
  std::shared_ptr<std::int64_t[]> ids_;  // [B, T_max] with keep_ids (shared by copies, as the keys are)
  // Recurrent states: per layer [B, state_floats[l]] (empty for an attention layer), and per
  // sequence a checkpoint of all of them (empty until made) with its length (-1: none).
  std::vector<std::shared_ptr<float[]>> state_;
  std::vector<std::vector<float>> saved_;
  std::vector<std::int64_t> saved_len_;
  void clear_state(std::int64_t b);
};

// Causal self-attention of a MultiHeadAttention module through the cache: projects
// x [B, Tn, E] with w_q, w_k, w_v, appends the new keys and values of `layer` (rows t <
// n_new[b]), attends (KVCache::attend, scale 1/sqrt(D)) and projects with w_o -> [B, Tn, E].
// Rows t >= n_new[b] of the result are w_o's bias. Does not advance the cache.
Tensor cached_self_attention(const nn::MultiHeadAttention& mha, const Tensor& x, std::int64_t layer,
                             const std::vector<std::int64_t>& n_new, KVCache& cache);

// New queries per step up to which KVCache::attend uses the decode kernel.
inline constexpr std::int64_t kDecodeKernelMaxQueries = 4;

}  // namespace qkv::infer
