// The continuous-batching scheduler (infer/scheduler.h) on a small random GPT-2: every request's
// tokens equal the same request served alone, whatever runs beside it (16 client threads, mixed
// prompts, lengths, greedy and seeded sampling, chunked prefill); cancellation frees the slot
// for the next request; a long prompt's prefill does not stall the running streams; stop tokens,
// lengths, logprobs; the queue bound, shutdown, and every bad request named. Label
// `concurrency`: `make test-tsan` runs it under ThreadSanitizer.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gpt2_test_util.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/scheduler.h"
#include "qkv/infer/score.h"
#include "testing/concurrent.h"
#include "testing/gated_model.h"
#include "testing/guards.h"

namespace {

using namespace qkv::infer;
using namespace std::chrono_literals;
using i64 = std::int64_t;

std::shared_ptr<const CausalLM> model() {
  static const auto m = std::shared_ptr<const CausalLM>(qkv::testing::tiny_gpt2(5));
  return m;
}

// Waits for the whole sequence; its tokens.
std::vector<GeneratedToken> drain(Sequence& s) {
  std::vector<GeneratedToken> all, got;
  for (;;) {
    const bool done = s.wait(got, 1000ms);
    for (auto& t : got) all.push_back(std::move(t));
    got.clear();
    if (done) return all;
  }
}

std::vector<i64> ids(const std::vector<GeneratedToken>& t) {
  std::vector<i64> v;
  for (const auto& x : t) v.push_back(x.id);
  return v;
}

// Request r of the mixed load: prompt lengths 1..40, 1..20 new tokens, greedy or seeded.
SequenceRequest mixed_request(int r) {
  qkv::Generator gen(500 + static_cast<std::uint64_t>(r));
  SequenceRequest q;
  const i64 n = 1 + (r * 13) % 40;
  for (i64 i = 0; i < n; ++i) q.prompt.push_back(static_cast<i64>(gen.next_u64() % 60));
  q.max_new_tokens = 1 + (r * 7) % 20;
  if (r % 3 != 0) q.sampling = {.temperature = 0.9, .top_k = r % 2 ? 0 : 12, .top_p = r % 4 == 1 ? 0.9 : 1.0,
                                .seed = static_cast<std::uint64_t>(r)};
  if (r % 5 == 0) q.stop_ids = {60, 3};
  if (r % 4 == 2) q.logprobs = 2;
  return q;
}

struct Served {
  std::vector<GeneratedToken> tokens;
  FinishReason reason;
};

Served serve(Scheduler& s, const SequenceRequest& r) {
  auto seq = s.submit(r);
  Served out{drain(*seq), FinishReason::None};
  out.reason = seq->finish_reason();
  return out;
}

void expect_same(const Served& got, const Served& alone, const std::string& what) {
  EXPECT_EQ(ids(got.tokens), ids(alone.tokens)) << what;
  EXPECT_EQ(got.reason, alone.reason) << what;
  ASSERT_EQ(got.tokens.size(), alone.tokens.size()) << what;
  for (std::size_t i = 0; i < got.tokens.size(); ++i) {
    EXPECT_EQ(got.tokens[i].logprob, alone.tokens[i].logprob) << what << ", token " << i;
    EXPECT_EQ(got.tokens[i].top, alone.tokens[i].top) << what << ", token " << i;
  }
}

TEST(Scheduler, GreedyTokensAreThoseOfGenerate) {
  Scheduler s(model(), {.slots = 3, .context = 64});
  const std::vector<std::vector<i64>> prompts = {{1, 2, 3}, {9, 8, 7, 6, 5, 4, 3}, {11}};
  for (const auto& p : prompts) {
    const auto want = generate(*model(), {p}, {.max_new_tokens = 12, .logprobs = 3});
    const Served got = serve(s, {.prompt = p, .max_new_tokens = 12, .logprobs = 3});
    EXPECT_EQ(ids(got.tokens), want[0].new_ids);
    EXPECT_EQ(got.reason, FinishReason::Length);
    ASSERT_EQ(got.tokens.size(), want[0].logprobs.size());
    for (std::size_t i = 0; i < got.tokens.size(); ++i) {
      EXPECT_NEAR(got.tokens[i].logprob, want[0].logprobs[i].logprob, 1e-5);
      ASSERT_EQ(got.tokens[i].top.size(), 3u);
      EXPECT_EQ(got.tokens[i].top[0].first, want[0].logprobs[i].top[0].first);
    }
  }
}

TEST(Scheduler, SixteenClientsEachGetTheirTokensAlone) {
  qkv::testing::ThreadsGuard tg;
  qkv::set_num_threads(qkv::testing::kPoolThreads);
  constexpr int kRequests = 48;
  for (i64 chunk : {256, 5}) {
    Scheduler s(model(), {.slots = 4, .context = 64, .max_queue = 64, .prefill_chunk = chunk});
    std::vector<Served> alone;
    for (int r = 0; r < kRequests; ++r) alone.push_back(serve(s, mixed_request(r)));
    std::vector<Served> together(kRequests);
    const auto errors = qkv::testing::serve_concurrently(16, kRequests, [&](int r) {
      together[static_cast<std::size_t>(r)] = serve(s, mixed_request(r));
    });
    EXPECT_TRUE(errors.empty()) << errors.front();
    for (int r = 0; r < kRequests; ++r)
      expect_same(together[static_cast<std::size_t>(r)], alone[static_cast<std::size_t>(r)],
                  "request " + std::to_string(r) + ", prefill chunk " + std::to_string(chunk));
    const SchedulerStats st = s.stats();
    EXPECT_EQ(st.busy, 0);
    EXPECT_EQ(st.queued, 0);
    EXPECT_GT(st.steps, 0);
  }
}

TEST(Scheduler, StopTokenEndsTheSequenceAndIsKept) {
  Scheduler s(model(), {.slots = 2, .context = 64});
  const SequenceRequest base{.prompt = {4, 5, 6}, .max_new_tokens = 10};
  const Served all = serve(s, base);
  ASSERT_EQ(all.tokens.size(), 10u);
  SequenceRequest stop = base;
  stop.stop_ids = {all.tokens[3].id};
  const Served cut = serve(s, stop);
  std::size_t first = 0;
  while (all.tokens[first].id != all.tokens[3].id) ++first;
  EXPECT_EQ(cut.tokens.size(), first + 1);
  EXPECT_EQ(cut.reason, FinishReason::Stop);
  EXPECT_EQ(cut.tokens.back().id, all.tokens[3].id);
}

TEST(Scheduler, CancelFreesTheSlotWithinOneStep) {
  auto gated = std::make_shared<qkv::testing::GatedModel>(model());
  Scheduler s(gated, {.slots = 1, .context = 64});
  auto running = s.submit({.prompt = {1, 2}, .max_new_tokens = 60});
  auto queued = s.submit({.prompt = {3}, .max_new_tokens = 5});
  gated->allow(3);  // the prefill and two decode steps
  std::vector<GeneratedToken> got;
  while (got.size() < 3) running->wait(got, 1000ms);
  gated->wait_used();
  EXPECT_EQ(s.stats().queued, 1);  // the other waits for the only slot
  EXPECT_EQ(s.stats().busy, 1);
  running->cancel();
  // The decode pass in flight (waiting at the gate) finishes; the next step retires the
  // sequence before any forward pass and gives its slot to the queued request, whose prefill
  // is the pass after.
  const int before = gated->passes();
  gated->allow(1);
  const auto rest = drain(*running);
  EXPECT_LE(rest.size(), 1u);
  EXPECT_EQ(running->finish_reason(), FinishReason::Cancelled);
  gated->wait_used();
  // The next pass, held at the gate, is the queued request's prefill: it took the slot without
  // another pass (waiting for it: the permit's pass is used before the step that admits).
  gated->wait_blocked();
  EXPECT_EQ(gated->passes(), before + 1);
  EXPECT_EQ(s.stats().queued, 0);
  gated->open();
  const Served q{drain(*queued), queued->finish_reason()};
  EXPECT_EQ(q.reason, FinishReason::Length);
  // The freed slot serves the request as a fresh scheduler does.
  Scheduler fresh(model(), {.slots = 1, .context = 64});
  EXPECT_EQ(ids(q.tokens), ids(serve(fresh, {.prompt = {3}, .max_new_tokens = 5}).tokens));
}

TEST(Scheduler, CancelledQueuedRequestNeverRuns) {
  auto gated = std::make_shared<qkv::testing::GatedModel>(model());
  Scheduler s(gated, {.slots = 1, .context = 64});
  auto a = s.submit({.prompt = {1}, .max_new_tokens = 60});
  auto b = s.submit({.prompt = {2}, .max_new_tokens = 60});
  b->cancel();
  gated->allow(2);
  EXPECT_TRUE(drain(*b).empty());
  EXPECT_EQ(b->finish_reason(), FinishReason::Cancelled);
  a->cancel();
  gated->open();
  drain(*a);
  EXPECT_EQ(a->finish_reason(), FinishReason::Cancelled);
}

TEST(Scheduler, LongPromptPrefillDoesNotStallRunningStreams) {
  // prefill_chunk 4: a 40-token prompt takes 10 steps of prefill, each also decoding the
  // running sequence, so that one gets at least 9 tokens while the long prompt prefills.
  Scheduler s(model(), {.slots = 2, .context = 64, .prefill_chunk = 4});
  auto running = s.submit({.prompt = {1, 2, 3}, .max_new_tokens = 60});
  std::vector<GeneratedToken> a;
  while (a.empty()) running->wait(a, 1000ms);
  std::vector<i64> long_prompt(40);
  for (i64 i = 0; i < 40; ++i) long_prompt[static_cast<std::size_t>(i)] = i % 50;
  auto late = s.submit({.prompt = long_prompt, .max_new_tokens = 1});
  const auto b = drain(*late);
  ASSERT_EQ(b.size(), 1u);
  auto rest = drain(*running);
  for (auto& t : rest) a.push_back(std::move(t));
  i64 during = 0;
  for (const auto& t : a)
    if (t.time > late->submitted() && t.time < b[0].time) ++during;
  EXPECT_GE(during, 9) << "tokens of the running stream while a 10-chunk prompt prefilled";
}

TEST(Scheduler, QueueBoundAndShutdown) {
  auto gated = std::make_shared<qkv::testing::GatedModel>(model());
  Scheduler s(gated, {.slots = 1, .context = 64, .max_queue = 2});
  std::vector<std::shared_ptr<Sequence>> seqs;
  // The free slot and the queue take 3 (whether or not the first was admitted yet); the
  // other 3 are refused.
  int refused = 0;
  for (int i = 0; i < 6; ++i) {
    try {
      seqs.push_back(s.submit({.prompt = {1}, .max_new_tokens = 60}));
    } catch (const QueueFullError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find("queue is full"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(refused, 3);
  gated->open();
  s.shutdown(0ms);  // cancels the running and the queued
  for (auto& q : seqs) {
    drain(*q);
    EXPECT_EQ(q->finish_reason(), FinishReason::Cancelled);
  }
  EXPECT_THROW(s.submit({.prompt = {1}, .max_new_tokens = 1}), ShutdownError);
  s.shutdown(0ms);  // idempotent
}

TEST(Scheduler, ShutdownGraceLetsRunningRequestsFinish) {
  Scheduler s(model(), {.slots = 2, .context = 64});
  auto a = s.submit({.prompt = {7, 8}, .max_new_tokens = 20});
  auto b = s.submit({.prompt = {9}, .max_new_tokens = 20});
  s.shutdown(std::chrono::milliseconds(60000));
  EXPECT_EQ(drain(*a).size(), 20u);
  EXPECT_EQ(drain(*b).size(), 20u);
  EXPECT_EQ(a->finish_reason(), FinishReason::Length);
}

TEST(Scheduler, BadRequestsAreNamedBeforeQueueing) {
  Scheduler s(model(), {.slots = 1, .context = 32});
  auto msg = [&](const SequenceRequest& r) -> std::string {
    try {
      s.submit(r);
    } catch (const qkv::Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(msg({.prompt = {}, .max_new_tokens = 1}).find("empty"), std::string::npos);
  EXPECT_NE(msg({.prompt = {61}, .max_new_tokens = 1}).find("token id 61"), std::string::npos);
  EXPECT_NE(msg({.prompt = {-1}, .max_new_tokens = 1}).find("token id -1"), std::string::npos);
  EXPECT_NE(msg({.prompt = {1}, .max_new_tokens = 0}).find("max_new_tokens 0 generates nothing; it goes with prompt_logprobs"),
            std::string::npos);
  EXPECT_NE(msg({.prompt = {1}, .max_new_tokens = -1}).find("max_new_tokens must be >= 1"), std::string::npos);
  EXPECT_NE(msg({.prompt = {1}, .max_new_tokens = 1, .prompt_logprobs = 21}).find("prompt_logprobs must be in [0, 20]"),
            std::string::npos);
  EXPECT_NE(msg({.prompt = {1, 61}, .max_new_tokens = 0, .prompt_logprobs = 0}).find("token id 61"), std::string::npos);
  EXPECT_NE(msg({.prompt = std::vector<i64>(33, 1), .max_new_tokens = 0, .prompt_logprobs = 0}).find("more than the context of 32"),
            std::string::npos);
  EXPECT_NE(msg({.prompt = std::vector<i64>(30, 1), .max_new_tokens = 3}).find("more than the context of 32"),
            std::string::npos);
  EXPECT_NE(msg({.prompt = {1}, .max_new_tokens = 1, .sampling = {.temperature = -1}}).find("temperature"),
            std::string::npos);
  EXPECT_NE(msg({.prompt = {1}, .max_new_tokens = 1, .logprobs = 21}).find("logprobs"), std::string::npos);
  EXPECT_NE(msg({.prompt = {1}, .max_new_tokens = 1, .stop_ids = {99}}).find("stop token id 99"), std::string::npos);
  EXPECT_EQ(s.stats().queued, 0);
  EXPECT_THROW(Scheduler(model(), {.slots = 0}), qkv::ValueError);
  EXPECT_THROW(Scheduler(model(), {.slots = 1, .context = 65}), qkv::ValueError);
  EXPECT_THROW(Scheduler(model(), {.slots = 1, .prefill_chunk = 0}), qkv::ValueError);
}

// A scored prompt: its tokens' log-probabilities are those of infer::score_tokens over one window
// holding it (prefill chunks of 5 cut it in pieces), set before the first token; the generated
// tokens are those of the same request without scoring; max_new_tokens 0 scores and ends.
TEST(Scheduler, PromptLogprobsAreThoseOfScoreTokens) {
  Scheduler s(model(), {.slots = 3, .context = 64, .prefill_chunk = 5});
  for (const std::vector<i64>& p : {std::vector<i64>{1, 2, 3}, std::vector<i64>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4},
                                    std::vector<i64>{11}}) {
    for (i64 max_new : {0, 6}) {
      auto seq = s.submit({.prompt = p, .max_new_tokens = max_new, .logprobs = 1, .prompt_logprobs = 3});
      const std::vector<GeneratedToken> got = drain(*seq);
      EXPECT_EQ(seq->finish_reason(), FinishReason::Length);
      EXPECT_EQ(static_cast<i64>(got.size()), max_new);
      const std::vector<TokenLogprob> lp = seq->prompt_logprobs();
      ASSERT_EQ(lp.size(), p.size() - 1);
      if (p.size() > 1) {
        const ScoreResult want = score_tokens(*model(), p, {.context = static_cast<i64>(p.size()),
                                                            .stride = static_cast<i64>(p.size()), .top = 3});
        for (std::size_t i = 0; i < lp.size(); ++i) {
          EXPECT_EQ(lp[i].id, p[i + 1]);
          EXPECT_NEAR(lp[i].logprob, want.tokens[i].logprob, 1e-5) << i;
          ASSERT_EQ(lp[i].top.size(), 3u);
          EXPECT_EQ(lp[i].top[0].first, want.tokens[i].top[0].first) << i;
        }
      }
      if (max_new > 0) {
        const Served plain = serve(s, {.prompt = p, .max_new_tokens = max_new, .logprobs = 1});
        EXPECT_EQ(ids(got), ids(plain.tokens));
      }
    }
  }
  EXPECT_EQ(s.stats().busy, 0);
}

}  // namespace
