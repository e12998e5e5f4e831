// qkv trace: follows the second tutorial's walkthrough (tokens, embedding,
// positional encoding, W_Q/W_K/W_V, heads, QK^T, scaling, mask, softmax,
// weighted sum, concat, W_O, Add&Norm, FFN, Add&Norm) with a real encoder
// block, printing every shape, and checks the step-by-step result against
// the library's own block.forward().
#include "cmd_trace.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "command.h"
#include "format.h"
#include "qkv/qkv.h"

namespace qkv::tool {
namespace {

struct Vocab {
  std::vector<std::string> words;          // id -> word
  std::map<std::string, std::int64_t> id;  // word -> id
  std::int64_t add(const std::string& w) {
    auto it = id.find(w);
    if (it != id.end()) return it->second;
    words.push_back(w);
    return id[w] = static_cast<std::int64_t>(words.size()) - 1;
  }
};

// Numbered step lines: " 7. name   shapes/op chain", optionally followed by values.
class StepPrinter {
 public:
  StepPrinter(std::ostream& out, std::int64_t values) : out_(out), values_(values) {}
  void step(const std::string& name, const std::string& chain, const Tensor& t = Tensor()) {
    std::ostringstream num;
    num << std::setw(3) << ++n_ << ". ";
    out_ << num.str() << name << std::string(name.size() < 26 ? 26 - name.size() : 1, ' ') << chain << '\n';
    if (values_ > 0 && t.defined()) out_ << "       first values: " << first_values(t, values_) << '\n';
  }
  void note(const std::string& text) { out_ << "       " << text << '\n'; }

