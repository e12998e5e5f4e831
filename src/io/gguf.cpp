// Strict GGUF reader (io/gguf.h; REFERENCES.md section 6).
//
// Shape of the work:
//   1. a cursor walks the header, the metadata and the tensor infos; every read is checked
//      against the bytes left in the file, and every count against the least number of bytes
//      its elements take, before anything is allocated for it. In header-only mode the cursor
//      sees only a prefix of the file: a read past it (but inside the file) asks the caller
//      for a longer prefix (NeedMore) and the parse starts over;
//   2. each tensor info alone: dims, element count and byte size without overflow, a GGML type
//      (any: those qkv does not compute with are refused only when their data is asked for), a
//      row length that is a whole number of its blocks, an aligned offset;
//   3. all together: sorted by offset the tensors must tile the data section (each begins
//      at the previous end rounded up to the alignment, the first at 0) and the file must
//      end between the last tensor's end and that end padded.
#include "qkv/io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "qkv/core/error.h"
#include "safetensors_util.h"

namespace qkv::io {

using detail::msg_quote;

namespace {

constexpr std::uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};

// Thrown by the cursor in header-only mode: the parse needs the first `bytes` bytes.
struct NeedMore {
  std::uint64_t bytes;
};

std::string plural(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) {
  const std::uint64_t r = x % a;
  return r == 0 ? x : x + (a - r);  // callers keep x far from 2^64
}

// The least bytes one element of type t takes in the file.
std::uint64_t min_element_bytes(GGUFType t) {
  if (t == GGUFType::STRING) return 8;
  if (t == GGUFType::ARRAY) return 12;
  return gguf_type_size(t);
}

// Every GGML type's name, for the message of an id that is none of them.
std::string known_types() {
  std::string s;
  for (std::uint32_t id = 0; id < 256; ++id)
    if (auto tr = kernels::ggml_type_block(id)) s += (s.empty() ? "" : ", ") + std::string(tr->name);
  return s;
}

}  // namespace

// Walks the bytes of one file (all of it, or a prefix in header-only mode).
class GGUFParser {
 public:
  GGUFParser(const std::uint8_t* bytes, std::uint64_t avail, std::uint64_t size, const std::string& src)
      : p_(bytes), avail_(avail), size_(size), src_(src) {}

  FormatError bad(const std::string& problem) const {
    return FormatError(src_ + ": invalid GGUF file: " + problem);
  }

  void parse(GGUFFile& f) {
    header(f);
    for (std::uint64_t i = 0; i < kv_count_; ++i) key_value(f, i);
    alignment(f);
    for (std::uint64_t i = 0; i < tensor_count_; ++i) tensor_info(f, i);
    layout(f);
  }

