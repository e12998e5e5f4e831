// Printing helpers shared by the qkv subcommands: number and shape
// formatting, section headers and a plain-text table printer.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <streambuf>
#include <string>
#include <vector>

#include "qkv/core/shape.h"

namespace qkv {
class Tensor;
}

namespace qkv::tool {

// "0.305" for fixed(0.30548, 3); "-0.000" is printed as "0.000".
std::string fixed(double v, int precision);
// Shortest round-trip-ish form with `significant` digits ("64.12", "1.3e-07").
std::string general(double v, int significant = 4);
// PyTorch-style shape: "(1, 5, 512)"; rank 0 is "()".
std::string shape_paren(const Shape& s);
// JSON-style shape: "[4, 5]".
std::string shape_list(const Shape& s);
// The first n elements of t in C order, "0.1234 -0.5678 ..." (with "..." when
// t has more); empty string if n <= 0.
std::string first_values(const Tensor& t, std::int64_t n, int precision = 4);
// "== title ==" block with an underline, used to section long outputs.
void print_section(std::ostream& os, const std::string& title);
// Number of terminal columns a UTF-8 string takes (one per code point).
std::size_t display_width(const std::string& s);

// A plain-text table: columns padded to their widest cell, the first column
// left-aligned and the rest right-aligned unless set otherwise.
//
//   Table t({"d_k", "Var(q.k)"});
//   t.add_row({"64", "63.9"});
//   t.print(std::cout);
class Table {
 public:
  enum class Align { Left, Right };
  explicit Table(std::vector<std::string> headers);
  Table& align(std::size_t column, Align a);
  void add_row(std::vector<std::string> cells);  // padded/truncated to the header count
  void add_rule();                               // a horizontal line between rows
  void print(std::ostream& os, const std::string& indent = "  ") const;

 private:
  std::vector<std::string> headers_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;  // empty row = rule
};

// A stream buffer that forwards whole lines to `dest` with every occurrence of `from`
// replaced by `to` (the demo prints paths of its staging folder under their final names).
// A partial line is forwarded on flush and at destruction.
class ReplacingStreambuf : public std::streambuf {
 public:
  ReplacingStreambuf(std::ostream& dest, std::string from, std::string to);
  ~ReplacingStreambuf() override;

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  void forward();
  std::ostream& dest_;
  std::string from_, to_, line_;
};

}  // namespace qkv::tool
