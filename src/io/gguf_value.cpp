// GGUF metadata values, tensor infos and the typed getters of io/gguf.h.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/io/gguf.h"
#include "safetensors_util.h"

namespace qkv::io {

using detail::msg_quote;

namespace {

constexpr const char* kTypeNames[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
constexpr std::size_t kTypeSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only (x86-64)
  return v;
}

}  // namespace

std::string gguf_type_name(GGUFType t) {
  const auto id = static_cast<std::uint32_t>(t);
  if (id < std::size(kTypeNames)) return kTypeNames[id];
  return "type " + std::to_string(id);
}

std::size_t gguf_type_size(GGUFType t) {
  const auto id = static_cast<std::uint32_t>(t);
  return id < std::size(kTypeSizes) ? kTypeSizes[id] : 0;
}

// ---------------------------------------------------------------- values ----

namespace {
bool integer_type(GGUFType t) {
  switch (t) {
    case GGUFType::U8: case GGUFType::I8: case GGUFType::U16: case GGUFType::I16:
    case GGUFType::U32: case GGUFType::I32: case GGUFType::U64: case GGUFType::I64:
      return true;
    default:
      return false;
  }
}
}  // namespace

bool GGUFValue::is_integer() const { return integer_type(type_); }

bool GGUFValue::is_float() const { return type_ == GGUFType::F32 || type_ == GGUFType::F64; }

std::optional<std::int64_t> GGUFValue::as_int() const {
  switch (type_) {
    case GGUFType::U8: return load<std::uint8_t>(data_);
    case GGUFType::I8: return load<std::int8_t>(data_);
    case GGUFType::U16: return load<std::uint16_t>(data_);
    case GGUFType::I16: return load<std::int16_t>(data_);
    case GGUFType::U32: return load<std::uint32_t>(data_);
    case GGUFType::I32: return load<std::int32_t>(data_);
    case GGUFType::I64: return load<std::int64_t>(data_);
    case GGUFType::U64: {
      const auto v = load<std::uint64_t>(data_);
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
      return static_cast<std::int64_t>(v);
    }
    default:
      return std::nullopt;
  }
}

std::optional<std::uint64_t> GGUFValue::as_uint() const {
  if (type_ == GGUFType::U64) return load<std::uint64_t>(data_);
  const std::optional<std::int64_t> v = as_int();
  if (!v || *v < 0) return std::nullopt;
  return static_cast<std::uint64_t>(*v);
}

std::optional<double> GGUFValue::as_float() const {
  if (type_ == GGUFType::F32) return load<float>(data_);
  if (type_ == GGUFType::F64) return load<double>(data_);
  return std::nullopt;
}

std::optional<bool> GGUFValue::as_bool() const {
  if (type_ != GGUFType::BOOL) return std::nullopt;
  return *data_ != 0;
}

std::optional<std::string_view> GGUFValue::as_string() const {
  if (type_ != GGUFType::STRING) return std::nullopt;
  return str_;
}

std::optional<GGUFValue> GGUFValue::element(std::uint64_t i) const {
  if (!is_array() || i >= count_ || elem_ == GGUFType::ARRAY) return std::nullopt;
  GGUFValue v;
  v.type_ = elem_;
  if (elem_ == GGUFType::STRING)
    v.str_ = strings_[static_cast<std::size_t>(i)];
  else
    v.data_ = data_ + i * gguf_type_size(elem_);
  return v;
}

const GGUFValue* GGUFValue::array_at(std::uint64_t i) const {
  if (!is_array() || elem_ != GGUFType::ARRAY || i >= count_) return nullptr;
  return &arrays_[static_cast<std::size_t>(i)];
}

const std::vector<std::string_view>* GGUFValue::strings() const {
  return is_array() && elem_ == GGUFType::STRING ? &strings_ : nullptr;
}

const std::uint8_t* GGUFValue::raw_elements() const {
  return is_array() && gguf_type_size(elem_) != 0 ? data_ : nullptr;
}

std::string GGUFValue::describe() const {
  switch (type_) {
    case GGUFType::STRING: return "a string " + msg_quote(str_);
    case GGUFType::ARRAY: return "an array of " + std::to_string(count_) + " " + gguf_type_name(elem_);
    case GGUFType::BOOL: return std::string("a bool ") + (*data_ ? "true" : "false");
    case GGUFType::F32:
    case GGUFType::F64: {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.9g", *as_float());
      return "an " + gguf_type_name(type_) + " " + buf;
    }
    case GGUFType::U64: return "a u64 " + std::to_string(*as_uint());
    default: {
      const std::string t = gguf_type_name(type_);
      return (t[0] == 'i' ? "an " : "a ") + t + " " + std::to_string(*as_int());
    }
  }
}

// ---------------------------------------------------------------- tensors ----

std::int64_t GGUFTensorInfo::numel() const {
  // The reader checked the product fits, or that a dim is 0 (then the others may be anything:
  // [2^62, 2^62, 0] is empty, and multiplying in order would overflow first).
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  return n;
}

std::int64_t GGUFTensorInfo::rows() const {
  const std::int64_t r = row_length();
  return r == 0 ? 0 : numel() / r;
}

// ------------------------------------------------------------ the getters ----

const GGUFValue* GGUFFile::find_value(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const GGUFValue& GGUFFile::value(std::string_view key) const {
  if (const GGUFValue* v = find_value(key)) return *v;
  throw FormatError(source_ + ": GGUF metadata has no key " + msg_quote(key));
}

void GGUFFile::wrong_type(std::string_view key, const GGUFValue& v, const char* expected) const {
  throw FormatError(source_ + ": GGUF key " + msg_quote(key) + " is " + v.describe() + ", expected " + expected);
}

std::optional<std::int64_t> GGUFFile::find_int(std::string_view key) const {
  const GGUFValue* v = find_value(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(key, *v, "an integer");
  const std::optional<std::int64_t> i = v->as_int();
  if (!i) wrong_type(key, *v, "an integer that fits in int64");
  return i;
}
std::int64_t GGUFFile::get_int(std::string_view key) const {
  value(key);
  return *find_int(key);
}

std::optional<double> GGUFFile::find_float(std::string_view key) const {
  const GGUFValue* v = find_value(key);
  if (!v) return std::nullopt;
  if (!v->is_float()) wrong_type(key, *v, "an f32 or f64");
  return v->as_float();
}
double GGUFFile::get_float(std::string_view key) const {
  value(key);
  return *find_float(key);
}

std::optional<bool> GGUFFile::find_bool(std::string_view key) const {
  const GGUFValue* v = find_value(key);
  if (!v) return std::nullopt;
  if (v->type() != GGUFType::BOOL) wrong_type(key, *v, "a bool");
  return v->as_bool();
}
bool GGUFFile::get_bool(std::string_view key) const {
  value(key);
  return *find_bool(key);
}

std::optional<std::string_view> GGUFFile::find_string(std::string_view key) const {
  const GGUFValue* v = find_value(key);
  if (!v) return std::nullopt;
  if (v->type() != GGUFType::STRING) wrong_type(key, *v, "a string");
  return v->as_string();
}
std::string_view GGUFFile::get_string(std::string_view key) const {
  value(key);
  return *find_string(key);
}

const std::vector<std::string_view>& GGUFFile::get_string_array(std::string_view key) const {
  const GGUFValue& v = value(key);
  if (!v.strings()) wrong_type(key, v, "an array of string");
  return *v.strings();
}

std::vector<std::int64_t> GGUFFile::get_int_array(std::string_view key) const {
  const GGUFValue& v = value(key);
  if (!v.is_array() || !integer_type(v.element_type())) wrong_type(key, v, "an array of integers");
  std::vector<std::int64_t> out(static_cast<std::size_t>(v.size()));
  for (std::uint64_t i = 0; i < v.size(); ++i) {
    const std::optional<std::int64_t> x = v.element(i)->as_int();
    if (!x)
      throw FormatError(source_ + ": GGUF key " + msg_quote(key) + ": element " + std::to_string(i) + " (" +
                        v.element(i)->describe() + ") does not fit in int64");
    out[static_cast<std::size_t>(i)] = *x;
  }
  return out;
}

std::vector<double> GGUFFile::get_float_array(std::string_view key) const {
  const GGUFValue& v = value(key);
  if (!v.is_array() || (v.element_type() != GGUFType::F32 && v.element_type() != GGUFType::F64))
    wrong_type(key, v, "an array of f32 or f64");
  std::vector<double> out(static_cast<std::size_t>(v.size()));
  for (std::uint64_t i = 0; i < v.size(); ++i) out[static_cast<std::size_t>(i)] = *v.element(i)->as_float();
  return out;
}

const GGUFTensorInfo* GGUFFile::find(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GGUFTensorInfo& GGUFFile::at(std::string_view name) const {
  if (const GGUFTensorInfo* t = find(name)) return *t;
  throw FormatError(source_ + ": no tensor named " + msg_quote(name) + " (the file has " +
                    std::to_string(tensors_.size()) + " tensors)");
}

const std::uint8_t* GGUFFile::data(const GGUFTensorInfo& t) const {
  if (header_only_)
    throw ValueError(source_ + ": tensor " + msg_quote(t.name) +
                     ": the file was opened with open_header, which reads no tensor data");
  // Only infos of this file are valid here; check rather than trust.
  const GGUFTensorInfo* mine = find(t.name);
  if (!mine || mine->offset != t.offset || mine->nbytes != t.nbytes)
    throw ValueError(source_ + ": tensor " + msg_quote(t.name) + " does not belong to this file");
  if (!t.computable())
    throw FormatError(source_ + ": tensor " + msg_quote(t.name) + " has type " + t.type_name() +
                      ", which qkv cannot compute with (it computes with " + kernels::computable_types_list() + ")");
  return buffer_->data() + data_offset_ + t.offset;
}

GGUFTensorView GGUFFile::view(std::string_view name) const {
  const GGUFTensorInfo& t = at(name);
  return {&t, t.type, data(t), t.nbytes};
}

bool is_gguf_file(const std::string& path) {
  const FilePrefix p = read_file_prefix(path, 4, "file");
  return p.bytes.size() == 4 && std::memcmp(p.bytes.data(), "GGUF", 4) == 0;
}

}  // namespace qkv::io
