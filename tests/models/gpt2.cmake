# GPT-2: Hugging Face config.json / model.safetensors read and written, errors, and
# parity with transformers on the committed tiny model (tests/fixtures/gpt2_tiny).
qkv_add_test(test_gpt2 SOURCES models/test_gpt2.cpp models/test_gpt2_parity.cpp LIBS qkv nlohmann_json::nlohmann_json)
# The Llama family (Llama, Mistral, Qwen2; Hugging Face folders and GGUF files): configs, bad files,
# parity with transformers on tiny random models and SmolLM2-135M-Instruct, GGUF export; llama-quantize's
# per-tensor types (quant_mix).
qkv_add_test(test_llama SOURCES models/test_llama.cpp models/test_llama_parity.cpp models/test_quant_mix.cpp LIBS qkv
             nlohmann_json::nlohmann_json)
# The other decoder architectures of the registry (Qwen3, Gemma 2 and 3, Phi-3, SmolLM3, Llama 2):
# parity with transformers on tiny trained models, from folders and llama.cpp's GGUF files.
qkv_add_test(test_arch_parity SOURCES models/test_arch_parity.cpp LIBS qkv nlohmann_json::nlohmann_json)
# Attention weights (qkv heatmap) of every decoder architecture against transformers' output_attentions.
qkv_add_test(test_decoder_attention SOURCES models/test_decoder_attention.cpp LIBS qkv nlohmann_json::nlohmann_json)
# Bad input for the architectures: contradictory configs and GGUF metadata, unsupported kinds.
qkv_add_test(test_arch_errors SOURCES models/test_arch_errors.cpp LIBS qkv nlohmann_json::nlohmann_json)
# Mixtures of experts: the router, and the expert path against the dense one and against itself alone.
qkv_add_test(test_moe SOURCES models/test_moe.cpp LIBS qkv)
