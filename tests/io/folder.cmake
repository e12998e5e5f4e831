# Folders replaced as a whole (src/io/folder.cpp): staging, exchange or two renames,
# recovery; SIGKILL at every write point of a save.
qkv_add_test(test_folder SOURCES io/test_folder.cpp LIBS qkv)
