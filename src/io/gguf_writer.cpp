// GGUF v3 writer (io/gguf_writer.h): the header, metadata and tensor infos are encoded in
// memory (validated as they go), then written with the tensor data through io::AtomicFile.
#include "qkv/io/gguf_writer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "safetensors_util.h"

namespace qkv::io {

using detail::msg_quote;

namespace {

constexpr std::size_t kMaxTensorName = 63;  // llama.cpp's GGML_MAX_NAME (64) less the NUL

bool is_int_type(GGUFType t) {
  switch (t) {
    case GGUFType::U8: case GGUFType::I8: case GGUFType::U16: case GGUFType::I16:
    case GGUFType::U32: case GGUFType::I32: case GGUFType::U64: case GGUFType::I64: case GGUFType::BOOL:
      return true;
    default:
      return false;
  }
}

// The bits of integer v as type t (two's complement, zero-extended), or ValueError if it does
// not fit.
std::uint64_t int_bits(GGUFType t, std::int64_t v, const std::string& what) {
  std::int64_t lo = 0, hi = 0;
  switch (t) {
    case GGUFType::U8: hi = 0xFF; break;
    case GGUFType::I8: lo = -128; hi = 127; break;
    case GGUFType::U16: hi = 0xFFFF; break;
    case GGUFType::I16: lo = -32768; hi = 32767; break;
    case GGUFType::U32: hi = 0xFFFFFFFFll; break;
    case GGUFType::I32: lo = std::numeric_limits<std::int32_t>::min(); hi = std::numeric_limits<std::int32_t>::max(); break;
    case GGUFType::U64: hi = std::numeric_limits<std::int64_t>::max(); break;
    case GGUFType::I64: lo = std::numeric_limits<std::int64_t>::min(); hi = std::numeric_limits<std::int64_t>::max(); break;
    case GGUFType::BOOL: hi = 1; break;
    default: throw ValueError(what + ": " + gguf_type_name(t) + " is not an integer type");
  }
  if (v < lo || v > hi)
    throw ValueError(what + ": " + std::to_string(v) + " does not fit in " + gguf_type_name(t));
  const std::size_t size = gguf_type_size(t);
  const auto u = static_cast<std::uint64_t>(v);
  return size == 8 ? u : u & ((std::uint64_t{1} << (8 * size)) - 1);
}

std::uint64_t float_bits(GGUFType t, double v) {
  if (t == GGUFType::F32) {
    const float f = static_cast<float>(v);
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
  std::uint64_t b;
  std::memcpy(&b, &v, 8);
  return b;
}

}  // namespace

// ------------------------------------------------------------- GGUFMeta ----

// Encodes values and checks what a value cannot check alone (nesting, UTF-8).
class GGUFEncoder {
 public:
  static GGUFMeta scalar(GGUFType t, std::uint64_t bits) {
    GGUFMeta m;
    m.type_ = t;
    m.bits_.push_back(bits);
    return m;
  }
  static GGUFMeta array(GGUFType elem) {
    GGUFMeta m;
    m.type_ = GGUFType::ARRAY;
    m.elem_ = elem;
    return m;
  }
  static const std::vector<std::uint64_t>& bits(const GGUFMeta& m) { return m.bits_; }

  explicit GGUFEncoder(std::string& out) : out_(out) {}
  void le(std::uint64_t v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xFF);
  }
  void str(std::string_view s, const std::string& what) {
    if (!detail::utf8_valid(s)) throw ValueError(what + " is not valid UTF-8");
    le(s.size(), 8);
    out_ += s;
  }
  // The value's type, then its body.
  void typed(const GGUFMeta& m, const std::string& what) {
    le(static_cast<std::uint32_t>(m.type_), 4);
    body(m, what, 0);
  }

