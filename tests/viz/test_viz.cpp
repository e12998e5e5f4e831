// viz: heatmap PNGs (decoded with libpng: size, colours, labels), the
// explorer page (loaded in headless Chromium when it is installed) and the
// `qkv heatmap` command (error paths and a real classifier checkpoint).
#include <gtest/gtest.h>
#include <png.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/io/checkpoint.h"
#include "qkv/models/attention_maps.h"
#include "qkv/models/classifier.h"
#include "qkv/nn/layers.h"
#include "qkv/viz/heatmap.h"

namespace fs = std::filesystem;
using qkv::Tensor;
using qkv::viz::Rgb;

namespace {

// Temp directories, removed when the test program exits.
struct TempDirs {
  std::vector<fs::path> dirs;
  ~TempDirs() {
    std::error_code ec;
    for (const auto& d : dirs) fs::remove_all(d, ec);
  }
};

fs::path temp_dir(const std::string& stem) {
  static TempDirs all;
  static std::atomic<int> counter{0};
  fs::path p = fs::temp_directory_path() /
               ("qkv_viz_" + stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  all.dirs.push_back(p);
  return p;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct Image {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;
  Rgb at(int x, int y) const {
    const std::size_t i = (static_cast<std::size_t>(y) * width + x) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

// Decodes with libpng's simplified API into 8-bit RGB.
Image decode_png(const fs::path& p) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, p.c_str())) {
    ADD_FAILURE() << "libpng cannot read " << p << ": " << img.message;
    return {};
  }
  img.format = PNG_FORMAT_RGB;
  Image out;
  out.width = static_cast<int>(img.width);
  out.height = static_cast<int>(img.height);
  out.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.rgb.data(), 0, nullptr)) {
    ADD_FAILURE() << "libpng cannot decode " << p << ": " << img.message;
    return {};
  }
  return out;
}

bool is_background(Rgb c) { return c == Rgb{255, 255, 255}; }

int ink_in(const Image& im, int x0, int y0, int w, int h) {
  int n = 0;
  for (int y = y0; y < y0 + h; ++y)
    for (int x = x0; x < x0 + w; ++x) n += !is_background(im.at(x, y));
  return n;
}

std::string rgb_str(Rgb c) {
  return "(" + std::to_string(c.r) + ", " + std::to_string(c.g) + ", " + std::to_string(c.b) + ")";
}

// A [Lq, Lk] map: row i puts weight 1 on key (i % Lk), 0 elsewhere.
Tensor one_hot_map(std::int64_t lq, std::int64_t lk) {
  std::vector<float> v(static_cast<std::size_t>(lq * lk), 0.0f);
  for (std::int64_t i = 0; i < lq; ++i) v[static_cast<std::size_t>(i * lk + i % lk)] = 1.0f;
  return Tensor::from_vector(v, {lq, lk});
}

// Synthetic maps: `layers` layers x `heads` heads of softmax-like weights
// over 5 tokens, each head attending mostly to a different offset.
std::vector<qkv::models::AttentionMap> synthetic_maps(int layers, int heads) {
  const std::vector<std::string> toks = {"[CLS]", "I", "love", "</script><b>\"x\"", "[SEP]"};
  const std::int64_t L = 5;
  std::vector<qkv::models::AttentionMap> maps;
  for (int l = 0; l < layers; ++l) {
    std::vector<float> w;
    for (int h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < L; ++i) {
        const std::int64_t target = (i + h + l) % L;
        for (std::int64_t j = 0; j < L; ++j) w.push_back(j == target ? 0.6f : 0.1f);
      }
    qkv::models::AttentionMap m;
    m.name = "encoder.layers." + std::to_string(l) + ".self_attn";
    m.kind = "self";
    m.layer = l;
    m.weights = Tensor::from_vector(w, {heads, L, L});
    m.query_tokens = toks;
    m.key_tokens = toks;
    maps.push_back(m);
  }
  return maps;
}

struct ShellResult {
  int code = -1;
  std::string out, err;
};

