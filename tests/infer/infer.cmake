# infer/: KV cache (appends, bounds, cached vs recomputed logits) and the generation
# loop (sampling, batching, stopping, bad inputs) on a small random GPT-2.
qkv_add_test(test_infer SOURCES infer/test_kv_cache.cpp infer/test_kv_cache_gqa.cpp infer/test_kv_cache_f16.cpp infer/test_generate.cpp infer/test_session.cpp infer/test_text_stream.cpp infer/test_reply.cpp LIBS qkv nlohmann_json::nlohmann_json)
# Speculative decoding: greedy tokens unchanged by any drafter (GPT-2, the tiny architectures,
# SmolLM2 when models/ holds it), the sampled distribution kept (chi-square), bad drafts refused.
qkv_add_test(test_speculative SOURCES infer/test_speculative.cpp LIBS qkv)
# Token log-probabilities and sliding-window perplexity: parity with transformers on the tiny
# Llama-2 and GPT-2 (tests/fixtures/perplexity.json), saved log-probabilities, KL statistics (a
# model against itself, a Q8_0 copy against the float folder), bad inputs.
qkv_add_test(test_score SOURCES infer/test_score.cpp LIBS qkv nlohmann_json::nlohmann_json)