 private:
  std::ostream& out_;
  std::int64_t values_;
  int n_ = 0;
};

std::string sp(const Tensor& t) { return shape_paren(t.shape()); }

// One post-norm encoder block, step by step, on the block's own weights.
Tensor trace_block(const nn::TransformerEncoderBlock& block, const Tensor& x, StepPrinter& p) {
  const nn::MultiHeadAttention& mha = *block.self_attn;
  const std::int64_t B = x.size(0), L = x.size(1), E = x.size(2);
  const std::int64_t H = mha.options().num_heads, D = mha.head_dim();

  auto proj = [&](const char* name, const nn::Linear& lin) {
    Tensor y = linear(x, lin.weight, lin.bias);
    p.step(std::string(name) + " = x W^T + b", sp(x) + " @ W^T " + shape_paren({lin.weight.size(1), lin.weight.size(0)}) +
                                                   " + b " + shape_paren(lin.bias.shape()) + " -> " + sp(y),
           y);
    return y;
  };
  const Tensor q = proj("Q", *mha.w_q), k = proj("K", *mha.w_k), v = proj("V", *mha.w_v);

  auto split = [&](const char* name, const Tensor& t) {
    Tensor viewed = t.view({B, L, H, D});
    Tensor heads = viewed.transpose(1, 2);
    p.step(std::string("split ") + name + " into heads",
           sp(t) + " -> view -> " + sp(viewed) + " -> transpose(1,2) -> " + sp(heads), heads);
    return heads;
  };
  const Tensor qh = split("Q", q), kh = split("K", k), vh = split("V", v);

  const Tensor kt = kh.transpose(-2, -1);
  const Tensor scores = matmul(qh, kt);
  p.step("scores = Q K^T", sp(qh) + " @ " + sp(kt) + " (K transposed(-2,-1)) -> " + sp(scores), scores);

  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const Tensor scaled = mul(scores, scale);
  p.step("scale by 1/sqrt(d_k)", sp(scores) + " * 1/sqrt(" + std::to_string(D) + ") = * " + fixed(scale, 4) + " -> " +
                                     sp(scaled),
         scaled);

  p.step("mask", "none: " + sp(scaled) + " unchanged");
  p.note("(every token is real, no [PAD], and an encoder attends in both directions; a padding or");
  p.note(" causal mask would add -inf to the blocked scores here, before the softmax)");

  const Tensor weights = softmax(scaled, -1);
  p.step("softmax over keys", sp(scaled) + " -> softmax(dim=-1) -> " + sp(weights) + ", each row sums to 1", weights);
  const AttentionOutput ref = scaled_dot_product_attention(qh, kh, vh, Mask(), SdpaOptions{.need_weights = true});
  p.note("(scaled_dot_product_attention gives the same weights: max |difference| = " +
         general(max_abs_diff(weights, ref.weights), 3) + ")");

  const Tensor ctx = matmul(weights, vh);
  p.step("weighted sum of V", sp(weights) + " @ " + sp(vh) + " -> " + sp(ctx), ctx);

  const Tensor ct = ctx.transpose(1, 2);
  const Tensor concat = ct.contiguous().view({B, L, E});
  p.step("concat heads", sp(ctx) + " -> transpose(1,2) -> " + sp(ct) + " -> contiguous -> view -> " + sp(concat),
         concat);

  const nn::Linear& wo = *mha.w_o;
  const Tensor attn = linear(concat, wo.weight, wo.bias);
  p.step("W_O projection", sp(concat) + " @ W_O^T " + shape_paren({wo.weight.size(1), wo.weight.size(0)}) + " + b -> " +
                               sp(attn),
         attn);

  const double eps = block.options().layer_norm_eps;
  const Tensor res1 = add(x, attn);
  const Tensor n1 = layer_norm(res1, {E}, block.norm1->weight, block.norm1->bias, eps);
  p.step("Add & Norm 1", "LayerNorm(x + attention): " + sp(x) + " + " + sp(attn) + " -> LayerNorm(" +
                             std::to_string(E) + ") -> " + sp(n1),
         n1);

  const nn::PositionwiseFeedForward& ffn = *block.ffn;
  const Tensor h = linear(n1, ffn.linear1->weight, ffn.linear1->bias);
  const Tensor a = nn::activate(h, block.options().activation);
  const Tensor f = linear(a, ffn.linear2->weight, ffn.linear2->bias);
  p.step("feed-forward", sp(n1) + " -> linear1 -> " + sp(h) + " -> " + nn::activation_name(block.options().activation) +
                             " -> linear2 -> " + sp(f),
         f);

  const Tensor res2 = add(n1, f);
  const Tensor n2 = layer_norm(res2, {E}, block.norm2->weight, block.norm2->bias, eps);
  p.step("Add & Norm 2", "LayerNorm(x + FFN(x)): " + sp(n1) + " + " + sp(f) + " -> LayerNorm(" + std::to_string(E) +
                             ") -> " + sp(n2),
         n2);
  return n2;
}

}  // namespace

int run_trace(const TraceOptions& opt, std::ostream& out) {
  // ---- build everything first, so an invalid setting fails before any output ----
  std::istringstream words_in(opt.sentence);
  std::vector<std::string> words;
  for (std::string w; words_in >> w;) words.push_back(w);
  if (words.empty()) throw ValueError("trace: --sentence has no words");
  if (opt.layers < 1) throw ValueError("trace: --layers must be >= 1, got " + std::to_string(opt.layers));

  Vocab vocab;
  vocab.add("[PAD]");
  vocab.add("[CLS]");
  vocab.add("[SEP]");
  std::vector<std::string> tokens = {"[CLS]"};
  tokens.insert(tokens.end(), words.begin(), words.end());
  tokens.push_back("[SEP]");
  std::vector<std::int64_t> ids;
  for (const auto& t : tokens) ids.push_back(vocab.add(t));
  const std::int64_t L = static_cast<std::int64_t>(ids.size());

  {
    // Everything the trace allocates, before any of it: the embedding and positional tables,
    // the blocks' weights, and per block the step tensors (rows of E or F, H score maps).
    const std::int64_t E = opt.d_model, V = static_cast<std::int64_t>(vocab.words.size());
    MemoryEstimate need, block;
    need.add({V, E}).add({std::max<std::int64_t>(512, L), E});
    nn::add_encoder_block_memory(block, {.d_model = E, .num_heads = opt.heads, .d_ff = opt.d_ff});
    block.add({L, E}, 40).add({L, opt.d_ff}, 6).add({opt.heads, L, L}, 8);
    need.add(block.scale(opt.layers))
        .check("trace (--d-model " + std::to_string(E) + " --heads " + std::to_string(opt.heads) + " --d-ff " +
               std::to_string(opt.d_ff) + " --layers " + std::to_string(opt.layers) + ")");
  }
  manual_seed(opt.seed);
  nn::Embedding embed(nn::EmbeddingOptions{.num_embeddings = static_cast<std::int64_t>(vocab.words.size()),
                                               .embedding_dim = opt.d_model});
  nn::SinusoidalPositionalEncoding pe(
      nn::SinusoidalPositionalEncodingOptions{.d_model = opt.d_model, .max_len = std::max<std::int64_t>(512, L)});
  std::vector<std::shared_ptr<nn::TransformerEncoderBlock>> blocks;
  for (std::int64_t i = 0; i < opt.layers; ++i) {
    blocks.push_back(std::make_shared<nn::TransformerEncoderBlock>(nn::EncoderBlockOptions{
        .d_model = opt.d_model, .num_heads = opt.heads, .d_ff = opt.d_ff, .dropout = 0.1,
        .activation = nn::Activation::GELU}));
    blocks.back()->eval();  // dropout off, so the pass is deterministic
  }
  const nn::MultiHeadAttention& mha0 = *blocks[0]->self_attn;

  // ---- header ----
  out << "Trace of an encoder forward pass, following the second tutorial's walkthrough.\n"
      << "settings: d_model " << opt.d_model << ", heads " << opt.heads << " (d_k = " << mha0.head_dim() << "), d_ff "
      << opt.d_ff << ", layers " << opt.layers << ", seed " << opt.seed << ", threads " << num_threads() << '\n'
      << "model: random weights (seeded), post-norm blocks as in the tutorial, " << nn::activation_name(nn::Activation::GELU)
      << " feed-forward, eval mode (dropout off); " << blocks[0]->num_parameters() << " parameters per block\n"
      << "Every step is computed with qkv ops on the block's own weights (w_q, w_k, w_v, w_o, norm1, ffn, norm2).\n\n";

  std::string vocab_str;
  for (std::size_t i = 0; i < vocab.words.size(); ++i) vocab_str += (i ? " " : "") + vocab.words[i] + "=" + std::to_string(i);
  std::string tok_str, id_str;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tok_str += (i ? " " : "") + tokens[i];
    id_str += (i ? ", " : "") + std::to_string(ids[i]);
  }
  out << "tokens: " << tok_str << "\nvocab:  " << vocab_str << " (word-level, built from the sentence)\n\n";

