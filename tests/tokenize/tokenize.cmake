# tokenize: GPT-2 byte-level BPE against Hugging Face tokenizers (fixtures from
# tests/reference/make_bpe_fixtures.py), bad files and inputs, round trips; tokenizer.json and
# GGUF vocabularies (fixtures from tests/reference/make_tokenizer_fixtures.py).
find_package(nlohmann_json 3 REQUIRED)
qkv_add_test(test_tokenize
  SOURCES tokenize/test_bpe_reference.cpp tokenize/test_bpe_errors.cpp tokenize/test_bpe_roundtrip.cpp
          tokenize/test_bpe_train.cpp  # BPE training vs HF BpeTrainer (BpeTrain*.*)
          tokenize/test_tokenizer_json.cpp tokenize/test_tokenizer_json_errors.cpp tokenize/test_gguf_vocab.cpp
          tokenize/test_gguf_tokenizer.cpp  # SmolLM2 from its GGUF (needs `make models`)
          tokenize/test_sentencepiece.cpp   # SentencePiece and the tokenizer interface (models/llama.cpp: `make models`)
  LIBS qkv nlohmann_json::nlohmann_json PkgConfig::PCRE2)  # PCRE2: the test asks it which code points it knows
