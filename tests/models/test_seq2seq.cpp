// Seq2Seq: data generators, batch layout, padding masks, greedy decoding on a
// hand-set model, config JSON, and one reduced training run (reverse, lengths
// up to 6) checked for accuracy, checkpoint round trip, attention-map names
// and shapes, and the anti-diagonal cross-attention of a reverse model.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "testing/checkpoint_compare.h"
#include "qkv/models/attention_maps.h"
#include "qkv/models/seq2seq.h"
#include "qkv/train/seq2seq.h"
#include "qkv/qkv.h"

namespace qkv::models {
namespace {

using train::Seq2SeqReport;
using train::Seq2SeqTrainCallbacks;
using train::Seq2SeqTrainer;
using train::Seq2SeqTrainOptions;
using train::Seq2SeqTrainResult;
using train::seq2seq_lr_at;
using train::train_seq2seq;

using Digits = std::vector<std::int64_t>;

TEST(Seq2SeqData, TaskTargets) {
  const Digits in{3, 1, 4, 1, 5, 9, 2, 6};
  EXPECT_EQ(seq2seq_target(Seq2SeqTask::Reverse, in), (Digits{6, 2, 9, 5, 1, 4, 1, 3}));
  EXPECT_EQ(seq2seq_target(Seq2SeqTask::Copy, in), in);
  EXPECT_EQ(seq2seq_target(Seq2SeqTask::Sort, in), (Digits{1, 1, 2, 3, 4, 5, 6, 9}));
  EXPECT_EQ(seq2seq_target(Seq2SeqTask::Reverse, Digits{7}), (Digits{7}));
  EXPECT_EQ(parse_seq2seq_task("sort"), Seq2SeqTask::Sort);
  EXPECT_THROW(parse_seq2seq_task("rotate"), ValueError);
}

TEST(Seq2SeqData, GeneratedSetsAreCorrectDisjointAndSeeded) {
  for (Seq2SeqTask task : {Seq2SeqTask::Reverse, Seq2SeqTask::Copy, Seq2SeqTask::Sort}) {
    const Seq2SeqDataOptions o{.task = task, .min_len = 1, .max_len = 10, .train_size = 5000, .test_size = 500,
                               .seed = 7};
    const Seq2SeqData d = make_seq2seq_data(o);
    ASSERT_EQ(d.train.size(), 5000u);
    ASSERT_EQ(d.test.size(), 500u);
    std::set<Digits> test_inputs;
    std::set<std::int64_t> train_lengths;
    for (const auto& e : d.test) {
      EXPECT_EQ(e.target, seq2seq_target(task, e.input));
      EXPECT_TRUE(test_inputs.insert(e.input).second) << "held-out inputs are distinct";
    }
    for (const auto& e : d.train) {
      ASSERT_GE(e.input.size(), 1u);
      ASSERT_LE(e.input.size(), 10u);
      for (std::int64_t v : e.input) ASSERT_TRUE(v >= 0 && v <= 9);
      EXPECT_EQ(e.target, seq2seq_target(task, e.input));
      EXPECT_EQ(test_inputs.count(e.input), 0u) << "a training sequence is in the held-out set";
      train_lengths.insert(static_cast<std::int64_t>(e.input.size()));
    }
    EXPECT_EQ(train_lengths.size(), 10u) << "every length 1..10 appears in training";
    // The same seed gives the same data; another seed different data.
    const Seq2SeqData again = make_seq2seq_data(o);
    EXPECT_EQ(again.train[123].input, d.train[123].input);
    EXPECT_EQ(again.test[45].input, d.test[45].input);
    Seq2SeqDataOptions o2 = o;
    o2.seed = 8;
    EXPECT_NE(make_seq2seq_data(o2).train[0].input, d.train[0].input);
  }
  // Short lengths: the held-out set may take at most a tenth of a length's sequences.
  EXPECT_THROW(make_seq2seq_data({.min_len = 1, .max_len = 2, .train_size = 10, .test_size = 12}), ValueError);
  EXPECT_THROW(make_seq2seq_data({.min_len = 3, .max_len = 2}), ValueError);
}

TEST(Seq2SeqData, BatchLayout) {
  const Seq2SeqBatch b = make_seq2seq_batch({{{1, 2, 3}, {3, 2, 1}}, {{9}, {9}}});
  // source: digits <eos> <pad>; digit d is token d + 3; <pad> 0, <bos> 1, <eos> 2.
  EXPECT_EQ(b.src.shape(), (Shape{2, 4}));
  EXPECT_EQ(b.src.to_vector<std::int64_t>(), (Digits{4, 5, 6, 2, 12, 2, 0, 0}));
  EXPECT_EQ(b.tgt_in.to_vector<std::int64_t>(), (Digits{1, 6, 5, 4, 1, 12, 0, 0}));
  EXPECT_EQ(b.tgt_out.to_vector<std::int64_t>(), (Digits{6, 5, 4, 2, 12, 2, -100, -100}));
  EXPECT_EQ(seq2seq_token_label(2), "<eos>");
  EXPECT_EQ(seq2seq_token_label(12), "9");
  EXPECT_EQ(parse_seq2seq_input("3 1 4"), (Digits{3, 1, 4}));
  EXPECT_EQ(parse_seq2seq_input("314"), (Digits{3, 1, 4}));
  EXPECT_THROW(parse_seq2seq_input("3 x"), ValueError);
}

TEST(Seq2SeqModel, ConfigJsonRoundTripAndNames) {
  const Seq2SeqOptions o{.d_model = 24, .num_heads = 3, .num_encoder_layers = 1, .num_decoder_layers = 2, .d_ff = 40,
                         .dropout = 0.125, .max_positions = 20, .norm_first = false, .learned_positions = true,
                         .activation = nn::Activation::GELU};
  EXPECT_EQ(Seq2SeqOptions::from_json(o.to_json()), o);
  EXPECT_EQ(Seq2SeqOptions::from_json("{}"), Seq2SeqOptions{});
  EXPECT_THROW(Seq2SeqOptions::from_json(R"({"d_model": 16, "colour": 1})"), ValueError);
  EXPECT_THROW(Seq2SeqOptions::from_json(R"({"d_model": "big"})"), ValueError);
  EXPECT_THROW(Seq2SeqOptions::from_json("not json"), ValueError);

  Seq2Seq m(o);
  std::set<std::string> names;
  for (const auto& [n, t] : m.named_parameters()) names.insert(n);
  for (const char* n : {"src_embed.weight", "tgt_embed.weight", "pos.pe.weight", "encoder.layers.0.self_attn.w_q.weight",
                        "decoder.layers.1.cross_attn.w_k.weight", "decoder.layers.1.self_attn.w_o.bias",
                        "generator.weight", "generator.bias"})
    EXPECT_EQ(names.count(n), 1u) << n;
  EXPECT_THROW(Seq2Seq(Seq2SeqOptions{.d_model = 10, .num_heads = 4}), ValueError);
}

// Padding keys get weight exactly 0 in encoder self-attention and in decoder
// cross-attention, and a padded row decodes exactly as it does alone.
TEST(Seq2SeqModel, PaddingKeysAreNeverAttended) {
  manual_seed(3);
  Seq2Seq m({.d_model = 16, .num_heads = 2, .num_encoder_layers = 2, .num_decoder_layers = 2, .d_ff = 32});
  m.eval();
  const std::vector<Seq2SeqExample> ex{{{4, 2}, {2, 4}}, {{1, 2, 3, 4, 5}, {5, 4, 3, 2, 1}}};
  const Seq2SeqBatch b = make_seq2seq_batch(ex);  // row 0: 2 digits + <eos>, then 3 pads (S = 6)
  ASSERT_EQ(b.src.size(1), 6);
  std::vector<Tensor> enc_w, self_w, cross_w;
  const Tensor memory = m.encode(b.src, &enc_w);
  const Tensor logits = m.decode(b.tgt_in, memory, b.src, &self_w, &cross_w);
  ASSERT_EQ(enc_w.size(), 2u);
  ASSERT_EQ(cross_w.size(), 2u);
  for (int layer = 0; layer < 2; ++layer) {
    const Tensor& e = enc_w[layer];    // [B, H, S, S]
    const Tensor& c = cross_w[layer];  // [B, H, T, S]
    ASSERT_EQ(e.shape(), (Shape{2, 2, 6, 6}));
    ASSERT_EQ(c.shape(), (Shape{2, 2, 6, 6}));
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t q = 0; q < 6; ++q) {
        double row = 0;
        for (std::int64_t k = 0; k < 6; ++k) row += e.at({0, h, q, k});
        EXPECT_NEAR(row, 1.0, 1e-5);
        for (std::int64_t k = 3; k < 6; ++k) {
          EXPECT_EQ(e.at({0, h, q, k}), 0.0) << "encoder layer " << layer << " head " << h << " query " << q;
          EXPECT_EQ(c.at({0, h, q, k}), 0.0) << "cross layer " << layer << " head " << h << " query " << q;
        }
        for (std::int64_t k = 0; k < 3; ++k) EXPECT_GT(e.at({0, h, q, k}), 0.0);
      }
  }
  // Row 0 alone (no padding) gives the same logits on its real positions.
  const Seq2SeqBatch alone = make_seq2seq_batch({ex[0]});
  const Tensor l1 = m.forward(alone.src, alone.tgt_in);  // [1, 3, V]
  EXPECT_LT(max_abs_diff(l1.select(0, 0), logits.select(0, 0).narrow(0, 0, 3).contiguous()), 1e-5);
}

// A hand-set model with no attention layers: the decoder output is
// generator(tgt_embed(token)), wired so that <bos> -> 3 and digit d -> d + 1,
// 9 -> <eos>. Greedy decoding must follow it exactly, stop at <eos>, respect
// max_new_tokens, and give the same result every time.
TEST(Seq2SeqModel, GreedyDecodingOnHandSetModel) {
  const std::int64_t V = kSeq2SeqVocab, E = 16;
  Seq2Seq m({.d_model = E, .num_heads = 1, .num_encoder_layers = 0, .num_decoder_layers = 0, .d_ff = 4,
             .max_positions = 16, .norm_first = false, .learned_positions = true});
  nn::StateDict sd = m.state_dict();
  for (auto& [n, t] : sd) t = Tensor::zeros(t.shape());
  std::vector<float> emb(V * E, 0.f), gen(V * E, 0.f);
  for (std::int64_t t = 0; t < V; ++t) emb[t * E + t] = 1.f;  // token t -> unit vector e_t
  auto next = [](std::int64_t tok) -> std::int64_t {
    if (tok == kSeq2SeqBos) return kSeq2SeqFirstDigit + 3;
    if (tok >= kSeq2SeqFirstDigit && tok < V - 1) return tok + 1;
    return kSeq2SeqEos;
  };
  for (std::int64_t t = 0; t < V; ++t) gen[next(t) * E + t] = 10.f;  // logit[next(t)] = 10 for input e_t
  sd["tgt_embed.weight"] = Tensor::from_vector(emb, {V, E});
  sd["src_embed.weight"] = Tensor::from_vector(emb, {V, E});
  sd["generator.weight"] = Tensor::from_vector(gen, {V, E});
  m.load_state_dict(sd);
  m.eval();
  const Tensor src = make_seq2seq_source({{1, 2}, {5}});
  const auto out = m.greedy_decode(src, 12);
  const Digits want{6, 7, 8, 9, 10, 11, 12};  // digits 3..9 as token ids, then <eos> ends the row
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], want);
  EXPECT_EQ(out[1], want);
  EXPECT_EQ(m.greedy_decode(src, 12), out) << "deterministic";
  EXPECT_EQ(m.greedy_decode(src, 3)[0], (Digits{6, 7, 8, -1})) << "cut at max_new_tokens, no <eos>: marked -1";
  // Exact accuracy counts only full matches: target 3..9 matches, anything else not.
  const std::vector<Seq2SeqExample> ex{{{1}, {3, 4, 5, 6, 7, 8, 9}}, {{2}, {3, 4, 5}}};
  std::vector<Digits> pred;
  EXPECT_DOUBLE_EQ(seq2seq_exact_accuracy(m, ex, 500, &pred), 0.5);
  EXPECT_EQ(pred[1], (Digits{3, 4, 5, 6, 7, 8, 9}));
}