  StepPrinter p(out, opt.values);
  const Tensor id_t = Tensor::from_vector(ids, {1, L});
  p.step("token ids", "[" + id_str + "] -> " + sp(id_t) + " int64 (batch 1, " + std::to_string(L) + " tokens)");

  const Tensor emb = embedding(embed.weight, id_t);
  p.step("embedding lookup", sp(id_t) + " -> rows of the table " + shape_paren(embed.weight.shape()) + " -> " +
                                 sp(emb),
         emb);

  const Tensor pe_rows = pe.table().narrow(0, 0, L);
  const Tensor x0 = add(emb, pe_rows);
  p.step("+ positional encoding", sp(emb) + " + pe[0:" + std::to_string(L) + "] " + sp(pe_rows) +
                                      " (sin/cos, broadcast over batch) -> " + sp(x0),
         x0);

  Tensor x = x0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    out << "  -- encoder block " << i << " (post-norm) --\n";
    x = trace_block(*blocks[i], x, p);
  }

  // ---- the library's own forward pass on the same input ----
  Tensor ref = pe.forward(emb);
  const double pe_diff = max_abs_diff(ref, x0);
  for (const auto& b : blocks) ref = b->forward(ref);
  const double diff = max_abs_diff(x, ref);
  out << "\noutput: " << sp(x) << ", one " << opt.d_model << "-dim vector per token\n"
      << "check: positional encoding step vs pe.forward(x): max |difference| = " << general(pe_diff, 3) << '\n'
      << "check: step-by-step result vs block.forward(x)" << (blocks.size() > 1 ? " (chained over all blocks)" : "")
      << ": max |difference| = " << general(diff, 3) << '\n';
  return 0;
}

QKV_TOOL_COMMAND(trace, {
    .name = "trace",
    .summary = "Walk one encoder forward pass step by step, printing every tensor shape",
    .order = 42,
    .group = "The tutorials' experiments",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Follows the second tutorial's walkthrough with a real encoder block (random weights, seeded): tokens "
          "[CLS] ... [SEP], embedding, positional encoding, W_Q/W_K/W_V, split into heads, Q K^T, scaling, mask, "
          "softmax, weighted sum, concat, W_O, Add & Norm, feed-forward, Add & Norm. Each step prints its shapes "
          "and operation, e.g. (1, 5, 512) -> view -> (1, 5, 8, 64) -> transpose(1,2) -> (1, 8, 5, 64). The result "
          "is checked against block.forward(x). d_model must be divisible by --heads.");
      auto opt = std::make_shared<TraceOptions>();
      sub.add_option("--sentence", opt->sentence, "Input sentence, split on spaces into words")->capture_default_str();
      sub.add_option("--d-model", opt->d_model, "Model width (embedding size)")
          ->check(int_range(1, std::int64_t{1} << 16))
          ->capture_default_str();
      sub.add_option("--heads", opt->heads, "Attention heads; d_k = d_model / heads")
          ->check(int_range(1, std::int64_t{1} << 16))
          ->capture_default_str();
      sub.add_option("--d-ff", opt->d_ff, "Feed-forward hidden width")
          ->check(int_range(1, std::int64_t{1} << 18))
          ->capture_default_str();
      sub.add_option("--layers", opt->layers, "Encoder blocks to trace")
          ->check(int_range(1, 64))
          ->capture_default_str();
      sub.add_option("--values", opt->values, "Also print the first N numbers of each step's tensor (0: none)")
          ->check(int_range(0, std::int64_t{1} << 20))
          ->capture_default_str();
      add_seed_option(sub, opt->seed, "Seed for the random weights");
      return [opt] { return run_trace(*opt, std::cout); };
    }});

}  // namespace qkv::tool