// Runs a shell command, capturing stdout and stderr.
ShellResult run_shell(const std::string& cmd) {
  const fs::path err_path = temp_dir("stderr") / "err.txt";
  ShellResult r;
  FILE* p = ::popen((cmd + " 2>'" + err_path.string() + "'").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_file(err_path);
  fs::remove_all(err_path.parent_path());
  return r;
}

int count(const std::string& s, const std::regex& re) {
  return static_cast<int>(std::distance(std::sregex_iterator(s.begin(), s.end(), re), std::sregex_iterator()));
}

}  // namespace

// ---- colormap ----

TEST(Viridis, EndpointsAndMiddleAreMatplotlibs) {
  EXPECT_EQ(qkv::viz::kViridis[0], (Rgb{68, 1, 84}));
  EXPECT_EQ(qkv::viz::kViridis[128], (Rgb{33, 145, 140}));
  EXPECT_EQ(qkv::viz::kViridis[255], (Rgb{253, 231, 37}));
  EXPECT_EQ(qkv::viz::viridis(0.0), qkv::viz::kViridis[0]);
  EXPECT_EQ(qkv::viz::viridis(1.0), qkv::viz::kViridis[255]);
  EXPECT_EQ(qkv::viz::viridis(-3.0), qkv::viz::kViridis[0]);
  EXPECT_EQ(qkv::viz::viridis(7.0), qkv::viz::kViridis[255]);
}

// ---- heatmap PNG ----

TEST(Heatmap, DecodesWithExpectedSizeColoursAndLabels) {
  const fs::path dir = temp_dir("png");
  const fs::path png = dir / "map.png";
  const std::int64_t lq = 3, lk = 4;
  const std::vector<std::string> rows = {"[CLS]", "love", "NLP"}, cols = {"[CLS]", "I", "love", "NLP"};
  const std::string title = "layer 0 head 1 self-attention";
  qkv::viz::write_heatmap_png(png.string(), one_hot_map(lq, lk), rows, cols, title);

  const qkv::viz::HeatmapLayout L = qkv::viz::heatmap_layout(lq, lk, rows, cols, title);
  // The layout: 480 / max(Lq, Lk) = 120 -> cells clamp to 48 px, labels at scale 2.
  EXPECT_EQ(L.cell, 48);
  EXPECT_EQ(L.label_scale, 2);
  EXPECT_EQ(L.grid_w, lk * 48);
  EXPECT_EQ(L.grid_h, lq * 48);
  // Left to right: margin 16, caption 16, gap 8, labels ("[CLS]" = 5 glyphs = (5*6-1)*2 px), gap 8.
  EXPECT_EQ(L.grid_x, 16 + 16 + 8 + 58 + 8);
  // ... grid, gap 24, bar 20, tick 4, gap 6, "0.000" (5 glyphs, 58 px), margin 16.
  EXPECT_EQ(L.width, L.grid_x + L.grid_w + 24 + 20 + 4 + 6 + 58 + 16);

  const Image im = decode_png(png);
  ASSERT_EQ(im.width, L.width);
  ASSERT_EQ(im.height, L.height);

  // A cell of weight 1 has the colormap's top colour, one of weight 0 its bottom colour
  // (sampled 3 px inside the cell's top-left corner, away from the printed value).
  auto cell = [&](int i, int j) { return im.at(L.grid_x + j * L.cell + 3, L.grid_y + i * L.cell + 3); };
  for (int i = 0; i < lq; ++i)
    for (int j = 0; j < lk; ++j) {
      const Rgb want = j == i % lk ? qkv::viz::kViridis[255] : qkv::viz::kViridis[0];
      EXPECT_EQ(cell(i, j), want) << "cell (" << i << ", " << j << ") is " << rgb_str(cell(i, j));
    }
  // The cells show their values: ink of another colour in the middle of a weight-1 cell.
  int value_px = 0;
  for (int dy = 0; dy < L.cell; ++dy)
    for (int dx = 0; dx < L.cell; ++dx)
      value_px += im.at(L.grid_x + dx, L.grid_y + dy) != qkv::viz::kViridis[255];
  EXPECT_GT(value_px, 10);

  // Colour bar: top = max colour, bottom = 0 colour.
  EXPECT_EQ(im.at(L.bar_x + L.bar_w / 2, L.bar_y), qkv::viz::kViridis[255]);
  EXPECT_EQ(im.at(L.bar_x + L.bar_w / 2, L.bar_y + L.bar_h - 1), qkv::viz::kViridis[0]);

  // Labels put ink in their areas: every row label, every column label, the title, the tick labels.
  for (int i = 0; i < lq; ++i)
    EXPECT_GT(ink_in(im, L.row_label_x, L.grid_y + i * L.cell, L.row_label_w, L.cell), 20) << "row label " << i;
  for (int j = 0; j < lk; ++j)
    EXPECT_GT(ink_in(im, L.grid_x + j * L.cell, L.col_label_y, L.cell, L.col_label_h), 5) << "column label " << j;
  EXPECT_GT(ink_in(im, 0, 0, im.width, L.grid_y - 4), 100) << "title";
  EXPECT_GT(ink_in(im, L.bar_x + L.bar_w + 6, L.bar_y - 8, im.width - L.bar_x - L.bar_w - 6, L.bar_h + 16), 50)
      << "colour bar tick labels";
  // ... and nothing is drawn in the corner right of the title row / left of the captions.
  EXPECT_EQ(ink_in(im, 0, 0, 12, 12), 0);
}