 private:
  // ---- the cursor ----
  // `what` names the item read in a message: a string, or a callable that makes one (so the
  // hot loops over array elements build no message unless one is needed).
  template <class W>
  static std::string text(const W& what) {
    if constexpr (std::is_invocable_v<const W&>)
      return what();
    else
      return std::string(what);
  }
  std::uint64_t left() const { return size_ - pos_; }
  // Makes [pos, pos + n) readable.
  template <class W>
  void need(std::uint64_t n, const W& what) {
    if (n > left())
      throw bad(text(what) + " runs past the end of the file (needs " + std::to_string(n) + " bytes at offset " +
                std::to_string(pos_) + ", " + plural(left(), "byte remains", "bytes remain") + ")");
    if (pos_ + n > avail_) throw NeedMore{pos_ + n};
  }
  template <class W>
  const std::uint8_t* take(std::uint64_t n, const W& what) {
    need(n, what);
    const std::uint8_t* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  template <class W>
  std::uint64_t read_le(unsigned n, const W& what) {
    const std::uint8_t* at = take(n, what);
    std::uint64_t v = 0;
    for (int i = static_cast<int>(n) - 1; i >= 0; --i) v = (v << 8) | at[i];
    return v;
  }
  template <class W>
  std::uint32_t u32(const W& what) {
    return static_cast<std::uint32_t>(read_le(4, what));
  }
  template <class W>
  std::uint64_t u64(const W& what) {
    return read_le(8, what);
  }
  template <class W>
  std::string_view string(const W& what) {
    const std::uint64_t n = u64([&] { return text(what) + " (its length)"; });
    if (n > left())
      throw bad(text(what) + " has length " + std::to_string(n) + ", which runs past the end of the file (" +
                plural(left(), "byte remains", "bytes remain") + ")");
    const auto* s = reinterpret_cast<const char*>(take(n, what));
    std::size_t bad_at = 0;
    if (!detail::utf8_valid(reinterpret_cast<const unsigned char*>(s), n, &bad_at)) {
      static const char* hex = "0123456789abcdef";
      const unsigned char c = static_cast<unsigned char>(s[bad_at]);
      throw bad(text(what) + " is not valid UTF-8 (byte 0x" + hex[c >> 4] + hex[c & 15] + " at string offset " +
                std::to_string(bad_at) + ")");
    }
    return {s, static_cast<std::size_t>(n)};
  }

  // ---- header ----
  void header(GGUFFile& f) {
    if (size_ < 4) throw bad("file is " + plural(size_, "byte", "bytes") + ", shorter than the 4-byte magic");
    if (std::memcmp(take(4, "the magic"), kMagic, 4) != 0) {
      std::string shown;
      for (int i = 0; i < 4; ++i) shown += p_[i] >= 0x20 && p_[i] < 0x7F ? static_cast<char>(p_[i]) : '.';
      throw bad("bad magic '" + shown + "' (a GGUF file starts with 'GGUF')");
    }
    f.version_ = u32("the version");
    if (f.version_ == 1)
      throw bad("GGUF version 1 is not supported (its counts were 32-bit; qkv reads versions 2 and 3)");
    if (f.version_ != 2 && f.version_ != 3) {
      const bool swapped = (f.version_ & 0xFFFF) == 0;
      throw bad("unsupported GGUF version " + std::to_string(f.version_) + " (qkv reads versions 2 and 3" +
                (swapped ? "; this looks like a big-endian file" : "") + ")");
    }
    tensor_count_ = u64("the tensor count");
    kv_count_ = u64("the metadata count");
    // Each metadata entry takes at least 13 bytes (key length, type, one byte of value) and
    // each tensor info 24 (name length, n_dims, type, offset).
    if (kv_count_ > left() / 13)
      throw bad("metadata count " + std::to_string(kv_count_) + " is impossible: " +
                plural(left(), "byte remains", "bytes remain") + " and each entry takes at least 13");
    if (tensor_count_ > left() / 24)
      throw bad("tensor count " + std::to_string(tensor_count_) + " is impossible: " +
                plural(left(), "byte remains", "bytes remain") + " and each tensor info takes at least 24");
    if (kv_count_ * 13 + tensor_count_ * 24 > left())
      throw bad(std::to_string(kv_count_) + " metadata entries and " + std::to_string(tensor_count_) +
                " tensor infos cannot fit in the " + plural(left(), "byte", "bytes") + " left");
  }

  // ---- metadata ----
  void key_value(GGUFFile& f, std::uint64_t i) {
    const std::string entry = "metadata entry " + std::to_string(i) + " of " + std::to_string(kv_count_);
    const std::string_view key = string(entry + ": the key");
    const std::string item = "metadata key " + msg_quote(key);
    const std::uint32_t type = u32(item + ": the value type");
    GGUFValue v = value(static_cast<GGUFType>(type), item, 0);
    auto [it, fresh] = f.kv_index_.emplace(key, f.kv_.size());
    if (!fresh)
      throw bad("duplicate " + item + " (entries " + std::to_string(it->second) + " and " + std::to_string(i) + ")");
    f.kv_.push_back({key, std::move(v)});
  }

  void check_type(GGUFType t, const std::string& item) const {
    if (static_cast<std::uint32_t>(t) > static_cast<std::uint32_t>(GGUFType::F64))
      throw bad(item + ": unknown value type " + std::to_string(static_cast<std::uint32_t>(t)) +
                " (GGUF value types are 0 to 12)");
  }

  GGUFValue value(GGUFType t, const std::string& item, int depth) {
    check_type(t, item);
    GGUFValue v;
    v.type_ = t;
    if (t == GGUFType::STRING) {
      v.str_ = string(item + ": the string");
    } else if (t == GGUFType::ARRAY) {
      array(v, item, depth + 1);
    } else {
      v.data_ = take(gguf_type_size(t), item + ": the " + gguf_type_name(t) + " value");
      if (t == GGUFType::BOOL && *v.data_ > 1)
        throw bad(item + ": bool value " + std::to_string(*v.data_) + " is neither 0 nor 1");
    }
    return v;
  }

  void array(GGUFValue& v, const std::string& item, int depth) {
    if (depth > kGGUFMaxArrayDepth)
      throw bad(item + ": arrays nested more than " + std::to_string(kGGUFMaxArrayDepth) + " deep");
    v.elem_ = static_cast<GGUFType>(u32(item + ": the array element type"));
    check_type(v.elem_, item + ": array element type");
    v.count_ = u64(item + ": the array length");
    const std::uint64_t each = min_element_bytes(v.elem_);
    if (v.count_ > left() / each)
      throw bad(item + ": array of " + std::to_string(v.count_) + " " + gguf_type_name(v.elem_) +
                " runs past the end of the file (needs at least " + std::to_string(each) + " bytes each, " +
                plural(left(), "byte remains", "bytes remain") + ")");
    std::uint64_t k = 0;
    const auto elem = [&] { return item + ": array element " + std::to_string(k); };
    if (v.elem_ == GGUFType::STRING) {
      // Reserve only for the elements whose bytes are in memory (each takes >= 8 of them).
      v.strings_.reserve(static_cast<std::size_t>(std::min(v.count_, (avail_ - std::min(avail_, pos_)) / 8)));
      for (; k < v.count_; ++k) v.strings_.push_back(string(elem));
    } else if (v.elem_ == GGUFType::ARRAY) {
      for (; k < v.count_; ++k) {
        v.arrays_.emplace_back();
        v.arrays_.back().type_ = GGUFType::ARRAY;
        array(v.arrays_.back(), elem(), depth + 1);
      }
    } else {
      v.data_ = take(v.count_ * each, item + ": the array elements");
      if (v.elem_ == GGUFType::BOOL)
        for (; k < v.count_; ++k)
          if (v.data_[k] > 1)
            throw bad(elem() + ": bool value " + std::to_string(v.data_[k]) +
                      " is neither 0 nor 1");
    }
  }

  void alignment(GGUFFile& f) {
    const GGUFValue* a = f.find_value("general.alignment");
    if (!a) return;
    if (a->type() != GGUFType::U32)
      throw bad("metadata key 'general.alignment' is " + a->describe() + ", expected a u32");
    const std::uint64_t n = *a->as_uint();
    if (n == 0 || (n & (n - 1)) != 0 || n > kGGUFMaxAlignment)
      throw bad("metadata key 'general.alignment' is " + std::to_string(n) + ", expected a power of two from 1 to " +
                std::to_string(kGGUFMaxAlignment));
    f.alignment_ = n;
  }

  // ---- tensor infos ----
  void tensor_info(GGUFFile& f, std::uint64_t i) {
    const std::string entry = "tensor info " + std::to_string(i) + " of " + std::to_string(tensor_count_);
    const std::string_view name = string(entry + ": the name");
    const std::string item = "tensor " + msg_quote(name);
    GGUFTensorInfo t;
    t.name = std::string(name);
    const std::uint32_t n_dims = u32(item + ": n_dims");
    if (n_dims > kGGUFMaxDims)
      throw bad(item + " has " + std::to_string(n_dims) + " dims; GGUF allows at most " +
                std::to_string(kGGUFMaxDims));
    std::uint64_t numel = 1;
    bool overflow = false;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint64_t n = u64(item + ": dim " + std::to_string(d));
      if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw bad(item + ": dim " + std::to_string(d) + " is " + std::to_string(n) + ", beyond int64");
      t.dims.push_back(static_cast<std::int64_t>(n));
      if (n != 0 && numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / n)
        overflow = true;
      numel *= n;
    }
    if (std::find(t.dims.begin(), t.dims.end(), 0) != t.dims.end()) {  // empty, whatever the other dims
      numel = 0;
      overflow = false;
    }
    t.shape.assign(t.dims.rbegin(), t.dims.rend());
    if (overflow) throw bad(item + ": dims " + shape_str(t.dims) + " hold more elements than fit in int64");
    const std::uint32_t type = u32(item + ": the type");
    // Any GGML type is laid out (and listed); whether qkv computes with it is asked at data().
    const std::optional<kernels::GgmlBlock> tr = kernels::ggml_type_block(type);
    if (!tr)
      throw bad(item + " has unknown type id " + std::to_string(type) + ", which is no GGML type qkv knows (it reads " +
                known_types() + ")");
    t.type = static_cast<kernels::QType>(type);
    if (t.row_length() % tr->block != 0)
      throw bad(item + ": row length " + std::to_string(t.row_length()) + " (dims " + shape_str(t.dims) +
                ") is not a multiple of " + tr->name + "'s block of " + std::to_string(tr->block));
    // numel / block * block_bytes, which must fit in int64 (numel < 2^63 alone does not bound it:
    // 2^62 + 1 F32 elements wrapped to 4 bytes in u64, found by fuzz_gguf).
    const std::uint64_t blocks = numel / static_cast<std::uint64_t>(tr->block);
    const std::uint64_t max_bytes = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (blocks > max_bytes / static_cast<std::uint64_t>(tr->block_bytes))
      throw bad(item + ": dims " + shape_str(t.dims) + " of type " + tr->name + " take more bytes than fit in int64");
    t.nbytes = blocks * static_cast<std::uint64_t>(tr->block_bytes);
    t.offset = u64(item + ": the offset");
    if (t.offset % f.alignment_ != 0)
      throw bad(item + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                std::to_string(f.alignment_));
    auto [it, fresh] = f.tensor_index_.emplace(name, f.tensors_.size());
    if (!fresh)
      throw bad("duplicate tensor name " + msg_quote(name) + " (tensor infos " + std::to_string(it->second) + " and " +
                std::to_string(i) + ")");
    f.tensors_.push_back(std::move(t));
  }