// A greedy decode of a random model is deterministic and independent of batching.
TEST(Seq2SeqModel, GreedyDecodingIsDeterministicAndBatchIndependent) {
  manual_seed(11);
  Seq2Seq m({.d_model = 16, .num_heads = 2, .num_encoder_layers = 1, .num_decoder_layers = 1, .d_ff = 32});
  m.eval();
  const std::vector<Digits> inputs{{1, 2, 3}, {9, 8, 7, 6, 5, 4}, {0}};
  const auto all = m.greedy_decode(make_seq2seq_source(inputs), 8);
  EXPECT_EQ(m.greedy_decode(make_seq2seq_source(inputs), 8), all);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    EXPECT_EQ(m.greedy_decode(make_seq2seq_source({inputs[i]}), 8)[0], all[i]) << "row " << i;
}

// Fraction of query rows i < L of a cross-attention head whose argmax key is
// source position L-1-i (the anti-diagonal of the reversal).
double anti_diagonal_fraction(const Tensor& w, std::int64_t head, std::int64_t L) {
  std::int64_t hits = 0;
  for (std::int64_t i = 0; i < L; ++i) {
    std::int64_t best = 0;
    for (std::int64_t k = 1; k < w.size(2); ++k)
      if (w.at({head, i, k}) > w.at({head, i, best})) best = k;
    hits += best == L - 1 - i;
  }
  return static_cast<double>(hits) / static_cast<double>(L);
}

