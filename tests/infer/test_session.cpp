// infer::Session: a conversation's tokens and cache kept across turns — the shared prefix is not
// computed again, and every turn's logits equal those of the whole sequence fed afresh.
#include <gtest/gtest.h>

#include <vector>

#include "gpt2_test_util.h"
#include "qkv/core/error.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/session.h"

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

}  // namespace
