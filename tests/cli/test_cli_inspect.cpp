// qkv inspect on GGUF files (the real SmolLM2 model and broken files) and on files far larger
// than the memory it may use: the format comes from the magic, only the header is read.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <regex>
#include <string>

#include "cli/cli_test_util.h"
#include "io/gguf_test_util.h"
#include "qkv/io/gguf.h"
#include "qkv/io/gguf_writer.h"

namespace qkv::cli_test {
namespace {

using io::test::GgufBytes;

std::string smollm2() { return std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

bool have_smollm2() {
  if (fs::exists(smollm2())) return true;
  ADD_FAILURE() << smollm2() << " is missing: run `make models` (scripts/fetch_models.sh) before the tests";
  return false;
}

void write_bytes(const fs::path& p, const std::vector<std::uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

TEST(CliInspectGguf, TheModelsMetadataAndTensorTable) {
  if (!have_smollm2()) return;
  const Result r = run("inspect '" + smollm2() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want : {"GGUF version 3, alignment 32", "tensors:  272 (61 F32, 210 Q4_1, 1 Q8_0)", "metadata: 33 keys",
                           "(368 bytes; --full shows all)", "... 49147 more]"})
    EXPECT_NE(r.out.find(want), std::string::npos) << "missing '" << want << "' in:\n" << r.out;
  for (const char* row : {R"(general\.architecture\s+string\s+"llama")", R"(llama\.block_count\s+u32\s+30\n)",
                          R"(tokenizer\.ggml\.tokens\s+string\[49152\]\s+\["<\|endoftext\|>", "<\|im_start\|>")",
                          R"(llama\.rope\.freq_base\s+f32\s+100000\n)",
                          R"(token_embd\.weight\s+Q8_0\s+\[49152, 576\]\s+28311552\s+30081024\s+0\n)",
                          R"(blk\.0\.attn_k\.weight\s+Q4_1\s+\[192, 576\]\s+110592\s+69120\s+)"})
    EXPECT_TRUE(std::regex_search(r.out, std::regex(row))) << "no line matching " << row << " in:\n" << r.out;

  const Result rj = run("inspect --json '" + smollm2() + "'");
  ASSERT_EQ(rj.code, 0) << rj.err;
  const auto j = nlohmann::json::parse(rj.out);
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["file_size"], 98362432);
  EXPECT_EQ(j["data_offset"], 1785664);
  EXPECT_EQ(j["metadata"].size(), 33u);
  EXPECT_EQ(j["metadata"]["llama.block_count"], (nlohmann::json{{"type", "u32"}, {"value", 30}}));
  const auto& tokens = j["metadata"]["tokenizer.ggml.tokens"];
  EXPECT_EQ(tokens["count"], 49152);
  EXPECT_EQ(tokens["element_type"], "string");
  EXPECT_EQ(tokens["truncated"], true);
  EXPECT_EQ(tokens["value"].size(), 8u);
  EXPECT_EQ(tokens["value"][1], "<|im_start|>");
  const io::GGUFFile f = io::GGUFFile::open_header(smollm2());
  EXPECT_EQ(j["metadata"]["tokenizer.chat_template"]["value"], std::string(f.get_string("tokenizer.chat_template")));
  ASSERT_EQ(j["tensors"].size(), 272u);
  EXPECT_EQ(j["tensors"][0]["name"], "token_embd.weight");
  EXPECT_EQ(j["tensors"][0]["type"], "Q8_0");
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::array({49152, 576}));
  EXPECT_EQ(j["tensors"][0]["dims"], nlohmann::json::array({576, 49152}));
  EXPECT_EQ(j["tensors"][0]["bytes"], 30081024);
}

TEST(CliInspectGguf, FullShowsEveryElementAndWholeStrings) {
  if (!have_smollm2()) return;
  const io::GGUFFile f = io::GGUFFile::open_header(smollm2());
  const Result r = run("inspect --full '" + smollm2() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("--full shows all"), std::string::npos);
  EXPECT_EQ(r.out.find(" more]"), std::string::npos);
  EXPECT_NE(r.out.find("{{ '<|im_start|>assistant\\n' }}{% endif %}\""), std::string::npos)
      << "the template's end is shown";
  const Result rj = run("inspect --json --full '" + smollm2() + "'");
  ASSERT_EQ(rj.code, 0) << rj.err;
  const auto j = nlohmann::json::parse(rj.out);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.merges"]["truncated"], false);
  const auto& merges = j["metadata"]["tokenizer.ggml.merges"]["value"];
  ASSERT_EQ(merges.size(), 48900u);
  EXPECT_EQ(merges[48899], std::string(f.get_string_array("tokenizer.ggml.merges")[48899]));
}

TEST(CliInspectGguf, TheFormatComesFromTheMagicNotTheName) {
  const fs::path dir = unique_temp("magic");
  fs::create_directories(dir);
  fs::copy_file(fixture("gguf_ref.gguf"), dir / "weights.safetensors");
  fs::copy_file(fixture("linear.safetensors"), dir / "weights.gguf");
  const Result g = run("inspect '" + (dir / "weights.safetensors").string() + "'");
  const Result s = run("inspect --json '" + (dir / "weights.gguf").string() + "'");
  fs::remove_all(dir);
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_NE(g.out.find("GGUF version 3"), std::string::npos) << g.out;
  EXPECT_TRUE(std::regex_search(g.out, std::regex(R"(c\.q8_0\s+Q8_0\s+\[3, 64\])"))) << g.out;
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(nlohmann::json::parse(s.out)["format"], "safetensors");
}

// A model holding a tensor of a GGML type qkv does not compute with (Q8_1 here, in the tiny
// llama2 fixture): inspect lists every tensor, that one marked; loading it to generate fails with
// one line naming the tensor, its type and the types qkv computes with.
TEST(CliInspectGguf, TypesQkvDoesNotComputeWithAreListedAndRefusedAtLoad) {
  const fs::path dir = unique_temp("q8_1");
  fs::create_directories(dir);
  const std::string path = (dir / "llama2_q8_1.gguf").string();
  {
    const io::GGUFFile f = io::GGUFFile::open(fixture("arch/llama2.gguf"));
    std::vector<io::GGUFTensorData> ts;
    std::vector<std::uint8_t> q81;
    for (const io::GGUFTensorInfo& t : f.tensors()) {
      if (t.name == "blk.0.ffn_up.weight") {  // [32, 32]: 32 rows of one 36-byte Q8_1 block
        q81.assign(32 * 36, 0);
        ts.push_back({t.name, static_cast<kernels::QType>(9), t.dims, q81.data(), q81.size()});
      } else {
        ts.push_back({t.name, t.type, t.dims, f.data(t), t.nbytes});
      }
    }
    io::write_gguf(path, io::metadata_of(f), ts);
  }
  const Result r = run("inspect '" + path + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(blk\.0\.ffn_up\.weight\s+Q8_1\*\s+\[32, 32\]\s+1024\s+1152\s)"))) << r.out;
  EXPECT_NE(r.out.find(" 1 Q8_1*"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("* a type qkv reads but does not compute with: the file cannot be loaded as a model"),
            std::string::npos)
      << r.out;
  const Result rj = run("inspect --json '" + path + "'");
  ASSERT_EQ(rj.code, 0) << rj.err;
  const nlohmann::json inspected = nlohmann::json::parse(rj.out);  // the loop must not iterate a temporary's member
  for (const auto& t : inspected["tensors"]) {
    EXPECT_EQ(t["computable"], t["name"] != "blk.0.ffn_up.weight") << t.dump();
    if (t["name"] == "blk.0.ffn_up.weight") EXPECT_EQ(t["type"], "Q8_1");
  }
  const Result g = run("generate --model '" + path + "' --prompt hi --max-new 2");
  fs::remove_all(dir);
  EXPECT_EQ(g.code, 1);
  EXPECT_EQ(g.out, "");
  EXPECT_EQ(count_lines(g.err), 1) << g.err;
  EXPECT_NE(g.err.find("tensor 'blk.0.ffn_up.weight' has type Q8_1, which qkv cannot compute with (it computes with "
                       "F32, F16, Q4_0"),
            std::string::npos)
      << g.err;
}

// 2 GiB files (sparse: no disk used) under a 200 MB memory cap: only the headers are read.
TEST(CliInspectGguf, HugeFilesAreInspectedFromTheirHeaderAlone) {
  const fs::path dir = unique_temp("huge");
  fs::create_directories(dir);
  const std::uint64_t two_gib = std::uint64_t{1} << 31;
  // safetensors: F32 [16384, 32768]
  const std::string header = R"({"w":{"dtype":"F32","shape":[16384,32768],"data_offsets":[0,2147483648]}})";
  std::vector<std::uint8_t> st(8, 0);
  std::string h = header;
  while ((8 + h.size()) % 8) h += ' ';
  for (int i = 0; i < 8; ++i) st[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h.size() >> (8 * i));
  st.insert(st.end(), h.begin(), h.end());
  write_bytes(dir / "big.safetensors", st);
  fs::resize_file(dir / "big.safetensors", st.size() + two_gib);
  // GGUF: F32 with dims {32768, 16384}
  GgufBytes g = GgufBytes::header(1, 1);
  g.kv_str("general.architecture", "llama").tensor("w", {32768, 16384}, 0, 0).pad();
  write_bytes(dir / "big.gguf", g.b);
  fs::resize_file(dir / "big.gguf", g.b.size() + two_gib);

  const Result rs = run("inspect '" + (dir / "big.safetensors").string() + "'", memory_cap(200000));
  const Result rg = run("inspect --json '" + (dir / "big.gguf").string() + "'", memory_cap(200000));
  fs::remove_all(dir);
  ASSERT_EQ(rs.code, 0) << rs.err;
  EXPECT_TRUE(std::regex_search(rs.out, std::regex(R"(w\s+F32\s+\[16384, 32768\]\s+536870912\s+2147483648)"))) << rs.out;
  ASSERT_EQ(rg.code, 0) << rg.err;
  const auto j = nlohmann::json::parse(rg.out);
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::array({16384, 32768}));
  EXPECT_EQ(j["tensors"][0]["bytes"], two_gib);
}

TEST(CliInspectGguf, BrokenFilesGiveTheLibrarysOneLine) {
  const fs::path dir = unique_temp("broken");
  fs::create_directories(dir);
  struct Case {
    std::string name;
    std::vector<std::uint8_t> bytes;
    std::string says;
  };
  GgufBytes version = GgufBytes::header(0, 0, 1);
  GgufBytes count = GgufBytes::header(0, std::uint64_t{1} << 60);
  GgufBytes iq = GgufBytes::header(1, 0);
  iq.tensor("blk.0.attn_q.weight", {256, 2}, 1000, 0).pad().zeros(512);
  GgufBytes cut = GgufBytes::header(1, 0);
  cut.tensor("w", {1024}, 0, 0).pad().zeros(100);
  GgufBytes dup = GgufBytes::header(0, 2);
  dup.kv_u32("k", 1).kv_u32("k", 2);
  const std::vector<Case> cases = {
      {"v1.gguf", version.b, "GGUF version 1 is not supported"},
      {"count.gguf", count.b, "metadata count 1152921504606846976 is impossible"},
      {"type1000.gguf", iq.b, "tensor 'blk.0.attn_q.weight' has unknown type id 1000, which is no GGML type qkv knows"},
      {"truncated.gguf", cut.b, "tensor 'w': its 4096 bytes at data offset 0 run past the end"},
      {"dup.gguf", dup.b, "duplicate metadata key 'k'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = (dir / c.name).string();
    write_bytes(path, c.bytes);
    std::string lib;
    try {
      io::GGUFFile::open(path);
    } catch (const qkv::Error& e) {
      lib = e.what();
    }
    ASSERT_FALSE(lib.empty()) << "the library accepts " << c.name;
    for (const char* flags : {"", "--json ", "--full "}) {
      const Result r = run(std::string("inspect ") + flags + "'" + path + "'", memory_cap(1000000));
      EXPECT_EQ(r.signal, 0);
      EXPECT_EQ(r.code, 1) << r.err;
      EXPECT_EQ(r.err, "qkv: error: " + lib + "\n");
      EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "");
    }
  }
  // A file too short for either magic, and a directory: one line naming the path.
  const Result d = run("inspect '" + dir.string() + "'");
  EXPECT_EQ(d.code, 1);
  EXPECT_EQ(count_lines(d.err), 1) << d.err;
  EXPECT_NE(d.err.find(dir.string() + ": cannot read file: it is a directory"), std::string::npos) << d.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::cli_test