  // ---- the data section ----
  void layout(GGUFFile& f) {
    const std::uint64_t infos_end = pos_;
    const std::uint64_t a = f.alignment_;
    f.data_offset_ = align_up(infos_end, a);
    std::vector<const GGUFTensorInfo*> order;
    order.reserve(f.tensors_.size());
    for (const GGUFTensorInfo& t : f.tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const GGUFTensorInfo* x, const GGUFTensorInfo* y) {
      if (x->offset != y->offset) return x->offset < y->offset;
      if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes;
      return x->name < y->name;
    });
    // Even a tensor of no bytes sits in the data section: with tensors, the file must reach it
    // (an empty tensor at data offset 0 of a file cut right after the infos would point past its end).
    if (!order.empty() && f.data_offset_ > size_)
      throw bad("the data section begins at byte " + std::to_string(f.data_offset_) + " (the tensor infos end at byte " +
                std::to_string(infos_end) + ", padded to the alignment " + std::to_string(a) +
                ") but the file ends at byte " + std::to_string(size_) + ", before the data of tensor " +
                msg_quote(order.front()->name) + " (file truncated?)");
    const std::uint64_t data_len = size_ - std::min(size_, f.data_offset_);
    std::uint64_t end = 0;  // end of the previous tensor, in the data section
    const GGUFTensorInfo* prev = nullptr;
    for (const GGUFTensorInfo* t : order) {
      const std::string item = "tensor " + msg_quote(t->name);
      if (t->offset > data_len || t->nbytes > data_len - t->offset)
        throw bad(item + ": its " + std::to_string(t->nbytes) + " bytes at data offset " + std::to_string(t->offset) +
                  " run past the end of the file (the data section holds " + plural(data_len, "byte", "bytes") +
                  "; file truncated?)");
      if (prev && t->offset < end)
        throw bad(item + " (data offset " + std::to_string(t->offset) + ", " + std::to_string(t->nbytes) +
                  " bytes) overlaps tensor " + msg_quote(prev->name) + " (data offset " + std::to_string(prev->offset) +
                  ", " + std::to_string(prev->nbytes) + " bytes)");
      const std::uint64_t expected = align_up(end, a);
      if (t->offset > expected) {
        if (!prev)
          throw bad("hole in the data section: the first tensor " + msg_quote(t->name) + " begins at data offset " +
                    std::to_string(t->offset) + ", not 0");
        throw bad("hole in the data section: bytes [" + std::to_string(expected) + ", " + std::to_string(t->offset) +
                  ") between tensor " + msg_quote(prev->name) + " and tensor " + msg_quote(t->name) +
                  " belong to no tensor");
      }
      end = t->offset + t->nbytes;
      prev = t;
    }
    // The file ends after the last tensor, with or without its padding; with no tensors,
    // after the infos, with or without the padding to the data section.
    const std::uint64_t min_end = prev ? f.data_offset_ + end : infos_end;
    const std::uint64_t max_end = prev ? f.data_offset_ + align_up(end, a) : f.data_offset_;
    if (size_ > max_end) {
      const std::uint64_t k = size_ - min_end;
      const std::string extra = plural(k, "trailing byte", "trailing bytes");
      const std::string allows =
          "(padding to the alignment " + std::to_string(a) + " allows " + std::to_string(max_end - min_end) + ")";
      if (!prev) throw bad(extra + " after the tensor infos " + allows + ", and no tensor to hold them");
      throw bad(extra + " after the last tensor " + msg_quote(prev->name) + ", which ends at data offset " +
                std::to_string(end) + " " + allows);
    }
    f.file_size_ = size_;
  }

  const std::uint8_t* p_;
  std::uint64_t avail_, size_;
  const std::string& src_;
  std::uint64_t pos_ = 0;
  std::uint64_t tensor_count_ = 0, kv_count_ = 0;
};

