// Helpers for tests that compare against PyTorch fixtures (tests/fixtures/*.safetensors,
// produced by tests/reference/make_fixtures.py; see tests/reference/fixture_index.md).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "qkv/io/tensors.h"

namespace qkv::testing {

inline std::string fixture_path(const std::string& name) { return std::string(QKV_FIXTURE_DIR) + "/" + name; }

inline io::LoadedTensors load_fixture(const std::string& name) { return io::load_safetensors(fixture_path(name)); }

// Expects |actual - expected| <= atol + rtol*|expected| elementwise (shapes equal, NaN/inf positions equal).
inline void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what << ": actual is undefined";
  ASSERT_EQ(actual.shape(), expected.shape()) << what << ": shape " << actual.shape_str() << " vs expected "
                                              << expected.shape_str();
  EXPECT_TRUE(allclose(actual.to(DType::F64), expected.to(DType::F64), rtol, atol))
      << what << ": max |diff| = " << max_abs_diff(actual.to(DType::F64), expected.to(DType::F64)) << " (rtol "
      << rtol << ", atol " << atol << ")";
}

}  // namespace qkv::testing
