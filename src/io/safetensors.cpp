// Strict safetensors reader (REFERENCES.md section 3).
//
// Shape of the work:
//   1. the 8-byte prefix and N are checked against the bytes present;
//   2. the header is checked to be UTF-8, then streamed through nlohmann's SAX
//      parser into a small state machine that accepts exactly
//        {"__metadata__": {str: str, ...}?, name: {"dtype": str, "shape": [int...],
//                                                 "data_offsets": [int, int]}, ...}
//      and rejects duplicate keys at every level (nlohmann's DOM would keep
//      the last duplicate silently), wrong types, extra or missing keys, at
//      the first offending token. No JSON DOM is built, so a hostile header
//      (deep nesting, huge arrays) costs at most a few bytes per header byte;
//   3. each entry is checked alone (dtype, begin <= end, numel * size without
//      overflow, end - begin == numel * size), then all together (sorted by
//      offsets they must tile the data section exactly: first begin 0, each
//      begin == previous end, last end == data length).
#include "qkv/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "qkv/io/mapped_file.h"
#include "safetensors_util.h"

namespace qkv::io {

// ---------------------------------------------------------------- dtypes ----

namespace {
struct DTypeRow {
  StDType dt;
  const char* name;
  std::size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {StDType::BOOL, "BOOL", 1}, {StDType::U8, "U8", 1},     {StDType::I8, "I8", 1},
    {StDType::I16, "I16", 2},   {StDType::U16, "U16", 2},   {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2}, {StDType::I32, "I32", 4},   {StDType::U32, "U32", 4},
    {StDType::F32, "F32", 4},   {StDType::F64, "F64", 8},   {StDType::I64, "I64", 8},
    {StDType::U64, "U64", 8},
};
// In the safetensors format but not supported here: rejected with a clearer
// message than "unknown".
constexpr const char* kUnsupportedDTypes[] = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",
                                              "F6_E2M3", "F6_E3M2", "C64"};

const DTypeRow& row(StDType dt) {
  for (const DTypeRow& r : kDTypes)
    if (r.dt == dt) return r;
  throw ValueError("safetensors: invalid StDType value " + std::to_string(static_cast<int>(dt)));
}
}  // namespace

std::size_t st_dtype_size(StDType dt) { return row(dt).size; }
const char* st_dtype_name(StDType dt) { return row(dt).name; }
std::optional<StDType> st_dtype_from_name(std::string_view name) {
  for (const DTypeRow& r : kDTypes)
    if (name == r.name) return r.dt;
  return std::nullopt;
}

// --------------------------------------------------------------- helpers ----

namespace detail {

bool utf8_valid(const unsigned char* p, std::size_t n, std::size_t* bad_at) {
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlong forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      if (bad_at) *bad_at = i;
      return false;
    }
    bool ok = n - i >= len && p[i + 1] >= lo && p[i + 1] <= hi;
    for (std::size_t k = 2; ok && k < len; ++k) ok = p[i + k] >= 0x80 && p[i + k] <= 0xBF;
    if (!ok) {
      if (bad_at) *bad_at = i;
      return false;
    }
    i += len;
  }
  return true;
}