 private:
  void body(const GGUFMeta& m, const std::string& what, int depth) {
    if (m.type_ == GGUFType::STRING) return str(m.strings_.at(0), what);
    if (m.type_ != GGUFType::ARRAY) return le(m.bits_.at(0), gguf_type_size(m.type_));
    if (depth + 1 > kGGUFMaxArrayDepth)
      throw ValueError(what + ": arrays nested more than " + std::to_string(kGGUFMaxArrayDepth) + " deep");
    le(static_cast<std::uint32_t>(m.elem_), 4);
    le(m.size(), 8);
    if (m.elem_ == GGUFType::STRING) {
      for (std::size_t i = 0; i < m.strings_.size(); ++i) str(m.strings_[i], what + ": element " + std::to_string(i));
    } else if (m.elem_ == GGUFType::ARRAY) {
      for (std::size_t i = 0; i < m.arrays_.size(); ++i) {
        // An element of an array of arrays is an array without its own type id.
        body(m.arrays_[i], what + ": element " + std::to_string(i), depth + 1);
      }
    } else {
      const std::size_t n = gguf_type_size(m.elem_);
      for (std::uint64_t b : m.bits_) le(b, n);
    }
  }
  std::string& out_;
};

namespace {
GGUFMeta scalar_of(GGUFType t, std::uint64_t bits) { return GGUFEncoder::scalar(t, bits); }
}  // namespace

GGUFMeta GGUFMeta::u8(std::uint8_t v) { return scalar_of(GGUFType::U8, v); }
GGUFMeta GGUFMeta::i8(std::int8_t v) { return scalar_of(GGUFType::I8, static_cast<std::uint8_t>(v)); }
GGUFMeta GGUFMeta::u16(std::uint16_t v) { return scalar_of(GGUFType::U16, v); }
GGUFMeta GGUFMeta::i16(std::int16_t v) { return scalar_of(GGUFType::I16, static_cast<std::uint16_t>(v)); }
GGUFMeta GGUFMeta::u32(std::uint32_t v) { return scalar_of(GGUFType::U32, v); }
GGUFMeta GGUFMeta::i32(std::int32_t v) { return scalar_of(GGUFType::I32, static_cast<std::uint32_t>(v)); }
GGUFMeta GGUFMeta::u64(std::uint64_t v) { return scalar_of(GGUFType::U64, v); }
GGUFMeta GGUFMeta::i64(std::int64_t v) { return scalar_of(GGUFType::I64, static_cast<std::uint64_t>(v)); }
GGUFMeta GGUFMeta::f32(float v) { return scalar_of(GGUFType::F32, float_bits(GGUFType::F32, v)); }
GGUFMeta GGUFMeta::f64(double v) { return scalar_of(GGUFType::F64, float_bits(GGUFType::F64, v)); }
GGUFMeta GGUFMeta::boolean(bool v) { return scalar_of(GGUFType::BOOL, v ? 1 : 0); }
GGUFMeta GGUFMeta::string(std::string v) {
  GGUFMeta m;
  m.type_ = GGUFType::STRING;
  m.strings_.push_back(std::move(v));
  return m;
}

GGUFMeta GGUFMeta::int_array(GGUFType elem, const std::vector<std::int64_t>& values) {
  if (!is_int_type(elem)) throw ValueError("GGUFMeta::int_array: " + gguf_type_name(elem) + " is not an integer type");
  GGUFMeta m = GGUFEncoder::array(elem);
  m.bits_.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    m.bits_.push_back(int_bits(elem, values[i], "GGUFMeta::int_array: element " + std::to_string(i)));
  return m;
}

GGUFMeta GGUFMeta::float_array(GGUFType elem, const std::vector<double>& values) {
  if (elem != GGUFType::F32 && elem != GGUFType::F64)
    throw ValueError("GGUFMeta::float_array: " + gguf_type_name(elem) + " is not f32 or f64");
  GGUFMeta m = GGUFEncoder::array(elem);
  m.bits_.reserve(values.size());
  for (double v : values) m.bits_.push_back(float_bits(elem, v));
  return m;
}

GGUFMeta GGUFMeta::string_array(std::vector<std::string> values) {
  GGUFMeta m = GGUFEncoder::array(GGUFType::STRING);
  m.strings_ = std::move(values);
  return m;
}

GGUFMeta GGUFMeta::array_of_arrays(std::vector<GGUFMeta> arrays) {
  for (std::size_t i = 0; i < arrays.size(); ++i)
    if (arrays[i].type_ != GGUFType::ARRAY)
      throw ValueError("GGUFMeta::array_of_arrays: element " + std::to_string(i) + " is a " +
                       gguf_type_name(arrays[i].type_) + ", not an array");
  GGUFMeta m = GGUFEncoder::array(GGUFType::ARRAY);
  m.arrays_ = std::move(arrays);
  return m;
}

GGUFMeta GGUFMeta::from(const GGUFValue& v) {
  if (v.type() == GGUFType::STRING) return string(std::string(*v.as_string()));
  if (!v.is_array()) {
    std::uint64_t bits = 0;
    if (v.type() == GGUFType::BOOL) bits = *v.as_bool();
    else if (v.is_float()) bits = float_bits(v.type(), *v.as_float());
    else if (v.type() == GGUFType::U64) bits = *v.as_uint();
    else bits = int_bits(v.type(), *v.as_int(), "GGUFMeta::from");
    return scalar_of(v.type(), bits);
  }
  GGUFMeta m = GGUFEncoder::array(v.element_type());
  if (const auto* s = v.strings()) {
    m.strings_.assign(s->begin(), s->end());
  } else if (v.element_type() == GGUFType::ARRAY) {
    for (std::uint64_t i = 0; i < v.size(); ++i) m.arrays_.push_back(from(*v.array_at(i)));
  } else {
    const std::size_t n = gguf_type_size(v.element_type());
    const std::uint8_t* p = v.raw_elements();
    m.bits_.resize(static_cast<std::size_t>(v.size()));
    for (std::size_t i = 0; i < m.bits_.size(); ++i) {
      std::uint64_t b = 0;
      std::memcpy(&b, p + i * n, n);  // little-endian host
      m.bits_[i] = b;
    }
  }
  return m;
}

std::uint64_t GGUFMeta::size() const {
  if (type_ != GGUFType::ARRAY) return 0;
  if (elem_ == GGUFType::STRING) return strings_.size();
  if (elem_ == GGUFType::ARRAY) return arrays_.size();
  return bits_.size();
}

GGUFMetadata metadata_of(const GGUFFile& f) {
  GGUFMetadata out;
  out.reserve(f.metadata().size());
  for (const GGUFKeyValue& kv : f.metadata()) out.emplace_back(std::string(kv.key), GGUFMeta::from(kv.value));
  return out;
}

// --------------------------------------------------------------- writer ----

void write_gguf(const std::string& path, const GGUFMetadata& metadata, const std::vector<GGUFTensorData>& tensors) {
  const std::string prefix = path + ": cannot write GGUF file: ";
  auto fail = [&](const std::string& what) -> IOError { return IOError(prefix + what); };
  if (path.empty()) throw IOError("write_gguf: empty path");
  if (path.back() == '/') throw fail("the path names a directory");

  // ---- alignment ----
  std::uint64_t align = kGGUFDefaultAlignment;
  for (const auto& [key, m] : metadata) {
    if (key != "general.alignment") continue;
    if (m.type() != GGUFType::U32) throw fail("metadata key 'general.alignment' must be a u32");
    align = GGUFEncoder::bits(m).at(0);
    if (align == 0 || (align & (align - 1)) != 0 || align > kGGUFMaxAlignment)
      throw fail("metadata key 'general.alignment' is " + std::to_string(align) +
                 ", expected a power of two from 1 to " + std::to_string(kGGUFMaxAlignment));
  }
  auto pad = [&](std::uint64_t x) { return (align - x % align) % align; };

  // ---- header, metadata, tensor infos (validated as they are encoded) ----
  std::string head;
  GGUFEncoder enc(head);
  head += "GGUF";
  enc.le(3, 4);
  enc.le(tensors.size(), 8);
  enc.le(metadata.size(), 8);
  std::unordered_set<std::string_view> seen;
  try {
    for (const auto& [key, m] : metadata) {
      const std::string item = "metadata key " + msg_quote(key);
      if (!seen.insert(key).second) throw ValueError("duplicate " + item);
      enc.str(key, item);
      enc.typed(m, item);
    }
  } catch (const ValueError& e) {
    throw fail(e.what());
  }
  seen.clear();
  std::uint64_t offset = 0;
  for (const GGUFTensorData& t : tensors) {
    const std::string item = "tensor " + msg_quote(t.name);
    if (!seen.insert(t.name).second) throw fail("duplicate tensor name " + msg_quote(t.name));
    if (t.name.size() > kMaxTensorName)
      throw fail(item + ": the name is " + std::to_string(t.name.size()) + " bytes; llama.cpp allows at most " +
                 std::to_string(kMaxTensorName));
    if (t.dims.size() > static_cast<std::size_t>(kGGUFMaxDims))
      throw fail(item + " has " + std::to_string(t.dims.size()) + " dims; GGUF allows at most " +
                 std::to_string(kGGUFMaxDims));
    // Any GGML type's blocks (the bytes are written as given, computed with or not).
    const std::optional<kernels::GgmlBlock> tr = kernels::ggml_type_block(static_cast<std::uint32_t>(t.type));
    if (!tr) throw fail(item + ": unknown type id " + std::to_string(static_cast<std::uint32_t>(t.type)));
    std::uint64_t numel = 1;
    bool overflow = false, empty = false;
    for (std::int64_t d : t.dims) {
      if (d < 0) throw fail(item + ": dims " + shape_str(t.dims) + " have a negative dim");
      const auto u = static_cast<std::uint64_t>(d);
      if (u == 0) empty = true;
      else if (numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / u) overflow = true;
      else numel *= u;
    }
    if (empty) numel = 0;
    if (overflow && !empty) throw fail(item + ": dims " + shape_str(t.dims) + " hold more elements than fit in int64");
    const std::int64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % tr->block != 0)
      throw fail(item + ": row length " + std::to_string(row) + " is not a multiple of " + tr->name + "'s block of " +
                 std::to_string(tr->block));
    const std::uint64_t need = numel / static_cast<std::uint64_t>(tr->block) * static_cast<std::uint64_t>(tr->block_bytes);
    if (t.nbytes != need)
      throw fail(item + ": nbytes is " + std::to_string(t.nbytes) + " but " + tr->name + " dims " + shape_str(t.dims) +
                 " need " + std::to_string(need));
    if (need > 0 && t.data == nullptr) throw fail(item + ": data is null");
    try {
      enc.str(t.name, item + ": the name");
    } catch (const ValueError& e) {
      throw fail(e.what());
    }
    enc.le(t.dims.size(), 4);
    for (std::int64_t d : t.dims) enc.le(static_cast<std::uint64_t>(d), 8);
    enc.le(static_cast<std::uint32_t>(t.type), 4);
    enc.le(offset, 8);
    offset += need + pad(need);
  }
  head.append(static_cast<std::size_t>(pad(head.size())), '\0');

  // ---- the file ----
  AtomicFile out(path, "GGUF file", "gguf");
  out.write(head.data(), head.size());
  write_point("gguf: header written");
  for (const GGUFTensorData& t : tensors) {
    out.write(t.data, t.nbytes);
    out.write_zeros(pad(t.nbytes));
    write_point("gguf: tensor written");
  }
  out.commit();
}

}  // namespace qkv::io
