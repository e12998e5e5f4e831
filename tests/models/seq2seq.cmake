# Seq2Seq encoder-decoder: data, masks, greedy decoding, a reduced training
# run (reverse, lengths up to 6), checkpoints and attention maps.
qkv_add_test(test_seq2seq SOURCES models/test_seq2seq.cpp LIBS qkv)
