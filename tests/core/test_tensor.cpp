// Tensor basics: factories, views, contiguity, broadcasting, printing, RNG.
#include <gtest/gtest.h>

#include "qkv/qkv.h"

namespace qkv {
namespace {

TEST(Tensor, FactoriesAndMetadata) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_EQ(Tensor::full({2}, 3.5).at({1}), 3.5);
  EXPECT_EQ(Tensor::scalar(2.0).dim(), 0);
  EXPECT_EQ(Tensor::arange(5, DType::I64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), ShapeError);
}

TEST(Tensor, TransposeViewNeedsContiguous) {
  Tensor x = Tensor::arange(2 * 5 * 512).view({2, 5, 512});
  Tensor h = x.view({2, 5, 8, 64}).transpose(1, 2);
  EXPECT_EQ(h.shape(), (Shape{2, 8, 5, 64}));
  EXPECT_FALSE(h.is_contiguous());
  try {
    h.view({2, 40, 64});
    FAIL() << "view of a non-contiguous tensor must throw";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("call contiguous() first"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2,8,5,64]"), std::string::npos) << e.what();
  }
  Tensor c = h.contiguous().view({2, 40, 64});
  EXPECT_EQ(c.at({0, 5, 0}), x.at({0, 0, 64}));  // head 1, position 0
  // reshape copies when it must
  EXPECT_EQ(h.reshape({2, 40, 64}).at({1, 39, 63}), x.at({1, 4, 511}));
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = Tensor::zeros({3, 4});
  x.narrow(1, 1, 2).fill_(7.0);
  EXPECT_EQ(x.at({2, 1}), 7.0);
  EXPECT_EQ(x.at({2, 3}), 0.0);
  Tensor s = x.select(0, 1);
  s.set({0}, 5.0);
  EXPECT_EQ(x.at({1, 0}), 5.0);
  Tensor e = Tensor::arange(3).view({3, 1}).expand({3, 4});
  EXPECT_EQ(e.stride(1), 0);
  EXPECT_EQ(e.contiguous().to_vector<float>()[5], 1.0f);
}

TEST(Tensor, PermuteAndCopy) {
  Tensor x = Tensor::arange(24).view({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.at({3, 1, 2}), x.at({1, 2, 3}));
  Tensor y = Tensor::zeros({4, 2, 3});
  y.copy_(p);
  EXPECT_EQ(y.at({3, 1, 2}), 23.0);
  EXPECT_EQ(x.to(DType::F64).dtype(), DType::F64);
  EXPECT_EQ(x.to(DType::F64).at({1, 2, 3}), 23.0);
}

TEST(Tensor, BroadcastingElementwise) {
  Tensor a = Tensor::arange(6).view({2, 3, 1});
  Tensor b = Tensor::arange(4).view({4});
  Tensor c = add(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(c.at({1, 2, 3}), 5.0 + 3.0);
  EXPECT_EQ(mul(a.transpose(0, 1), 2.0).at({2, 1, 0}), 10.0);
  try {
    add(Tensor::zeros({2, 3}), Tensor::zeros({4}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2,3]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos);
  }
}

TEST(Tensor, ReductionsAndArgmax) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 5, 3, 4, 2, 6}, {2, 3});
  EXPECT_EQ(sum(x).item(), 21.0);
  EXPECT_EQ(sum(x, {0}).to_vector<float>(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(mean(x, {1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(argmax(x, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(amax(x, 0).to_vector<float>(), (std::vector<float>{4, 5, 6}));
}

TEST(Tensor, SeededRngIsReproducibleAndThreadIndependent) {
  Generator g1(42), g2(42);
  Tensor a = Tensor::randn({1000}, &g1);
  set_num_threads(1);
  Tensor b = Tensor::randn({1000}, &g2);
  set_num_threads(2);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  Tensor c = Tensor::randn({1000}, &g1);
  EXPECT_NE(a.to_vector<float>(), c.to_vector<float>());
  // roughly standard normal
  EXPECT_NEAR(mean(a).item(), 0.0, 0.1);
  EXPECT_NEAR(mean(square(a)).item(), 1.0, 0.15);
}

TEST(Tensor, PrintsShapeAndValues) {
  std::string s = Tensor::arange(3).to_string(1);
  EXPECT_NE(s.find("[0.0, 1.0, 2.0]"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=[3]"), std::string::npos) << s;
}

TEST(Tensor, EmptyDims) {
  Tensor z = Tensor::zeros({0, 3});
  EXPECT_EQ(z.numel(), 0);
  EXPECT_EQ(sum(z).item(), 0.0);
  EXPECT_EQ(matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 3})).to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(matmul(Tensor::zeros({0, 4}), Tensor::zeros({4, 3})).shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace qkv

// The block cache behind Storage: a freed block is handed out again for the same size
// class (no new allocation), release_cached_memory empties it, and contents are never
// assumed zero (Tensor::zeros writes its zeros itself).
TEST(StorageCache, ReusesFreedBlocksOfTheSameClass) {
  if (!qkv::block_cache_enabled()) {
    // AddressSanitizer build: no cache, so a freed block goes back to ASan (which quarantines it)
    // and a use after free of a tensor's storage is reported instead of reading a reused block.
    const void* first = nullptr;
    {
      qkv::Tensor a = qkv::Tensor::full({1000, 25}, 7.0f);
      first = a.data<float>();
    }
    EXPECT_EQ(qkv::cached_memory_bytes(), 0u);
    qkv::Tensor b = qkv::Tensor::zeros({1000, 25}, qkv::DType::F32);
    EXPECT_NE(static_cast<const void*>(b.data<float>()), first) << "a freed block was handed out again";
    for (float x : b.to_vector<float>()) ASSERT_EQ(x, 0.f);
    return;
  }
  qkv::release_cached_memory();
  EXPECT_EQ(qkv::cached_memory_bytes(), 0u);
  const void* first = nullptr;
  {
    qkv::Tensor a = qkv::Tensor::full({1000, 25}, 7.0f);
    first = a.data<float>();
  }
  EXPECT_GE(qkv::cached_memory_bytes(), 1000u * 25u * 4u);
  qkv::Tensor b = qkv::Tensor::zeros({1000, 25}, qkv::DType::F32);
  EXPECT_EQ(static_cast<const void*>(b.data<float>()), first) << "same size class: the cached block";
  for (float x : b.to_vector<float>()) ASSERT_EQ(x, 0.f);
  qkv::Tensor c = qkv::Tensor::zeros({999, 25}, qkv::DType::F32);  // same class, different size
  EXPECT_NE(static_cast<const void*>(c.data<float>()), first);
  { qkv::Tensor d = qkv::Tensor::zeros({7}, qkv::DType::F32); }
  EXPECT_GT(qkv::cached_memory_bytes(), 0u);
  qkv::release_cached_memory();
  EXPECT_EQ(qkv::cached_memory_bytes(), 0u);
}
