// Corrupt safetensors files through the command line: one file per rejection
// rule of REFERENCES.md section 3 (built with the byte-level helpers of the
// library's own tests, tests/io/safetensors_test_util.h), given to every
// command that reads a safetensors file. Each must end with exit code 1 and
// exactly one line on stderr -- the library's message, naming the file and the
// tensor or header problem -- never a signal (crash, abort), never a large
// allocation (the commands run under a 1 GB address-space limit, so trusting a
// size read from the file would surface as bad_alloc), and never half-printed
// output.
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "io/safetensors_test_util.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/tensors.h"

namespace qkv::cli_test {
namespace {

using io::test::Bytes;
using io::test::make_file;
using io::test::make_raw;
using io::test::zeros;

struct Corrupt {
  std::string rule;               // also the file's name
  Bytes bytes;
  std::vector<std::string> says;  // what the error line must contain besides the file name
};

// a F32 [2] at [0,8), b U8 [3] at [8,11): valid with 11 data bytes.
const std::string kAB =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";

Bytes one_tensor(const std::string& dtype, const std::string& shape, const std::string& offsets, std::size_t data) {
  return make_file(R"({"w":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}",
                   zeros(data));
}

// One file per rule of REFERENCES.md section 3, in its order.
std::vector<Corrupt> corrupt_files() {
  return {
      {"shorter-than-8-bytes", Bytes(5, 0), {"shorter than the 8-byte"}},
      {"header-length-over-limit", make_raw(100'000'001, "{}"), {"header length 100000001", "exceeds the limit"}},
      {"header-past-end-of-file", make_raw(99'999'999, std::string(64, ' ')),
       {"header length 99999999", "runs past the end"}},
      {"header-not-utf8", make_file("{\"__metadata__\":{\"k\":\"\xff\"}}"), {"not valid UTF-8"}},
      {"header-not-json", make_file(R"({"w":{"dtype":"F32")"), {"not valid JSON"}},
      {"header-not-an-object", make_file("[]"), {"not a JSON object"}},
      {"metadata-value-not-a-string", make_file(R"({"__metadata__":{"epoch":3}})"),
       {"__metadata__ value for key 'epoch' is not a string"}},
      {"unknown-dtype", one_tensor("F9", "[1]", "[0,4]", 4), {"tensor 'w'", "unknown dtype 'F9'"}},
      {"negative-dim", one_tensor("U8", "[-2]", "[0,2]", 2), {"tensor 'w'", "negative dimension -2"}},
      {"non-integer-dim", one_tensor("U8", "[2.5]", "[0,2]", 2), {"tensor 'w'", "shape is not a list"}},
      {"size-overflow", one_tensor("U8", "[4294967296,4294967296]", "[0,0]", 0),
       {"tensor 'w'", "more bytes than fit in 64 bits"}},
      {"hole-at-start", one_tensor("U8", "[4]", "[4,8]", 8), {"hole", "tensor 'w'"}},
      {"hole-between-tensors",
       make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                 zeros(10)),
       {"hole", "tensor 'a'", "tensor 'b'"}},
      {"overlapping-tensors",
       make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                 zeros(6)),
       {"tensor 'b'", "overlap tensor 'a'"}},
      {"offsets-run-backwards", one_tensor("U8", "[4]", "[4,0]", 4), {"tensor 'w'", "run backwards"}},
      {"byte-count-not-shape", one_tensor("F32", "[2,3]", "[0,20]", 20), {"tensor 'w'", "F32 [2,3] needs 24"}},
      {"truncated", make_file(kAB, zeros(10)), {"tensor 'b'", "truncated"}},
      {"trailing-bytes", make_file(kAB, zeros(12)), {"trailing byte", "tensor 'b'"}},
      {"duplicate-tensor-name",
       make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                 R"("a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                 zeros(8)),
       {"duplicate tensor name 'a'"}},
      // A size read from the file that is never backed by bytes: 4 GB claimed, 16 bytes present.
      {"huge-claimed-tensor", one_tensor("F32", "[1073741824]", "[0,4294967296]", 16), {"tensor 'w'"}},
  };
}

// Every command that reads a safetensors file, for a file at `path` (the
// heatmap's output directory must not be created).
std::vector<std::string> commands_reading(const std::string& path, const fs::path& scratch) {
  const std::string q = "'" + path + "'";
  return {"inspect " + q,
          "inspect --json " + q,
          "heatmap --checkpoint " + q + " --input '3 1 4' --out '" + (scratch / "heatmap").string() + "'",
          "train classify --no-progress --epochs 60 --resume " + q,
          "train seq2seq --no-progress --resume " + q};
}

