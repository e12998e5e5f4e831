// Two language-model training steps against PyTorch + transformers
// (tests/reference/make_train_lm_fixtures.py -> tests/fixtures/train_lm/): the loss,
// every gradient, the clipped norm and the parameters after each AdamW step, within R1.
// qkv's tensors are compared in transformers' layout (save_gpt2 writes it), so the
// names and the fused Conv1D c_attn are those of the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "qkv/io/tensors.h"
#include "qkv/qkv.h"
#include "qkv/train/lm.h"

namespace qkv {
namespace {

const std::string kDir = std::string(QKV_FIXTURE_DIR) + "/train_lm";

// The model's tensors in transformers' layout: save_gpt2, read back.
std::map<std::string, Tensor> hf_tensors(const models::GPT2LMHeadModel& m, const std::string& name) {
  const std::string d = ::testing::TempDir() + "/qkv_lm_parity_" + name;
  models::save_gpt2(m, d);
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : io::load_safetensors(d + "/model.safetensors").tensors) out.emplace(n, t);
  return out;
}

// R1 (REFERENCES.md): |a - b| <= atol + rtol |b| elementwise.
void expect_close(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& ref,
                  const std::string& prefix, double atol, double rtol) {
  std::size_t n = 0;
  for (const auto& [name, r] : ref) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string key = name.substr(prefix.size());
    ++n;
    const auto it = got.find(key);
    ASSERT_NE(it, got.end()) << key;
    ASSERT_EQ(it->second.shape(), r.shape()) << key;
    const auto a = it->second.to_vector<double>(), b = r.to_vector<double>();
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) - rtol * std::fabs(b[i]));
    EXPECT_LE(worst, atol) << prefix << key;
  }
  EXPECT_GT(n, 10u) << "no fixture tensors with prefix " << prefix;
}

TEST(LMTrainParity, TwoAdamWStepsMatchPyTorch) {
  const auto model = models::load_gpt2(kDir);
  model->train();
  std::map<std::string, Tensor> ref;
  for (auto& [n, t] : io::load_safetensors(kDir + "/steps.safetensors").tensors) ref.emplace(n, t);

  train::LMTrainOptions o;
  o.lr = 1e-3;
  o.weight_decay = 0.1;
  auto opt = train::make_lm_optimizer(*model, o);
  for (int k = 1; k <= 2; ++k) {
    const std::string s = std::to_string(k);
    opt->zero_grad();
    Tensor loss = train::lm_loss(*model, ref.at("ids" + s), ref.at("targets" + s));
    EXPECT_NEAR(loss.item(), ref.at("loss" + s).item(), 1e-6) << "step " << k;
    loss.backward();
    if (k == 1) {
      // The gradients, moved into a model of the same shape so save_gpt2 lays them out.
      models::GPT2LMHeadModel g(model->config());
      auto gp = g.named_parameters();
      auto mp = model->named_parameters();
      for (std::size_t i = 0; i < mp.size(); ++i) gp[i].second.copy_(mp[i].second.grad());
      expect_close(hf_tensors(g, "grad"), ref, "grad1.", 1e-6, 1e-4);
    }
    const double norm = optim::clip_grad_norm(model->parameters(), 1.0);
    EXPECT_NEAR(norm, ref.at("grad_norm" + s).item(), 1e-6 * (1 + ref.at("grad_norm" + s).item()));
    opt->step();
    // One AdamW step moves each parameter by ~lr: R1 at 1e-6 is tight beside it.
    expect_close(hf_tensors(*model, "step" + s), ref, "step" + s + ".", 1e-6, 1e-5);
  }
}

}  // namespace
}  // namespace qkv
