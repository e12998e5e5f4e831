# Tests of the core engine (tensor, autograd, ops, nn, optim).
qkv_add_test(test_tensor SOURCES core/test_tensor.cpp LIBS qkv)
qkv_add_test(test_autograd SOURCES autograd/test_autograd.cpp LIBS qkv)
qkv_add_test(test_gradcheck SOURCES ops/test_gradcheck.cpp nn/test_module_gradcheck.cpp LIBS qkv)
qkv_add_test(test_attention_ops SOURCES ops/test_attention_ops.cpp ops/test_tutorial.cpp LIBS qkv)
qkv_add_test(test_bad_inputs SOURCES ops/test_bad_inputs.cpp LIBS qkv)
qkv_add_test(test_nn SOURCES nn/test_nn.cpp optim/test_optim.cpp LIBS qkv)