// ------------------------------------------------------------------ open ----

GGUFFile GGUFFile::parse(std::vector<std::uint8_t> bytes, std::string source_name) {
  std::shared_ptr<const MappedFile> m = MappedFile::from_bytes(std::move(bytes), std::move(source_name));
  GGUFFile f;
  f.source_ = m->source();
  f.buffer_ = m;
  GGUFParser(m->data(), m->size(), m->size(), f.source_).parse(f);
  return f;
}

GGUFFile GGUFFile::open(const std::string& path) {
  std::shared_ptr<const MappedFile> m = MappedFile::open(path, "GGUF file");
  GGUFFile f;
  f.source_ = path;
  f.buffer_ = m;
  GGUFParser(m->data(), m->size(), m->size(), f.source_).parse(f);
  return f;
}

GGUFFile GGUFFile::open_header(const std::string& path) {
  std::uint64_t want = std::uint64_t{64} << 10;
  while (true) {
    FilePrefix head = read_file_prefix(path, want, "GGUF file");
    const std::uint64_t size = head.file_size, got = head.bytes.size();
    GGUFFile f;
    f.source_ = path;
    f.header_only_ = true;
    f.buffer_ = MappedFile::from_bytes(std::move(head.bytes), path);
    try {
      GGUFParser(f.buffer_->data(), got, size, f.source_).parse(f);
      return f;
    } catch (const NeedMore& more) {
      if (got < want) {  // the file shrank under us: what we have is all there is
        throw FormatError(path + ": invalid GGUF file: the file changed while its header was read");
      }
      want = std::max(more.bytes, want * 2);
    }
  }
}

}  // namespace qkv::io