// The reduced training run: reverse with lengths 1..6. One run, several checks.
TEST(Seq2SeqTraining, ReducedReverseReachesAccuracyAndAttendsAntiDiagonally) {
  const Seq2SeqOptions mo{.d_model = 32, .num_heads = 4, .num_encoder_layers = 2, .num_decoder_layers = 2, .d_ff = 64};
  const Seq2SeqTrainOptions to{
      .data = {.task = Seq2SeqTask::Reverse, .min_len = 1, .max_len = 6, .train_size = 8000, .test_size = 500,
               .seed = 1},
      .epochs = 6,
      .batch = 64,
      .lr = 3e-3,
      .warmup_steps = 100,
      .seed = 1};
  Seq2SeqTrainResult r = train_seq2seq(mo, to);
  ASSERT_FALSE(r.reports.empty());
  const double acc = r.reports.back().exact_acc;
  std::printf("reduced reverse run: %lld steps, held-out exact accuracy %.4f, loss %.4f, %.1fs\n",
              static_cast<long long>(r.steps), acc, r.reports.back().loss, r.reports.back().elapsed_s);
  // Measured 1.000 (seed 1, 2 threads); the first epoch's report is far below.
  EXPECT_GE(acc, 0.95);
  EXPECT_LT(r.reports.front().exact_acc, acc);

  // Checkpoint round trip: same tensors, identical decodings.
  const std::string path = "/tmp/qkv_test_seq2seq_" + std::to_string(::getpid()) + ".safetensors";
  io::save_checkpoint(path, {.model = r.model.get(), .model_type = "seq2seq", .config_json = mo.to_json(),
                             .metadata = {{"task", "reverse"}}});
  const io::Checkpoint ckpt = io::load_checkpoint(path);
  std::remove(path.c_str());
  auto loaded = seq2seq_from_checkpoint(ckpt);
  EXPECT_EQ(loaded->options(), mo);
  for (const auto& [n, t] : r.model->state_dict()) EXPECT_EQ(max_abs_diff(t, ckpt.model.at(n)), 0.0) << n;
  std::vector<Digits> p0, p1;
  const double acc0 = seq2seq_exact_accuracy(*r.model, r.data.test, 500, &p0);
  const double acc1 = seq2seq_exact_accuracy(*loaded, r.data.test, 500, &p1);
  EXPECT_EQ(acc0, acc1);
  EXPECT_EQ(p0, p1);

  // Attention maps: names, kinds, shapes and labels.
  const std::string input = "3 1 4 1 5 9";
  const auto maps = seq2seq_attention_maps(ckpt, input);
  ASSERT_EQ(maps.size(), 6u);
  std::set<std::string> names;
  for (const auto& m : maps) names.insert(m.name);
  for (const char* n : {"encoder.layers.0.self_attn", "encoder.layers.1.self_attn", "decoder.layers.0.self_attn",
                        "decoder.layers.1.self_attn", "decoder.layers.0.cross_attn", "decoder.layers.1.cross_attn"})
    EXPECT_EQ(names.count(n), 1u) << n;
  const std::vector<std::string> src_labels{"3", "1", "4", "1", "5", "9", "<eos>"};
  const std::vector<std::string> tgt_labels{"<bos>", "9", "5", "1", "4", "1", "3"};  // the model's own output
  for (const auto& m : maps) {
    SCOPED_TRACE(m.name);
    const bool enc = m.name.rfind("encoder", 0) == 0;
    EXPECT_EQ(m.kind, m.name.find("cross") != std::string::npos ? "cross" : "self");
    EXPECT_EQ(m.weights.dim(), 3);
    EXPECT_EQ(m.weights.size(0), 4);
    EXPECT_EQ(m.query_tokens, enc ? src_labels : tgt_labels);
    EXPECT_EQ(m.key_tokens, m.kind == "cross" || enc ? src_labels : tgt_labels);
    EXPECT_EQ(m.weights.size(1), static_cast<std::int64_t>(m.query_tokens.size()));
    EXPECT_EQ(m.weights.size(2), static_cast<std::int64_t>(m.key_tokens.size()));
  }
  EXPECT_THROW(seq2seq_attention_maps(ckpt, "12a"), ValueError);
  EXPECT_EQ(attention_maps_for(ckpt, input).size(), 6u);

  // Anti-diagonal: in some cross-attention head, query i's argmax key is source
  // position L-1-i for most i, averaged over held-out inputs of every length >= 3.
  double best = 0;
  std::string best_name;
  const std::vector<std::string> probes{"123", "9081", "55012", "671234", "204", "31415"};
  for (std::size_t mi = 0; mi < maps.size(); ++mi) {
    if (maps[mi].kind != "cross") continue;
    for (std::int64_t h = 0; h < 4; ++h) {
      double sum = 0;
      for (const auto& p : probes) {
        const auto pm = seq2seq_attention_maps(ckpt, p);
        sum += anti_diagonal_fraction(pm[mi].weights, h, static_cast<std::int64_t>(p.size()));
      }
      const double f = sum / static_cast<double>(probes.size());
      if (f > best) best = f, best_name = maps[mi].name + " head " + std::to_string(h);
    }
  }
  std::printf("most anti-diagonal cross-attention head: %s (%.3f of positions)\n", best_name.c_str(), best);
  EXPECT_GE(best, 0.8) << best_name;

  // The check discriminates: an untrained model of the same shape has no such head.
  manual_seed(99);
  Seq2Seq untrained(mo);
  untrained.eval();
  double untrained_best = 0;
  for (std::int64_t layer = 0; layer < 2; ++layer)
    for (std::int64_t h = 0; h < 4; ++h) {
      double sum = 0;
      for (const auto& p : probes) {
        std::vector<Tensor> cw;
        const Tensor src = make_seq2seq_source({parse_seq2seq_input(p)});
        Digits tin(p.size() + 1, kSeq2SeqFirstDigit);
        tin[0] = kSeq2SeqBos;
        untrained.decode(Tensor::from_vector(tin, {1, static_cast<std::int64_t>(tin.size())}), untrained.encode(src),
                         src, nullptr, &cw);
        sum += anti_diagonal_fraction(cw[layer].select(0, 0), h, static_cast<std::int64_t>(p.size()));
      }
      untrained_best = std::max(untrained_best, sum / static_cast<double>(probes.size()));
    }
  EXPECT_LT(untrained_best, 0.8);
}