TEST(Heatmap, ScalesColoursToTheMapsMaximum) {
  // A uniform row of 0.25 is the top colour when 0.25 is the maximum.
  const fs::path png = temp_dir("png") / "uniform.png";
  qkv::viz::write_heatmap_png(png.string(), Tensor::full({2, 4}, 0.25), {}, {}, "uniform");
  const auto L = qkv::viz::heatmap_layout(2, 4, {}, {}, "uniform");
  const Image im = decode_png(png);
  ASSERT_EQ(im.width, L.width);
  EXPECT_EQ(im.at(L.grid_x + 3, L.grid_y + 3), qkv::viz::kViridis[255]);
}

TEST(Heatmap, LongSequencesGetSmallCellsAndStillDecode) {
  const fs::path png = temp_dir("png") / "long.png";
  const std::int64_t n = 100;
  std::vector<std::string> labels;
  for (int i = 0; i < n; ++i) labels.push_back("token_number_" + std::to_string(i));  // cut to 12 chars
  qkv::viz::write_heatmap_png(png.string(), one_hot_map(n, n), labels, labels, "long");
  const auto L = qkv::viz::heatmap_layout(n, n, labels, labels, "long");
  EXPECT_EQ(L.cell, 4);
  EXPECT_EQ(L.label_scale, 1);
  EXPECT_EQ(L.label_stride, 2);
  EXPECT_EQ(L.row_label_w, (qkv::viz::kMaxLabelChars * 6 - 1) * 1);
  const Image im = decode_png(png);
  EXPECT_EQ(im.width, L.width);
  EXPECT_EQ(im.height, L.height);
  EXPECT_EQ(im.at(L.grid_x + 1, L.grid_y + 1), qkv::viz::kViridis[255]);
  EXPECT_EQ(im.at(L.grid_x + L.cell + 1, L.grid_y + 1), qkv::viz::kViridis[0]);
}

TEST(Heatmap, UnwritablePathThrowsIOErrorNamingIt) {
  const std::string missing_dir = "/nonexistent-qkv-viz-dir/map.png";
  try {
    qkv::viz::write_heatmap_png(missing_dir, one_hot_map(2, 2), {}, {}, "t");
    FAIL() << "no exception";
  } catch (const qkv::IOError& e) {
    EXPECT_NE(std::string(e.what()).find(missing_dir), std::string::npos) << e.what();
  }
  // A regular file where a directory should be (fails even for root).
  const fs::path file = temp_dir("png") / "plain";
  std::ofstream(file) << "x";
  const std::string under_file = (file / "map.png").string();
  try {
    qkv::viz::write_heatmap_png(under_file, one_hot_map(2, 2), {}, {}, "t");
    FAIL() << "no exception";
  } catch (const qkv::IOError& e) {
    EXPECT_NE(std::string(e.what()).find(under_file), std::string::npos) << e.what();
  }
}