// The one-line message the library gives for this file, or "" if it accepts it.
std::string library_message(const std::string& path) {
  try {
    io::SafetensorsFile::open(path);
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

TEST(CliCorruptFiles, EveryRejectionRuleGivesOneClearLineFromEveryCommand) {
  const fs::path dir = unique_temp("corrupt");
  fs::create_directories(dir);
  for (const Corrupt& c : corrupt_files()) {
    SCOPED_TRACE("rule " + c.rule);
    const std::string path = (dir / (c.rule + ".safetensors")).string();
    io::test::write_all(path, c.bytes);
    const std::string lib = library_message(path);
    ASSERT_FALSE(lib.empty()) << "the library accepts the file meant to break rule " << c.rule;
    for (const std::string& args : commands_reading(path, dir)) {
      SCOPED_TRACE("qkv " + args);
      const Result r = run(args, memory_cap(1000000));
      EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << " (" << ::strsignal(r.signal) << ")";
      EXPECT_EQ(r.code, 1) << r.err;
      EXPECT_EQ(count_lines(r.err), 1) << r.err;
      EXPECT_EQ(r.err, "qkv: error: " + lib + "\n") << "the CLI should print the library's message unchanged";
      EXPECT_NE(r.err.find(path), std::string::npos) << "does not name the file: " << r.err;
      for (const std::string& s : c.says) EXPECT_NE(r.err.find(s), std::string::npos) << "missing '" << s << "' in " << r.err;
      for (const char* never : {"bad_alloc", "unexpected failure", "std::"})
        EXPECT_EQ(r.err.find(never), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "") << "output printed before the error";
      EXPECT_FALSE(fs::exists(dir / "heatmap")) << "heatmap created its output directory for a bad checkpoint";
    }
  }
  fs::remove_all(dir);
}

// Files the reader accepts but that are not what the command needs (not a
// checkpoint, a dtype qkv does not load, a config far larger than the tensors
// present): still one line naming the problem, and nothing large allocated.
TEST(CliCorruptFiles, ValidSafetensorsThatAreNotCheckpoints) {
  const fs::path dir = unique_temp("notckpt");
  fs::create_directories(dir);
  const std::string plain = fixture("linear.safetensors");
  // A tensor qkv cannot load (I32) in an otherwise valid checkpoint-looking file.
  const std::string i32 = (dir / "i32.safetensors").string();
  io::test::write_all(i32, make_file(R"({"__metadata__":{"format":"qkv-checkpoint-v1","model_type":"seq2seq"},)"
                                     R"("w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
                                     zeros(8)));
  // A real seq2seq checkpoint whose config asks for a model of ~2^40 parameters.
  const std::string real = (dir / "real.safetensors").string(), hostile = (dir / "hostile.safetensors").string();
  ASSERT_EQ(run("train seq2seq --no-progress --examples 0 --d-model 8 --heads 2 --layers 1 --d-ff 8 --max-len 3 "
                "--train-size 32 --test-size 5 --epochs 1 --save '" + real + "'")
                .code,
            0);
  {
    io::LoadedTensors t = io::load_safetensors(real);
    t.metadata["config"] = R"({"d_model": 1048576, "num_heads": 1, "d_ff": 1048576})";
    t.metadata["checksum"] = io::checkpoint_checksum(t.metadata, t.tensors);  // valid, only hostile
    io::save_safetensors(hostile, t.tensors, t.metadata);
  }
  // The same for a classifier checkpoint: a config of d_model 2^20 over a tiny model.
  const std::string creal = (dir / "creal.safetensors").string(), chostile = (dir / "chostile.safetensors").string();
  ASSERT_EQ(run("train classify --epochs 1 --d-model 8 --heads 2 --d-ff 8 --layers 1 --save '" + creal + "'").code, 0);
  {
    io::LoadedTensors t = io::load_safetensors(creal);
    t.metadata["config"] = R"({"d_model": 1048576, "num_heads": 1, "d_ff": 1048576})";
    t.metadata["checksum"] = io::checkpoint_checksum(t.metadata, t.tensors);  // valid, only hostile
    io::save_safetensors(chostile, t.tensors, t.metadata);
  }
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {"heatmap --checkpoint '" + plain + "' --input '1 2' --out '" + (dir / "h").string() + "'", "not a qkv checkpoint"},
      {"train classify --resume '" + plain + "'", "not a qkv checkpoint"},
      {"train seq2seq --resume '" + plain + "'", "not a qkv checkpoint"},
      {"heatmap --checkpoint '" + i32 + "' --input '1 2' --out '" + (dir / "h").string() + "'", "tensor 'w'"},
      {"train seq2seq --resume '" + i32 + "'", "I32"},
      {"heatmap --checkpoint '" + hostile + "' --input '1 2' --out '" + (dir / "h").string() + "'",
       "describes a model of at least"},
      {"train seq2seq --resume '" + hostile + "'", "describes a model of at least"},
      {"heatmap --checkpoint '" + chostile + "' --input '1 2' --out '" + (dir / "h").string() + "'",
       "describes a model of at least"},
      {"train classify --resume '" + chostile + "'", "describes a model of at least"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = run(c.args, memory_cap(1000000));
    EXPECT_EQ(r.signal, 0);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::cli_test