// ---------------------------------------------------------------- resumable training

using qkv::testing::bitwise_equal;
using qkv::testing::expect_same_checkpoint_tensors;

std::string temp_path(const std::string& name) {
  return "/tmp/qkv_test_seq2seq_" + std::to_string(::getpid()) + "_" + name + ".safetensors";
}

// A tiny run with dropout (so the RNG matters) and evaluations that do not fall
// on epoch ends (so the loss accumulator is mid-way at a save): 300 examples in
// batches of 32 = 10 steps per epoch, an evaluation every 3 steps, 4 epochs.
const Seq2SeqOptions kTinyModel{.d_model = 16, .num_heads = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                                .d_ff = 32, .dropout = 0.1, .max_positions = 8};
const Seq2SeqTrainOptions kTinyRun{
    .data = {.task = Seq2SeqTask::Reverse, .min_len = 1, .max_len = 4, .train_size = 300, .test_size = 30, .seed = 5},
    .epochs = 4, .batch = 32, .lr = 3e-3, .warmup_steps = 10, .evals_per_epoch = 3, .seed = 5};

void expect_same_reports(const std::vector<Seq2SeqReport>& got, const std::vector<Seq2SeqReport>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("report at step " + std::to_string(want[i].step));
    EXPECT_EQ(got[i].step, want[i].step);
    EXPECT_EQ(got[i].epoch, want[i].epoch);
    EXPECT_EQ(got[i].loss, want[i].loss);  // exact: bitwise for finite doubles
    EXPECT_EQ(got[i].lr, want[i].lr);
    EXPECT_EQ(got[i].exact_acc, want[i].exact_acc);
    EXPECT_EQ(got[i].train_acc, want[i].train_acc);
  }
}