TEST(Heatmap, RejectsBadShapesAndLabelCounts) {
  const std::string p = (temp_dir("png") / "bad.png").string();
  EXPECT_THROW(qkv::viz::write_heatmap_png(p, Tensor::zeros({2, 2, 2}), {}, {}, "t"), qkv::ShapeError);
  EXPECT_THROW(qkv::viz::write_heatmap_png(p, Tensor::zeros({2, 3}), {"a"}, {}, "t"), qkv::ShapeError);
  EXPECT_THROW(qkv::viz::write_heatmap_png(p, Tensor::zeros({0, 3}), {}, {}, "t"), qkv::ShapeError);
  EXPECT_FALSE(fs::exists(p));
}

// ---- report: file names ----

TEST(Report, WritesOnePngPerMapAndHeadPlusIndex) {
  const fs::path dir = temp_dir("report") / "nested" / "out";  // created on demand
  const auto maps = synthetic_maps(2, 3);
  const auto files = qkv::viz::write_attention_report(dir.string(), maps, "synthetic");
  ASSERT_EQ(files.size(), 2u * 3u + 1u);
  EXPECT_EQ(fs::path(files.front()).filename(), "self_layer0_head0.png");
  EXPECT_EQ(fs::path(files[5]).filename(), "self_layer1_head2.png");
  EXPECT_EQ(fs::path(files.back()).filename(), "index.html");
  for (const auto& f : files) EXPECT_TRUE(fs::is_regular_file(f)) << f;
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temp file left: " << e.path();
}

TEST(Report, EncoderAndDecoderSelfAttentionGetDistinctNames) {
  auto maps = synthetic_maps(1, 2);
  auto dec = maps[0];
  dec.name = "decoder.layers.0.self_attn";
  auto cross = maps[0];
  cross.name = "decoder.layers.0.cross_attn";
  cross.kind = "cross";
  maps.push_back(dec);
  maps.push_back(cross);
  EXPECT_EQ(qkv::viz::heatmap_file_stem(maps, 0, 1), "encoder_self_layer0_head1");
  EXPECT_EQ(qkv::viz::heatmap_file_stem(maps, 1, 0), "decoder_self_layer0_head0");
  EXPECT_EQ(qkv::viz::heatmap_file_stem(maps, 2, 1), "cross_layer0_head1");
  EXPECT_EQ(qkv::viz::heatmap_title(maps, 2, 1), "layer 0 head 1 cross-attention");
  EXPECT_EQ(qkv::viz::heatmap_title(maps, 0, 1), "encoder layer 0 head 1 self-attention");
}

TEST(Report, UncreatableDirectoryThrowsIOErrorNamingIt) {
  const fs::path file = temp_dir("report") / "plain";
  std::ofstream(file) << "x";
  const std::string out = (file / "sub").string();
  try {
    qkv::viz::write_attention_report(out, synthetic_maps(1, 1), "t");
    FAIL() << "no exception";
  } catch (const qkv::IOError& e) {
    EXPECT_NE(std::string(e.what()).find(out), std::string::npos) << e.what();
  }
}

// ---- explorer page ----

TEST(Explorer, IsSelfContainedAndEscapesTokens) {
  const fs::path page = temp_dir("html") / "index.html";
  qkv::viz::write_explorer_html(page.string(), synthetic_maps(2, 3), "synthetic <maps> & \"heads\"");
  const std::string html = read_file(page);
  // No network access: no external scripts, styles, images or fetches.
  for (const char* bad : {"src=\"http", "href=\"http", "<link", "@import", "fetch(", "XMLHttpRequest", "url(http"})
    EXPECT_EQ(html.find(bad), std::string::npos) << bad;
  // The hostile token cannot close the data script: exactly the page's own </script> tags remain.
  EXPECT_EQ(count(html, std::regex("</script>")), 3);
  EXPECT_NE(html.find("synthetic &lt;maps&gt; &amp; &quot;heads&quot;"), std::string::npos);
  EXPECT_EQ(html.find("@DATA@"), std::string::npos);
  EXPECT_EQ(html.find("@VIRIDIS@"), std::string::npos);
}

