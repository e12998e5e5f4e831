# Library sources above the kernels (one line per file). Paths relative to src/.
set(QKV_SOURCES
  core/tensor.cpp
  autograd/autograd.cpp
  ops/elementwise.cpp
  ops/reduce.cpp
  ops/shape_ops.cpp
  ops/linalg.cpp
  ops/nn_functional.cpp
  ops/attention.cpp
  ops/multi_head_attention.cpp
  ops/rms_norm.cpp
  ops/rotary.cpp
  nn/module.cpp
  nn/layers.cpp
  nn/positional.cpp
  nn/attention.cpp
  nn/transformer.cpp
  optim/optimizer.cpp
  io/tensors.cpp
  io/checkpoint.cpp
  io/files.cpp
  io/folder.cpp
  infer/language_model.cpp
  infer/kv_cache.cpp
  models/gpt2.cpp
  models/gpt2_io.cpp
  models/registry.cpp        # the model families; models/arch/ (below) register themselves
  models/decoder/decoder_lm.cpp
  models/decoder/step.cpp
  models/decoder/load.cpp
  models/decoder/save_gguf.cpp
  models/decoder/tensor_slots.cpp
  models/arch/common.cpp
  models/gguf_export.cpp
  models/quant_mix.cpp      # llama-quantize's per-tensor types (the GGUF writers, qkv convert)
  infer/sampling.cpp
  infer/generate.cpp
  infer/score.cpp           # token log-probabilities and perplexity in sliding windows
  infer/kl_divergence.cpp   # a model against a reference: KL divergence, delta-p, same top token
  infer/logprob_file.cpp    # saved log-probabilities (safetensors), for --kl-reference
  infer/speculative.cpp     # drafters (prompt lookup, a draft model) for speculative decoding
  infer/text_stream.cpp     # generated tokens -> text with stop strings (CLI, Python, serve)
  infer/reply.cpp           # a reply's reasoning, answer and markup (<think>, gpt-oss's harmony)
  infer/session.cpp
  models/attention_maps.cpp
  models/text_attention.cpp
  models/classifier.cpp
  models/seq2seq.cpp
  models/seq2seq_decode.cpp
  models/bert.cpp
  tokenize/wordpiece.cpp
  tokenize/wordpiece_unicode.cpp
  infer/bert_runner.cpp
  infer/embed.cpp
  viz/heatmap.cpp
  viz/font.cpp
  viz/explorer.cpp
  tokenize/utf8.cpp
  tokenize/pretokenize.cpp
  tokenize/bpe_load.cpp
  tokenize/bpe.cpp
  tokenize/bpe_build.cpp
  tokenize/regex.cpp
  tokenize/tokenizer_json.cpp
  tokenize/tokenizer.cpp      # the one interface (tokenize/tokenizer.h) and load_tokenizer
  tokenize/json_reader.cpp
  tokenize/sentencepiece.cpp
  tokenize/sentencepiece_load.cpp
  tokenize/sentencepiece_json.cpp
  tokenize/gguf_vocab.cpp
  tokenize/gguf_vocab_write.cpp
  train/loop.cpp
  train/corpus.cpp
  train/lm.cpp
  train/seq2seq.cpp
  train/classify.cpp
  train/distributed.cpp
  train/grad_exchange.cpp
  tokenize/bpe_train.cpp
  tokenize/chat_template.cpp
  jinja/text.cpp            # the Jinja2 engine chat templates use (depends on UTF-8 helpers only)
  jinja/value.cpp
  jinja/lexer.cpp
  jinja/parser.cpp
  jinja/scope.cpp
  jinja/render.cpp
  jinja/builtins.cpp
  jinja/methods.cpp
  jinja/error.cpp
  infer/scheduler.cpp       # continuous batching (serve/ submits to it)
  infer/embed_batcher.cpp
)

# One file per architecture (models/arch/<stem>.cpp, each ending with QKV_REGISTER_ARCH(<stem>,
# ...) or QKV_REGISTER_FAMILY): src/CMakeLists.txt generates the source that registers them all.
set(QKV_ARCH_SOURCES
  models/arch/bert.cpp
  models/arch/gemma2.cpp
  models/arch/gemma3.cpp
  models/arch/gpt2.cpp
  models/arch/gpt_oss.cpp
  models/arch/llama.cpp
  models/arch/mistral.cpp
  models/arch/mixtral.cpp
  models/arch/olmoe.cpp
  models/arch/phi3.cpp
  models/arch/qwen2.cpp
  models/arch/qwen2_moe.cpp
  models/arch/qwen3.cpp
  models/arch/qwen3_5.cpp
  models/arch/qwen3_5_moe.cpp
  models/arch/qwen3_moe.cpp
  models/arch/smollm3.cpp
)

# The functional ops and the optimisers are elementwise loops and reductions that only
# vectorise at -O3 (GCC's -O2 cost model refuses loops that need alias checks); the rest
# of the library stays at -O2 for build time.
set(QKV_O3_SOURCES
  ops/elementwise.cpp
  ops/reduce.cpp
  ops/shape_ops.cpp
  ops/linalg.cpp
  ops/nn_functional.cpp
  ops/attention.cpp
  ops/rms_norm.cpp
  ops/rotary.cpp
  optim/optimizer.cpp
)