// Everything a later step depends on, compared bit for bit between two checkpoints.
void expect_same_state(const io::Checkpoint& x, const io::Checkpoint& y) {
  expect_same_checkpoint_tensors(x, y);
  for (const char* k : {"step", "epoch", "finished", "loss_count", "shuffle_rng_seed", "shuffle_rng_offset",
                        "train_config"})
    EXPECT_EQ(x.metadata.at(k), y.metadata.at(k)) << k;
}

std::vector<Seq2SeqReport> after_step(const std::vector<Seq2SeqReport>& r, std::int64_t step) {
  std::vector<Seq2SeqReport> out;
  for (const auto& x : r)
    if (x.step > step) out.push_back(x);
  return out;
}

// Saved at an epoch end (by stopping there) or in the middle of an epoch (from
// on_step), a run resumed from the checkpoint ends bit for bit where the
// uninterrupted run ends: weights, AdamW state, both RNG streams, losses.
TEST(Seq2SeqTraining, ResumeFromAnyStepIsBitwiseIdentical) {
  const std::string mid = temp_path("mid"), end_full = temp_path("full"), stopped = temp_path("stopped"),
                    end_a = temp_path("end_a"), end_b = temp_path("end_b");
  Seq2SeqTrainer full(kTinyModel, kTinyRun);
  ASSERT_EQ(full.steps_per_epoch(), 10);
  ASSERT_EQ(full.total_steps(), 40);
  Seq2SeqTrainCallbacks cb;
  cb.on_step = [&](std::int64_t step, std::int64_t, double) {
    if (step == 14) full.save(mid);  // epoch 2, shuffled order half used, loss accumulator at 2 steps
  };
  EXPECT_TRUE(full.train(cb));
  full.save(end_full);
  ASSERT_EQ(full.reports().size(), 14u);  // 3 per epoch + the last step

  {  // stopped after epoch 2 (loss accumulator at 2 steps there too), then resumed
    Seq2SeqTrainer first(kTinyModel, kTinyRun);
    EXPECT_FALSE(first.train({}, 2));
    EXPECT_EQ(first.epochs_done(), 2);
    EXPECT_EQ(first.step(), 20);
    expect_same_reports(first.reports(), std::vector<Seq2SeqReport>(full.reports().begin(), full.reports().begin() + 6));
    first.save(stopped);
  }
  const io::Checkpoint st = io::load_checkpoint(stopped);
  EXPECT_EQ(st.metadata.at("finished"), "false");
  EXPECT_EQ(st.metadata.at("loss_count"), "2");
  manual_seed(12345);  // the resumed run must not depend on the generator's state before it
  Seq2SeqTrainer a(st, stopped);
  EXPECT_EQ(a.step(), 20);
  EXPECT_TRUE(a.train());
  expect_same_reports(a.reports(), after_step(full.reports(), 20));
  a.save(end_a);

  Seq2SeqTrainer b(io::load_checkpoint(mid), mid);
  EXPECT_EQ(b.step(), 14);
  EXPECT_TRUE(b.train());
  expect_same_reports(b.reports(), after_step(full.reports(), 14));
  b.save(end_b);

  const io::Checkpoint want = io::load_checkpoint(end_full);
  EXPECT_GT(want.rng_offset, 0u) << "dropout drew from the generator";
  {
    SCOPED_TRACE("resumed at the end of epoch 2");
    expect_same_state(io::load_checkpoint(end_a), want);
  }
  {
    SCOPED_TRACE("resumed at step 14");
    expect_same_state(io::load_checkpoint(end_b), want);
  }
  // The checkpoint is also an ordinary seq2seq checkpoint (for heatmaps).
  auto m = seq2seq_from_checkpoint(want);
  for (const auto& [n, t] : full.model()->state_dict()) EXPECT_TRUE(bitwise_equal(t, m->state_dict().at(n))) << n;
  for (const auto& p : {mid, end_full, stopped, end_a, end_b}) std::remove(p.c_str());
}

