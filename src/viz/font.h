// A small RGB canvas and a 5x7 bitmap font for the PNG figures (internal).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/viz/heatmap.h"

namespace qkv::viz::detail {

// Each glyph is 5 columns x 7 rows drawn in a 6 x 8 cell (one blank column
// and row of spacing), times the scale.
inline constexpr int kGlyphW = 5, kGlyphH = 7, kAdvance = 6, kLineH = 8;

// Column bits of the glyph for `c` (bit 0 = top row); '?' for characters
// outside printable ASCII.
const std::uint8_t* glyph(unsigned char c);
// The string as printable ASCII: each UTF-8 code point outside 0x20..0x7E
// becomes '?'.
std::string to_ascii(const std::string& utf8);
// Pixel width of `text` (already ASCII) at `scale`, without trailing spacing.
int text_width(const std::string& text, int scale);
// `text` (ASCII) cut to at most `max_chars`, ending in ".." when cut.
std::string ellipsize(const std::string& text, int max_chars);

class Canvas {
 public:
  Canvas(int w, int h, Rgb background);
  int width() const { return w_; }
  int height() const { return h_; }
  void set(int x, int y, Rgb c);  // ignores pixels outside
  void fill_rect(int x, int y, int w, int h, Rgb c);
  void rect_outline(int x, int y, int w, int h, Rgb c);
  // Text with its top-left corner at (x, y), reading left to right.
  void text(int x, int y, const std::string& ascii, int scale, Rgb c);
  // Text rotated 90 degrees counter-clockwise (reads bottom to top); (x, y)
  // is the top-left of its bounding box, which is kLineH*scale wide and
  // text_width() high.
  void text_up(int x, int y, const std::string& ascii, int scale, Rgb c);
  const std::vector<std::uint8_t>& rgb() const { return px_; }

 private:
  int w_, h_;
  std::vector<std::uint8_t> px_;  // row-major RGB
};

}  // namespace qkv::viz::detail
