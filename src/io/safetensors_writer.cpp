// Atomic safetensors writer.
//
// The header is compact JSON in exactly the form the Rust `safetensors`
// crate (behind PyTorch's `safetensors` package) writes:
//   {"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}
// followed by spaces up to a multiple of 8, strings escaped as serde_json
// escapes them (\" \\ \b \f \n \r \t, other control characters as \u00xx,
// everything else raw UTF-8).
//
// Durability: io::AtomicFile (temp file in the same directory -> write ->
// fsync(file) -> rename over the target -> fsync(directory)). The rename is the
// commit point: before it the target is untouched, after it the new file.
#include <sys/statvfs.h>

#include <limits>
#include <optional>
#include <unordered_set>

#include "qkv/core/memory.h"

#include "qkv/io/files.h"
#include "qkv/io/safetensors.h"
#include "safetensors_util.h"

namespace qkv::io {

using detail::msg_quote;

namespace {

// serde_json's string escaping (see the file comment).
void append_json_string(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

}  // namespace

namespace {

// The 8-byte length and the JSON header of a file holding `tensors` (validated as
// write_safetensors documents; `with_data`: each view's nbytes and data are checked too, else
// they are ignored), and in *data_bytes the bytes of tensor data that follow it.
std::string header_bytes(const std::string& path, const std::vector<StTensorView>& tensors,
                         const std::map<std::string, std::string>& metadata, bool with_data,
                         std::uint64_t* data_bytes) {
  const std::string prefix = path + ": cannot write safetensors file: ";
  auto fail = [&](const std::string& what) -> IOError { return IOError(prefix + what); };

  if (path.empty()) throw IOError("write_safetensors: empty path");
  if (path.back() == '/') throw fail("the path names a directory");

  // ---- validate everything before touching the file system ----
  std::unordered_set<std::string_view> names;
  std::uint64_t total = 0;
  std::vector<std::uint64_t> begins, sizes;
  begins.reserve(tensors.size());
  for (const StTensorView& t : tensors) {
    const std::string tn = "tensor " + msg_quote(t.name);
    if (t.name == "__metadata__") throw fail("a tensor may not be named \"__metadata__\"");
    if (!detail::utf8_valid(t.name)) throw fail(tn + ": name is not valid UTF-8");
    if (!names.insert(t.name).second) throw fail("duplicate tensor name " + msg_quote(t.name));
    std::uint64_t need = st_dtype_size(t.dtype);  // throws ValueError on a bad enum value
    bool overflow = false;
    for (std::int64_t d : t.shape) {
      if (d < 0) throw fail(tn + ": shape " + shape_str(t.shape) + " has a negative dimension");
      if (d == 0) need = 0;  // a zero dim anywhere: 0 bytes, never an overflow
    }
    for (std::int64_t d : t.shape) {
      const auto ud = static_cast<std::uint64_t>(d);
      if (need != 0 && ud > std::numeric_limits<std::uint64_t>::max() / need) overflow = true;
      need *= ud;
    }
    if (overflow) throw fail(tn + ": shape " + shape_str(t.shape) + " has more bytes than fit in 64 bits");
    if (with_data && t.nbytes != need)
      throw fail(tn + ": nbytes is " + std::to_string(t.nbytes) + " but " + st_dtype_name(t.dtype) + " " +
                 shape_str(t.shape) + " needs " + std::to_string(need));
    if (with_data && need > 0 && t.data == nullptr) throw fail(tn + ": data is null");
    if (total > std::numeric_limits<std::uint64_t>::max() - need)
      throw fail("total tensor bytes overflow 64 bits");
    begins.push_back(total);
    sizes.push_back(need);
    total += need;
  }
  for (const auto& [k, v] : metadata) {
    if (!detail::utf8_valid(k)) throw fail("__metadata__ key " + msg_quote(k) + " is not valid UTF-8");
    if (!detail::utf8_valid(v)) throw fail("__metadata__ value for key " + msg_quote(k) + " is not valid UTF-8");
  }

  // ---- header: 8-byte length, compact JSON, spaces to a multiple of 8 ----
  std::string buf(8, '\0');
  buf += '{';
  bool first = true;
  if (!metadata.empty()) {
    buf += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) buf += ',';
      first = false;
      append_json_string(buf, k);
      buf += ':';
      append_json_string(buf, v);
    }
    buf += '}';
    first = false;
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const StTensorView& t = tensors[i];
    if (!first) buf += ',';
    first = false;
    append_json_string(buf, t.name);
    buf += ":{\"dtype\":\"";
    buf += st_dtype_name(t.dtype);
    buf += "\",\"shape\":[";
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
      if (d) buf += ',';
      buf += std::to_string(t.shape[d]);
    }
    buf += "],\"data_offsets\":[";
    buf += std::to_string(begins[i]);
    buf += ',';
    buf += std::to_string(begins[i] + sizes[i]);
    buf += "]}";
  }
  buf += '}';
  while (buf.size() % 8 != 0) buf += ' ';
  const std::uint64_t n = buf.size() - 8;
  if (n > detail::kMaxHeaderSize)
    throw fail("header would be " + std::to_string(n) + " bytes, over the format's limit of " +
               std::to_string(detail::kMaxHeaderSize));
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  *data_bytes = total;
  return buf;
}

// Bytes free for an unprivileged writer on the file system that holds `path`'s directory, or
// nullopt when it cannot tell.
std::optional<std::uint64_t> free_bytes_for(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash + 1);
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.f_bavail) * static_cast<std::uint64_t>(st.f_frsize);
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<StTensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::uint64_t data_bytes = 0;
  const std::string buf = header_bytes(path, tensors, metadata, true, &data_bytes);

  // ---- temp file next to the target, the bytes, then the commit (io/files.h) ----
  AtomicFile out(path, "safetensors file", "safetensors");
  out.write(buf.data(), buf.size());
  write_point("safetensors: header written");
  for (const StTensorView& t : tensors) {
    out.write(t.data, t.nbytes);
    write_point("safetensors: tensor written");
  }
  out.commit();
}

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path, const std::vector<StTensorView>& tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(path) {
  std::uint64_t data_bytes = 0;
  const std::string buf = header_bytes(path, tensors, metadata, false, &data_bytes);
  file_bytes_ = buf.size() + data_bytes;
  remaining_ = data_bytes;
  if (const auto free = free_bytes_for(path); free && *free < file_bytes_)
    throw IOError(path + ": cannot write safetensors file: it needs " + format_bytes(file_bytes_) + " (" +
                  std::to_string(file_bytes_) + " bytes), but its file system has " + format_bytes(*free) + " free");
  out_ = std::make_unique<AtomicFile>(path, "safetensors file", "safetensors");
  out_->write(buf.data(), buf.size());
  write_point("safetensors: header written");
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() = default;

void SafetensorsStreamWriter::write(const void* data, std::uint64_t nbytes) {
  if (nbytes > remaining_)
    throw IOError(path_ + ": cannot write safetensors file: " + std::to_string(nbytes) + " more bytes given, but only " +
                  std::to_string(remaining_) + " of the declared tensors remain");
  out_->write(data, nbytes);
  remaining_ -= nbytes;
}

void SafetensorsStreamWriter::commit() {
  if (remaining_ != 0)
    throw IOError(path_ + ": cannot write safetensors file: " + std::to_string(remaining_) +
                  " bytes of the declared tensors were never given");
  write_point("safetensors: data written");
  out_->commit();
}

}  // namespace qkv::io
