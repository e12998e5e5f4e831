// infer::Session: a conversation's tokens and cache kept across turns — the shared prefix is not
// computed again, and every turn's logits equal those of the whole sequence fed afresh.
#include <gtest/gtest.h>

#include <vector>

#include "gpt2_test_util.h"
#include "qkv/core/error.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/session.h"
#include "qkv/models/decoder_io.h"

namespace {

using i64 = std::int64_t;
using qkv::infer::Session;

std::vector<float> fresh_logits(const std::shared_ptr<qkv::models::GPT2LMHeadModel>& m, const std::vector<i64>& ids) {
  Session s(m, 64);
  s.sync(ids);
  return s.logits();
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

TEST(Session, TurnsKeepTheSharedPrefixAndGiveTheWholeSequencesLogits) {
  const auto m = qkv::testing::tiny_gpt2(3);
  Session s(m, 64);
  const std::vector<i64> turn1 = {1, 2, 3, 4, 5};
  EXPECT_EQ(s.sync(turn1), 5);
  EXPECT_LE(max_diff(s.logits(), fresh_logits(m, turn1)), 1e-5f);
  // Generated tokens pushed one by one: the same tokens as generate() greedy.
  const auto want = qkv::infer::generate(*m, {turn1}, {.max_new_tokens = 4})[0].new_ids;
  std::vector<i64> got;
  for (int i = 0; i < 4; ++i) {
    const i64 id = qkv::infer::argmax(s.logits().data(), m->vocab_size());
    got.push_back(id);
    s.push(id);
  }
  EXPECT_EQ(got, want);
  // Turn 2: the conversation so far plus new tokens: only the new ones are computed.
  std::vector<i64> turn2 = s.tokens();
  turn2.insert(turn2.end(), {7, 8, 9});
  EXPECT_EQ(s.sync(turn2), 3);
  EXPECT_LE(max_diff(s.logits(), fresh_logits(m, turn2)), 1e-5f);
  // A turn that rewrites the end (a template that renders the reply differently): from the
  // first differing token on.
  std::vector<i64> turn3(turn2.begin(), turn2.begin() + 6);
  turn3.insert(turn3.end(), {11, 12});
  EXPECT_EQ(s.sync(turn3), 2);
  EXPECT_EQ(s.tokens(), turn3);
  EXPECT_LE(max_diff(s.logits(), fresh_logits(m, turn3)), 1e-5f);
  // The same tokens again: the last one is recomputed for its logits.
  EXPECT_EQ(s.sync(turn3), 1);
  s.reset();
  EXPECT_EQ(s.length(), 0);
  EXPECT_EQ(s.sync(turn1), 5);
}

TEST(Session, BadInputsChangeNothing) {
  const auto m = qkv::testing::tiny_gpt2(3);
  Session s(m, 8);
  s.sync({1, 2, 3});
  EXPECT_THROW(s.sync({}), qkv::ValueError);
  EXPECT_THROW(s.sync(std::vector<i64>(9, 1)), qkv::ValueError);
  EXPECT_THROW(s.sync({1, 2, 999}), qkv::IndexError);
  EXPECT_THROW(s.push(-1), qkv::IndexError);
  EXPECT_EQ(s.tokens(), (std::vector<i64>{1, 2, 3}));
  for (int i = 0; i < 5; ++i) s.push(4);
  EXPECT_THROW(s.push(4), qkv::ValueError);  // full
  EXPECT_THROW(Session(m, 0), qkv::ValueError);
  EXPECT_THROW(Session(m, m->max_positions() + 1), qkv::ValueError);
}

// A model with recurrent layers (Qwen3.5): its states cannot drop tokens, so a turn that shares
// all the session holds computes only its new tokens, one that differs after the last prompt
// starts from the checkpoint made there, and one that differs earlier starts over; each time the
// logits are those of the whole sequence fed afresh.
TEST(Session, RecurrentLayersRewindToTheirCheckpoint) {
  const std::shared_ptr<const qkv::infer::CausalLM> m =
      qkv::models::load_decoder(std::string(QKV_FIXTURE_DIR) + "/hybrid/qwen3_5.gguf");
  auto fresh = [&](const std::vector<i64>& ids) {
    Session f(m, 64);
    f.sync(ids);
    return f.logits();
  };
  Session s(m, 64);
  const std::vector<i64> turn1 = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(s.sync(turn1), 6);
  s.push(7);
  s.push(8);
  std::vector<i64> turn2 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(s.sync(turn2), 2);  // everything it holds is shared
  EXPECT_LE(max_diff(s.logits(), fresh(turn2)), 1e-5f);
  s.push(11);
  // Differs after the checkpoint of turn 2's prompt (10 tokens): computed from there.
  std::vector<i64> turn3 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13};
  EXPECT_EQ(s.sync(turn3), 2);
  EXPECT_LE(max_diff(s.logits(), fresh(turn3)), 1e-5f);
  // Differs before it: the states start over.
  std::vector<i64> turn4 = {1, 2, 3, 9, 9};
  EXPECT_EQ(s.sync(turn4), 5);
  EXPECT_LE(max_diff(s.logits(), fresh(turn4)), 1e-5f);
}

}  // namespace
