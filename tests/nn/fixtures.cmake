# PyTorch parity: C++ ops, modules and training trajectories against the
# fixtures in tests/fixtures/ (tests/reference/make_fixtures.py,
# tests/reference/fixture_index.md). float64 and float32 runs of every case.
qkv_add_test(test_pytorch_parity
  SOURCES nn/test_parity_ops.cpp
          nn/test_parity_modules.cpp
          nn/test_parity_training.cpp
  LIBS qkv nlohmann_json::nlohmann_json)