TEST(Explorer, RejectsInconsistentMaps) {
  const std::string p = (temp_dir("html") / "index.html").string();
  EXPECT_THROW(qkv::viz::write_explorer_html(p, {}, "t"), qkv::ValueError);
  auto maps = synthetic_maps(1, 2);
  maps[0].key_tokens.pop_back();
  EXPECT_THROW(qkv::viz::write_explorer_html(p, maps, "t"), qkv::ValueError);
}

TEST(Explorer, LoadsInHeadlessChromiumWithThreeHeadsAndNoErrors) {
  if (run_shell("command -v chromium").code != 0) GTEST_SKIP() << "chromium is not installed (apt-get install chromium)";
  const fs::path dir = temp_dir("chromium");
  const fs::path page = dir / "index.html";
  qkv::viz::write_explorer_html(page.string(), synthetic_maps(2, 3), "synthetic");
  const ShellResult r = run_shell("timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run "
                          "--user-data-dir='" + (dir / "profile").string() +
                          "' --virtual-time-budget=2000 --dump-dom 'file://" + page.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string& dom = r.out;
  std::smatch body;
  ASSERT_TRUE(std::regex_search(dom, body, std::regex("<body[^>]*>"))) << dom.substr(0, 2000);
  const std::string tag = body.str();
  EXPECT_EQ(tag.find("data-error"), std::string::npos) << tag;  // set by window.onerror / the page's catch
  EXPECT_NE(tag.find("data-ready=\"1\""), std::string::npos) << tag;
  EXPECT_NE(tag.find("data-heads=\"3\""), std::string::npos) << tag;
  EXPECT_NE(tag.find("data-layers=\"2\""), std::string::npos) << tag;
  EXPECT_EQ(count(dom, std::regex("class=\"head-option[ \"]")), 3);
  // The head view drew token labels (escaped by the DOM) and one line per weight >= 0.005.
  EXPECT_NE(dom.find("&lt;/script&gt;&lt;b&gt;\"x\""), std::string::npos);
  EXPECT_EQ(count(dom, std::regex("<line ")), 5 * 5);
  EXPECT_EQ(count(dom, std::regex("<td ")), 5 * 5);
}

TEST(Explorer, HeadlessChromiumCheckSeesScriptErrors) {
  // The error marker the test above relies on: a page whose script throws gets data-error on <body>.
  if (run_shell("command -v chromium").code != 0) GTEST_SKIP() << "chromium is not installed (apt-get install chromium)";
  const fs::path dir = temp_dir("chromium");
  const fs::path page = dir / "index.html";
  qkv::viz::write_explorer_html(page.string(), synthetic_maps(1, 2), "broken");
  std::string html = read_file(page);
  const std::string marker = "var DATA = JSON.parse(";
  const std::size_t at = html.find(marker);
  ASSERT_NE(at, std::string::npos);
  html.insert(at, "null.boom; ");
  std::ofstream(page, std::ios::binary | std::ios::trunc) << html;
  const ShellResult r = run_shell("timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run "
                                  "--user-data-dir='" + (dir / "profile").string() +
                                  "' --virtual-time-budget=2000 --dump-dom 'file://" + page.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::smatch body;
  ASSERT_TRUE(std::regex_search(r.out, body, std::regex("<body[^>]*>")));
  EXPECT_NE(body.str().find("data-error"), std::string::npos) << body.str();
  EXPECT_EQ(body.str().find("data-ready"), std::string::npos) << body.str();
}

// ---- qkv heatmap ----

#ifdef QKV_BIN

namespace {

ShellResult qkv_run(const std::string& args) { return run_shell(std::string("'") + QKV_BIN + "' " + args); }

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST(HeatmapCommand, MissingCheckpointIsOneClearLine) {
  const std::string missing = (temp_dir("cli") / "missing.safetensors").string();
  const ShellResult r = qkv_run("heatmap --checkpoint '" + missing + "' --input '1 2 3' --out '" +
                        (temp_dir("cli") / "out").string() + "'");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
}

TEST(HeatmapCommand, CorruptCheckpointIsOneClearLine) {
  const fs::path dir = temp_dir("cli");
  const fs::path bad = dir / "corrupt.safetensors";
  std::ofstream(bad, std::ios::binary) << std::string("\xff\xff\xff\xff\xff\xff\xff\x7f garbage", 17);
  const ShellResult r = qkv_run("heatmap --checkpoint '" + bad.string() + "' --input '1 2 3' --out '" +
                        (dir / "out").string() + "'");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("corrupt.safetensors"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(HeatmapCommand, UnknownModelTypeIsOneClearLine) {
  const fs::path dir = temp_dir("cli");
  const fs::path ckpt = dir / "nope.safetensors";
  qkv::nn::Linear lin({.in_features = 2, .out_features = 2});
  qkv::io::save_checkpoint(ckpt.string(), {.model = &lin, .model_type = "nope"});
  const ShellResult r = qkv_run("heatmap --checkpoint '" + ckpt.string() + "' --input '1 2' --out '" +
                        (dir / "out").string() + "'");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
}

TEST(HeatmapCommand, MissingRequiredOptionsIsUsageError) {
  const ShellResult r = qkv_run("heatmap --out /tmp");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--checkpoint"), std::string::npos) << r.err;
}

namespace {

// An untrained (seeded) tutorial classifier saved as a checkpoint: 2 layers, 4 heads.
fs::path classifier_checkpoint(const fs::path& dir) {
  qkv::manual_seed(7);
  const qkv::models::ClassifierOptions o{.num_layers = 2};
  qkv::models::TinyTextClassifier model(o);
  const fs::path ckpt = dir / "clf.safetensors";
  qkv::io::save_checkpoint(ckpt.string(), {.model = &model,
                                           .model_type = "classifier",
                                           .config_json = qkv::models::classifier_config_to_json(o)});
  return ckpt;
}

}  // namespace

TEST(HeatmapCommand, ClassifierCheckpointWritesEveryLayerAndHead) {
  const fs::path dir = temp_dir("cli");
  const fs::path ckpt = classifier_checkpoint(dir);
  const fs::path out = dir / "maps";
  const ShellResult r = qkv_run("heatmap --checkpoint '" + ckpt.string() + "' --input '3 5 7 1 2 9 4 8' --out '" +
                        out.string() + "' --json");
  ASSERT_EQ(r.code, 0) << r.err;
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 4; ++h) {
      const fs::path png = out / ("self_layer" + std::to_string(l) + "_head" + std::to_string(h) + ".png");
      ASSERT_TRUE(fs::exists(png)) << png;
      EXPECT_NE(r.out.find(png.string()), std::string::npos) << "not listed: " << png;
    }
  ASSERT_TRUE(fs::exists(out / "index.html"));
  EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator()), 2 * 4 + 1);
  const std::vector<std::string> toks = {"t3", "t5", "t7", "t1", "t2", "t9", "t4", "t8"};
  const auto L = qkv::viz::heatmap_layout(8, 8, toks, toks, "layer 1 head 3 self-attention");
  const Image im = decode_png(out / "self_layer1_head3.png");
  EXPECT_EQ(im.width, L.width);
  EXPECT_EQ(im.height, L.height);
}

TEST(HeatmapCommand, UnwritableOutIsOneClearLine) {
  const fs::path dir = temp_dir("cli");
  const fs::path ckpt = classifier_checkpoint(dir);
  const fs::path file = dir / "plain";
  std::ofstream(file) << "x";
  const std::string out = (file / "maps").string();
  const ShellResult r = qkv_run("heatmap --checkpoint '" + ckpt.string() + "' --input '3 7' --out '" + out + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(out), std::string::npos) << r.err;
}

#endif  // QKV_BIN
