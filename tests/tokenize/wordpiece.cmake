# WordPiece tokenizer: rules, bad inputs, and id parity with Hugging Face (needs `make models`).
qkv_add_test(test_wordpiece SOURCES tokenize/test_wordpiece.cpp LIBS qkv)
