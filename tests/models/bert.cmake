# BERT loading and its errors, sentence embeddings, parity with transformers / sentence-transformers
# on all-MiniLM-L6-v2 (needs `make models`; fails, never skips, without it).
qkv_add_test(test_bert SOURCES models/test_bert.cpp LIBS qkv)
# BertRunner, the unpadded fused forward of inference, against the module path (R1 per layer),
# batch- and thread-independence bitwise, bad ids (random small BERT; MiniLM needs `make models`).
qkv_add_test(test_bert_runner SOURCES infer/test_bert_runner.cpp LIBS qkv)