std::string msg_quote(std::string_view s) {
  constexpr std::size_t kMax = 160;  // bytes of the name shown
  static const char* hex = "0123456789abcdef";
  std::string out = "'";
  std::size_t i = 0;
  while (i < s.size() && i < kMax) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F || c == '\'' || c == '\\') {
      out += '\\';
      if (c == '\n') out += 'n';
      else if (c == '\t') out += 't';
      else if (c == '\r') out += 'r';
      else if (c == '\'' || c == '\\') out += static_cast<char>(c);
      else { out += 'x'; out += hex[c >> 4]; out += hex[c & 15]; }
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      // Copy one whole UTF-8 sequence, or escape a stray byte.
      std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (i + len <= s.size() &&
          utf8_valid(reinterpret_cast<const unsigned char*>(s.data() + i), len)) {
        out.append(s.substr(i, len));
        i += len;
      } else {
        out += "\\x"; out += hex[c >> 4]; out += hex[c & 15];
        ++i;
      }
    }
  }
  out += '\'';
  if (i < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace detail

using detail::msg_quote;

namespace {

std::string offsets_str(std::uint64_t b, std::uint64_t e) {
  return "[" + std::to_string(b) + "," + std::to_string(e) + "]";
}

// a * b, or nullopt on u64 overflow.
std::optional<std::uint64_t> mul_u64(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::nullopt;
  return a * b;
}

// An entry of the header as read, before its cross-checks.
struct RawEntry {
  std::string name;
  std::optional<StDType> dtype;
  bool has_shape = false, has_offsets = false;
  Shape shape;
  std::vector<std::uint64_t> offsets;
};

// SAX handler for nlohmann::json::sax_parse: a state machine over the only
// structure a safetensors header may have. Every callback returns false to
// stop at the first problem, whose description is left in `error`.
class HeaderSax {
 public:
  std::string error;  // empty while all is well
  std::map<std::string, std::string> metadata;
  std::vector<RawEntry> entries;

  bool null() { return unexpected("null"); }
  bool boolean(bool) { return unexpected("a boolean"); }
  bool binary(nlohmann::json::binary_t&) { return unexpected("binary data"); }
  bool number_float(double, const std::string& s) {
    const std::string shown = s.size() > 40 ? s.substr(0, 40) + "..." : s;
    return unexpected("the number " + shown + ", which is not an integer that fits in 64 bits");
  }
  bool number_integer(std::int64_t v) {
    if (v >= 0) return number_unsigned(static_cast<std::uint64_t>(v));
    if (state_ == State::Shape)
      return fail(tensor() + ": shape has a negative dimension " + std::to_string(v) + " " + where());
    return unexpected("the negative number " + std::to_string(v));
  }
  bool number_unsigned(std::uint64_t v) {
    if (state_ == State::Shape) {
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return fail(tensor() + ": shape dimension " + std::to_string(v) + " is too large " + where());
      entries.back().shape.push_back(static_cast<std::int64_t>(v));
      ++index_;
      return true;
    }
    if (state_ == State::Offsets) {
      if (entries.back().offsets.size() == 2)
        return fail(tensor() + ": data_offsets has more than two values; expected [begin, end]");
      entries.back().offsets.push_back(v);
      ++index_;
      return true;
    }
    return unexpected("the number " + std::to_string(v));
  }
  bool string(std::string& s) {
    if (state_ == State::MetaValue) {
      metadata.emplace(key_, std::move(s));
      state_ = State::Meta;
      return true;
    }
    if (state_ == State::EntryValue && key_ == "dtype") {
      RawEntry& e = entries.back();
      e.dtype = st_dtype_from_name(s);
      if (!e.dtype) {
        for (const char* u : kUnsupportedDTypes)
          if (s == u)
            return fail(tensor() + ": dtype " + msg_quote(s) +
                        " is a safetensors dtype that qkv does not support");
        return fail(tensor() + ": unknown dtype " + msg_quote(s) +
                    " (expected BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64 or U64)");
      }
      state_ = State::Entry;
      return true;
    }
    return unexpected("a string");
  }
  bool start_object(std::size_t) {
    if (state_ == State::Start) { state_ = State::Root; return true; }
    if (state_ == State::RootValue) {
      if (key_ == "__metadata__") {
        state_ = State::Meta;
      } else {
        entries.push_back(RawEntry{});
        entries.back().name = key_;
        state_ = State::Entry;
      }
      keys_.clear();
      return true;
    }
    return unexpected("an object");
  }
  bool key(std::string& k) {
    switch (state_) {
      case State::Root:
        if (k == "__metadata__") {
          if (seen_metadata_) return fail("header has the key \"__metadata__\" twice");
          seen_metadata_ = true;
        } else if (!names_.insert(k).second) {
          return fail("duplicate tensor name " + msg_quote(k) + " in the header");
        }
        state_ = State::RootValue;
        break;
      case State::Meta:
        if (!keys_.insert(k).second) return fail("__metadata__ has the key " + msg_quote(k) + " twice");
        state_ = State::MetaValue;
        break;
      case State::Entry: {
        RawEntry& e = entries.back();
        if (!keys_.insert(k).second) return fail(tensor() + ": key " + msg_quote(k) + " appears twice");
        if (k == "dtype") {
        } else if (k == "shape") {
          e.has_shape = true;
        } else if (k == "data_offsets") {
          e.has_offsets = true;
        } else {
          return fail(tensor() + ": unexpected key " + msg_quote(k) +
                      " (an entry has exactly dtype, shape and data_offsets)");
        }
        state_ = State::EntryValue;
        break;
      }
      default:
        return unexpected("a key");  // unreachable: JSON puts keys only in objects
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() {
    if (state_ == State::Root) { state_ = State::Done; return true; }
    if (state_ == State::Meta || state_ == State::Entry) { state_ = State::Root; return true; }
    return unexpected("the end of an object");
  }
  bool start_array(std::size_t) {
    if (state_ == State::EntryValue && key_ == "shape") { state_ = State::Shape; index_ = 0; return true; }
    if (state_ == State::EntryValue && key_ == "data_offsets") { state_ = State::Offsets; index_ = 0; return true; }
    return unexpected("an array");
  }
  bool end_array() {
    if (state_ == State::Shape) { state_ = State::Entry; return true; }
    if (state_ == State::Offsets) {
      const std::size_t n = entries.back().offsets.size();
      if (n != 2)
        return fail(tensor() + ": data_offsets has " + std::to_string(n) +
                    (n == 1 ? " value" : " values") + "; expected [begin, end]");
      state_ = State::Entry;
      return true;
    }
    return unexpected("the end of an array");
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception& ex) {
    std::string what = ex.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 7: ..." -> from "parse error"
    const std::size_t skip = what.find("] ");
    if (skip != std::string::npos) what.erase(0, skip + 2);
    // The message quotes the last token read; keep it short and on one line.
    std::string clean;
    for (char c : what.substr(0, 240)) clean += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
    if (!detail::utf8_valid(clean)) {  // cut through a multi-byte character
      std::size_t bad = 0;
      detail::utf8_valid(clean, &bad);
      clean.resize(bad);
    }
    if (what.size() > 240) clean += "...";
    return fail("header is not valid JSON (at header byte " + std::to_string(position) + "): " + clean);
  }

 private:
  enum class State { Start, Root, RootValue, Meta, MetaValue, Entry, EntryValue, Shape, Offsets, Done };

  bool fail(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  std::string tensor() const { return "tensor " + msg_quote(entries.back().name); }
  std::string where() const { return "(element " + std::to_string(index_) + ")"; }

  // A JSON value that the current state does not allow; `found` describes it.
  bool unexpected(const std::string& found) {
    switch (state_) {
      case State::Start:
        return fail("header is not a JSON object (it is " + found + ")");
      case State::RootValue:
        if (key_ == "__metadata__") return fail("__metadata__ is not an object of strings (it is " + found + ")");
        return fail("tensor " + msg_quote(key_) + ": entry is not an object (it is " + found + ")");
      case State::MetaValue:
        return fail("__metadata__ value for key " + msg_quote(key_) + " is not a string (it is " + found + ")");
      case State::EntryValue:
        if (key_ == "dtype") return fail(tensor() + ": dtype is not a string (it is " + found + ")");
        if (key_ == "shape")
          return fail(tensor() + ": shape is not a list of non-negative integers (it is " + found + ")");
        return fail(tensor() + ": data_offsets is not a list of two non-negative integers (it is " + found + ")");
      case State::Shape:
        return fail(tensor() + ": shape is not a list of non-negative integers (element " +
                    std::to_string(index_) + " is " + found + ")");
      case State::Offsets:
        return fail(tensor() + ": data_offsets is not a list of two non-negative integers (element " +
                    std::to_string(index_) + " is " + found + ")");
      default:
        return fail("header has an unexpected JSON value: " + found);
    }
  }

  State state_ = State::Start;
  std::string key_;                        // last key read at the current level
  std::unordered_set<std::string> names_;  // tensor names seen
  std::unordered_set<std::string> keys_;   // keys seen in the current metadata / entry object
  bool seen_metadata_ = false;
  std::size_t index_ = 0;  // position inside the current shape / data_offsets array
};

}  // namespace

// ---------------------------------------------------------------- reader ----

namespace {

FormatError bad_file(const std::string& src, const std::string& problem) {
  return FormatError(src + ": invalid safetensors file: " + problem);
}

// N, the header length, from the first min(8, size) bytes of a file of `size` bytes, checked
// against the format's limit and the file's size.
std::uint64_t header_length(const std::uint8_t* first, std::uint64_t size, const std::string& src) {
  if (size < 8)
    throw bad_file(src, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header-length prefix");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first[i];
  if (n > detail::kMaxHeaderSize)
    throw bad_file(src, "header length " + std::to_string(n) + " exceeds the limit of " +
                            std::to_string(detail::kMaxHeaderSize) + " bytes");
  if (n > size - 8)
    throw bad_file(src, "header length " + std::to_string(n) + " runs past the end of the file (only " +
                            std::to_string(size - 8) + " bytes follow the 8-byte prefix)");
  return n;
}

}  // namespace

SafetensorsFile SafetensorsFile::parse(std::vector<std::uint8_t> bytes, std::string source_name) {
  const std::uint64_t size = bytes.size();
  return parse_buffer(MappedFile::from_bytes(std::move(bytes), std::move(source_name)), size, false);
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<const MappedFile> m = MappedFile::open(path, "safetensors file");
  const std::uint64_t size = m->size();
  return parse_buffer(std::move(m), size, false);
}

SafetensorsFile SafetensorsFile::open_header(const std::string& path) {
  const FilePrefix first = read_file_prefix(path, 8, "safetensors file");
  const std::uint64_t n = header_length(first.bytes.data(), first.file_size, path);
  FilePrefix head = read_file_prefix(path, 8 + n, "safetensors file");
  // The file may have changed between the two reads: the size that counts is the last one.
  if (head.file_size != first.file_size) header_length(head.bytes.data(), head.file_size, path);
  const std::uint64_t size = head.file_size;
  return parse_buffer(MappedFile::from_bytes(std::move(head.bytes), path), size, true);
}

SafetensorsFile SafetensorsFile::parse_buffer(std::shared_ptr<const MappedFile> buffer, std::uint64_t size,
                                              bool header_only) {
  const std::string& src = buffer->source();
  auto bad = [&](const std::string& problem) -> FormatError { return bad_file(src, problem); };
  const std::uint8_t* bytes = buffer->data();
  const std::uint64_t n = header_length(bytes, size, src);
  if (buffer->size() < 8 + n) throw bad("header length " + std::to_string(n) + " runs past the bytes read");

  const unsigned char* hdr = bytes + 8;
  std::size_t bad_at = 0;
  if (!detail::utf8_valid(hdr, n, &bad_at)) {
    static const char* hex = "0123456789abcdef";
    const unsigned char c = hdr[bad_at];
    throw bad(std::string("header is not valid UTF-8 (byte 0x") + hex[c >> 4] + hex[c & 15] +
              " at header offset " + std::to_string(bad_at) + ")");
  }
  // nlohmann skips a byte-order mark; JSON (RFC 8259) and the Rust reader do not.
  if (n >= 3 && hdr[0] == 0xEF && hdr[1] == 0xBB && hdr[2] == 0xBF)
    throw bad("header starts with a UTF-8 byte-order mark, which JSON does not allow");
  if (n == 0) throw bad("header is empty (length 0); expected a JSON object");
  // nlohmann's lexer takes a NUL byte for the end of input, so "{}\0junk"
  // would pass; in JSON a raw NUL is never valid (serde rejects it too).
  if (const void* z = std::memchr(hdr, 0, n))
    throw bad("header is not valid JSON: NUL byte at header offset " +
              std::to_string(static_cast<const unsigned char*>(z) - hdr));

  HeaderSax sax;
  const bool ok = nlohmann::json::sax_parse(hdr, hdr + n, &sax, nlohmann::json::input_format_t::json,
                                            /*strict=*/true, /*ignore_comments=*/false);
  if (!sax.error.empty()) throw bad(sax.error);
  if (!ok) throw bad("header is not valid JSON");

  // Each entry alone.
  SafetensorsFile f;
  f.tensors_.reserve(sax.entries.size());
  for (RawEntry& e : sax.entries) {
    const std::string t = "tensor " + msg_quote(e.name);
    if (!e.dtype) throw bad(t + ": missing key \"dtype\"");
    if (!e.has_shape) throw bad(t + ": missing key \"shape\"");
    if (!e.has_offsets) throw bad(t + ": missing key \"data_offsets\"");
    const std::uint64_t b = e.offsets[0], en = e.offsets[1];
    if (b > en)
      throw bad(t + ": data_offsets " + offsets_str(b, en) + " run backwards (begin > end)");
    // numel * size with checked multiplication; a zero dim anywhere makes it 0
    // whatever the other dims are (as in the Rust reader).
    std::optional<std::uint64_t> need = st_dtype_size(*e.dtype);
    if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) need = 0;
    for (std::int64_t d : e.shape)
      if (need && *need) need = mul_u64(*need, static_cast<std::uint64_t>(d));
    if (!need)
      throw bad(t + ": shape " + shape_str(e.shape) + " of " + st_dtype_name(*e.dtype) +
                " has more bytes than fit in 64 bits");
    if (en - b != *need)
      throw bad(t + ": data_offsets " + offsets_str(b, en) + " hold " + std::to_string(en - b) +
                " bytes but " + st_dtype_name(*e.dtype) + " " + shape_str(e.shape) + " needs " +
                std::to_string(*need));
    f.tensors_.push_back(StTensorInfo{std::move(e.name), *e.dtype, std::move(e.shape), b, en});
  }
  sax.entries.clear();

  // All together: sorted by offsets the tensors must tile the data section.
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const StTensorInfo& a, const StTensorInfo& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  const std::uint64_t data_len = size - 8 - n;
  std::uint64_t expected = 0;
  const StTensorInfo* prev = nullptr;
  for (const StTensorInfo& t : f.tensors_) {
    if (t.begin > expected) {
      if (!prev)
        throw bad("hole in the data section: the first tensor " + msg_quote(t.name) + " begins at data offset " +
                  std::to_string(t.begin) + ", not 0");
      throw bad("hole in the data section: bytes " + offsets_str(expected, t.begin) +
                " between tensor " + msg_quote(prev->name) + " and tensor " + msg_quote(t.name) +
                " belong to no tensor");
    }
    if (t.begin < expected)
      throw bad("tensor " + msg_quote(t.name) + " data_offsets " + offsets_str(t.begin, t.end) +
                " overlap tensor " + msg_quote(prev->name) + " data_offsets " + offsets_str(prev->begin, prev->end));
    expected = t.end;
    prev = &t;
  }
  if (expected > data_len)
    throw bad("tensor " + msg_quote(prev->name) + " ends at data offset " + std::to_string(expected) +
              " but the data section holds only " + std::to_string(data_len) + " bytes (file truncated?)");
  if (expected < data_len) {
    const std::uint64_t k = data_len - expected;
    const std::string extra = std::to_string(k) + (k == 1 ? " trailing byte after " : " trailing bytes after ");
    if (!prev) throw bad(extra + "the header, which lists no tensors");
    throw bad(extra + "the last tensor " + msg_quote(prev->name) + " (which ends at data offset " +
              std::to_string(expected) + ")");
  }

  f.index_.reserve(f.tensors_.size());
  for (std::size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  f.metadata_ = std::move(sax.metadata);
  f.header_size_ = n;
  f.file_size_ = size;
  f.header_only_ = header_only;
  f.source_ = src;
  f.buffer_ = std::move(buffer);
  return f;
}

const StTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const StTensorInfo& SafetensorsFile::at(const std::string& name) const {
  if (const StTensorInfo* t = find(name)) return *t;
  throw FormatError(source_ + ": no tensor named " + msg_quote(name) + " (the file has " +
                    std::to_string(tensors_.size()) + " tensors)");
}

const std::uint8_t* SafetensorsFile::data(const StTensorInfo& t) const {
  if (header_only_)
    throw ValueError(source_ + ": tensor " + msg_quote(t.name) +
                     ": the file was opened with open_header, which reads no tensor data");
  // Only infos of this file are valid here; check rather than trust.
  if (t.begin > t.end || t.end > file_size_ - 8 - header_size_)
    throw ValueError(source_ + ": tensor " + msg_quote(t.name) + " with data_offsets " + offsets_str(t.begin, t.end) +
                     " does not belong to this file");
  return buffer_->data() + 8 + header_size_ + t.begin;
}

}  // namespace qkv::io
