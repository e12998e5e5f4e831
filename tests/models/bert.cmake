# BERT loading and its errors, sentence embeddings, parity with transformers / sentence-transformers
# on all-MiniLM-L6-v2 (needs `make models`; fails, never skips, without it).
qkv_add_test(test_bert SOURCES models/test_bert.cpp LIBS qkv)