TEST(Seq2SeqTraining, TrainOptionsJsonRoundTrip) {
  Seq2SeqTrainOptions o = kTinyRun;
  o.lr = 0.1 + 0.2;  // not a short decimal: must come back bit for bit
  o.min_lr_ratio = 1.0 / 3.0;
  o.seed = 18446744073709551615ull;
  o.data.task = Seq2SeqTask::Sort;
  const Seq2SeqTrainOptions p = Seq2SeqTrainOptions::from_json(o.to_json());
  EXPECT_EQ(p.to_json(), o.to_json());
  EXPECT_EQ(p.lr, o.lr);
  EXPECT_EQ(p.min_lr_ratio, o.min_lr_ratio);
  EXPECT_EQ(p.seed, o.seed);
  EXPECT_EQ(p.data.task, Seq2SeqTask::Sort);
  EXPECT_THROW(Seq2SeqTrainOptions::from_json(R"({"epochs": 3, "colour": 1})"), ValueError);
  EXPECT_THROW(Seq2SeqTrainOptions::from_json(R"({"batch": 0})"), ValueError);
  EXPECT_THROW(Seq2SeqTrainOptions::from_json(R"({"task": "rotate"})"), ValueError);
  EXPECT_THROW(Seq2SeqTrainOptions::from_json(R"({"seed": -1})"), ValueError);
}

