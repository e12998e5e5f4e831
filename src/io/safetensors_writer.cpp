// Atomic safetensors writer.
//
// The header is compact JSON in exactly the form the Rust `safetensors`
// crate (behind PyTorch's `safetensors` package) writes:
//   {"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}
// followed by spaces up to a multiple of 8, strings escaped as serde_json
// escapes them (\" \\ \b \f \n \r \t, other control characters as \u00xx,
// everything else raw UTF-8).
//
// Durability: temp file in the same directory -> write -> fsync(file) ->
// rename over the target -> fsync(directory). The rename is the commit point:
// before it the target is untouched, after it the target is the new file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

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

std::uint64_t mix64(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Owns the temp file until commit(): closes and unlinks it on every failure path.
class TempFile {
 public:
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!committed && !path.empty()) ::unlink(path.c_str());
  }
  int fd = -1;
  std::string path;
  bool committed = false;
};

WritePointHook g_write_point_hook = nullptr;

}  // namespace

// The fault-injection hook of qkv/io/files.h lives here, in the lowest library that
// writes files (qkv_safetensors; write_file_atomic in qkv uses it too).
void set_write_point_hook(WritePointHook hook) { g_write_point_hook = hook; }

void write_point(const char* point) {
  if (g_write_point_hook) g_write_point_hook(point);
}

void write_safetensors(const std::string& path, const std::vector<StTensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string prefix = path + ": cannot write safetensors file: ";
  auto fail = [&](const std::string& what) -> IOError { return IOError(prefix + what); };
  auto sys_fail = [&](const std::string& what, int err) -> IOError {
    return IOError(prefix + what + ": " + std::strerror(err));
  };

  if (path.empty()) throw IOError("write_safetensors: empty path");
  if (path.back() == '/') throw fail("the path names a directory");

  // ---- validate everything before touching the file system ----
  std::unordered_set<std::string_view> names;
  std::uint64_t total = 0;
  std::vector<std::uint64_t> begins;
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
    if (t.nbytes != need)
      throw fail(tn + ": nbytes is " + std::to_string(t.nbytes) + " but " + st_dtype_name(t.dtype) + " " +
                 shape_str(t.shape) + " needs " + std::to_string(need));
    if (need > 0 && t.data == nullptr) throw fail(tn + ": data is null");
    if (total > std::numeric_limits<std::uint64_t>::max() - need)
      throw fail("total tensor bytes overflow 64 bits");
    begins.push_back(total);
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
    buf += std::to_string(begins[i] + t.nbytes);
    buf += "]}";
  }
  buf += '}';
  while (buf.size() % 8 != 0) buf += ' ';
  const std::uint64_t n = buf.size() - 8;
  if (n > detail::kMaxHeaderSize)
    throw fail("header would be " + std::to_string(n) + " bytes, over the format's limit of " +
               std::to_string(detail::kMaxHeaderSize));
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((n >> (8 * i)) & 0xFF);

  // ---- temp file next to the target ----
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  static std::atomic<std::uint64_t> counter{0};
  TempFile tmp;
  for (int attempt = 0; tmp.fd < 0; ++attempt) {
    const std::uint64_t r =
        mix64(static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
              mix64(counter.fetch_add(1) + (static_cast<std::uint64_t>(::getpid()) << 32)));
    char suffix[48];
    std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%08llx", static_cast<long>(::getpid()),
                  static_cast<unsigned long long>(r & 0xFFFFFFFFull));
    const std::string candidate = path + suffix;
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      tmp.fd = fd;
      tmp.path = candidate;
    } else if (errno != EEXIST || attempt >= 100) {
      throw sys_fail("cannot create temp file " + msg_quote(candidate), errno);
    }
  }

  // ---- write, fsync, close ----
  auto write_all = [&](const void* data, std::uint64_t len) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    while (len > 0) {
      const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(len, 1u << 30));
      const ssize_t w = ::write(tmp.fd, p, chunk);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw sys_fail("write to temp file " + msg_quote(tmp.path) + " failed", errno);
      }
      if (w == 0) throw sys_fail("write to temp file " + msg_quote(tmp.path) + " made no progress", ENOSPC);
      p += w;
      len -= static_cast<std::uint64_t>(w);
    }
  };
  write_point("safetensors: temp created");
  write_all(buf.data(), buf.size());
  write_point("safetensors: header written");
  for (const StTensorView& t : tensors) {
    write_all(t.data, t.nbytes);
    write_point("safetensors: tensor written");
  }
  while (::fsync(tmp.fd) != 0) {
    if (errno != EINTR) throw sys_fail("fsync of temp file " + msg_quote(tmp.path) + " failed", errno);
  }
  write_point("safetensors: fsynced");
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) throw sys_fail("closing temp file " + msg_quote(tmp.path) + " failed", errno);
  write_point("safetensors: closed");

  // ---- commit: rename, then make the rename durable ----
  if (::rename(tmp.path.c_str(), path.c_str()) != 0)
    throw sys_fail("renaming temp file " + msg_quote(tmp.path) + " over it failed", errno);
  tmp.committed = true;
  write_point("safetensors: renamed");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw sys_fail("file written, but opening its directory to fsync it failed", errno);
  int rc;
  while ((rc = ::fsync(dfd)) != 0 && errno == EINTR) {
  }
  const int err = errno;
  ::close(dfd);
  // Some file systems cannot fsync a directory (EINVAL): nothing more to do there.
  if (rc != 0 && err != EINVAL) throw sys_fail("file written, but fsync of its directory failed", err);
  write_point("safetensors: dir fsynced");
}

}  // namespace qkv::io