// A checkpoint that cannot continue the run is a FormatError naming the file
// and the entry, and leaves the default generator as it was.
TEST(Seq2SeqTraining, ResumeRejectsInconsistentCheckpoints) {
  const std::string path = temp_path("bad");
  Seq2SeqTrainer t(kTinyModel, kTinyRun);
  t.train({}, 1);
  t.save(path);
  const io::Checkpoint good = io::load_checkpoint(path);
  std::remove(path.c_str());
  auto expect_rejected = [&](const io::Checkpoint& c, const std::string& says) {
    manual_seed(777);
    default_generator().set_offset(3);
    try {
      Seq2SeqTrainer r(c, "run.safetensors");
      ADD_FAILURE() << "accepted a checkpoint that should fail with: " << says;
    } catch (const FormatError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("run.safetensors: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(says), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    EXPECT_EQ(default_generator().seed(), 777u) << "a rejected checkpoint changed the default generator";
    EXPECT_EQ(default_generator().offset(), 3u) << "a rejected checkpoint changed the default generator";
  };
  {
    io::Checkpoint c = good;
    c.metadata.erase("train_config");  // e.g. a model saved without its run
    expect_rejected(c, "no metadata 'train_config'");
  }
  {
    io::Checkpoint c = good;
    c.metadata["train_config"] = R"({"epochs": "many"})";
    expect_rejected(c, "'epochs' must be an integer");
  }
  {
    io::Checkpoint c = good;
    c.has_rng = false;
    expect_rejected(c, "no RNG state");
  }
  {
    io::Checkpoint c = good;
    c.model_type = "classifier";
    expect_rejected(c, "'classifier' model");
  }
  {
    io::Checkpoint c = good;
    c.extra.erase("order");
    expect_rejected(c, "no tensor 'extra.order'");
  }
  {
    io::Checkpoint c = good;
    std::vector<std::int64_t> order(300, 0);  // not a permutation
    c.extra["order"] = Tensor::from_vector(order, {300});
    expect_rejected(c, "'extra.order' [300] is not a permutation");
  }
  {
    io::Checkpoint c = good;
    c.extra["loss_sum"] = Tensor::scalar(0.0, DType::F32);
    expect_rejected(c, "'extra.loss_sum' is float32");
  }
  {
    io::Checkpoint c = good;
    auto v = c.extra.at("train_targets").to_vector<std::int64_t>();
    v[0] = (v[0] + 1) % 10;  // row 0's target no longer the reverse of its input
    c.extra["train_targets"] = Tensor::from_vector(v, c.extra.at("train_targets").shape());
    expect_rejected(c, "'extra.train_targets' row 0 is not the reverse of its input");
  }
  {
    io::Checkpoint c = good;
    auto v = c.extra.at("test_inputs").to_vector<std::int64_t>();
    v[0] = 42;
    c.extra["test_inputs"] = Tensor::from_vector(v, c.extra.at("test_inputs").shape());
    expect_rejected(c, "'extra.test_inputs' row 0 holds 42");
  }
  {
    io::Checkpoint c = good;
    c.extra["train_inputs"] = c.extra.at("train_inputs").narrow(0, 0, 10).contiguous();
    expect_rejected(c, "should both be [300,4]");
  }
  {
    io::Checkpoint c = good;
    c.metadata["step"] = "11";  // the AdamW state says 10
    expect_rejected(c, "optimiser state is at step 10, the run at step 11");
  }
  {
    io::Checkpoint c = good;
    c.metadata["step"] = "-3";
    expect_rejected(c, "'step' is not an unsigned integer");
  }
  {
    io::Checkpoint c = good;
    c.model.erase("generator.weight");
    expect_rejected(c, "generator.weight");
  }
  // A config far larger than the tensors present is rejected before the model is built.
  {
    io::Checkpoint c = good;
    c.config_json = R"({"d_model": 1048576, "num_heads": 1, "d_ff": 1048576})";
    expect_rejected(c, "describes a model of at least");
    EXPECT_THROW(seq2seq_from_checkpoint(c), ValueError);
  }
  {
    io::Checkpoint c = good;
    Seq2SeqOptions o = kTinyModel;
    o.max_positions = std::int64_t{1} << 40;  // the sinusoidal table is not saved: 2^40 x 16 floats
    c.config_json = o.to_json();
    expect_rejected(c, "positional table of 1099511627776 x 16");
    EXPECT_THROW(seq2seq_from_checkpoint(c), ValueError);
  }
}

}  // namespace
}  // namespace qkv::models
