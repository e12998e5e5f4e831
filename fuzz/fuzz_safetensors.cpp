// libFuzzer target: the strict safetensors reader (REFERENCES.md section 3) on arbitrary bytes.
// A file it accepts must be consistent (offsets contiguous from 0 to the end of the data, each
// tensor's byte count its element count times its dtype size, every name found), every tensor
// must convert to a qkv Tensor or be refused with a qkv::Error, and writing the accepted tensors
// back must give a file the reader reads as the same tensors. Anything else that escapes --
// a crash, a sanitizer report, an exception that is not a qkv::Error -- is a bug.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/io/safetensors.h"
#include "qkv/io/tensors.h"

using namespace qkv;
using namespace qkv::io;

namespace {

void check_consistent(const SafetensorsFile& f, const std::vector<std::uint8_t>& bytes) {
  QKV_FUZZ_CHECK(f.file_size() == bytes.size());
  QKV_FUZZ_CHECK(f.header_size() <= bytes.size() - 8);
  const std::uint64_t data_len = bytes.size() - 8 - f.header_size();
  std::uint64_t expected = 0;
  for (const StTensorInfo& t : f.tensors()) {
    QKV_FUZZ_CHECK(t.begin == expected);
    QKV_FUZZ_CHECK(t.begin <= t.end);
    std::uint64_t need = st_dtype_size(t.dtype);
    for (std::int64_t d : t.shape) QKV_FUZZ_CHECK(d >= 0);
    for (std::int64_t d : t.shape)
      if (d == 0) need = 0;  // empty, whatever the other dims
    for (std::int64_t d : t.shape) {
      QKV_FUZZ_CHECK(need == 0 || static_cast<std::uint64_t>(d) <= UINT64_MAX / need);  // the reader checked
      need *= static_cast<std::uint64_t>(d);
    }
    QKV_FUZZ_CHECK(t.nbytes() == need);
    QKV_FUZZ_CHECK(f.find(t.name) == &t);
    QKV_FUZZ_CHECK(std::memcmp(f.data(t), bytes.data() + 8 + f.header_size() + t.begin, t.nbytes()) == 0);
    expected = t.end;
  }
  QKV_FUZZ_CHECK(expected == data_len);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fuzz::Scratch scratch;
  std::vector<std::uint8_t> bytes(data, data + size);
  std::optional<SafetensorsFile> f;
  try {
    f.emplace(SafetensorsFile::parse(bytes, "fuzz.safetensors"));
  } catch (const Error&) {
    return 0;  // refused: fine, as long as it is a qkv::Error
  }
  check_consistent(*f, bytes);
  std::vector<StTensorView> views;
  for (const StTensorInfo& t : f->tensors()) {
    try {
      const Tensor x = to_tensor(*f, t);
      QKV_FUZZ_CHECK(x.shape() == t.shape);
    } catch (const Error&) {
    }
    views.push_back({t.name, t.dtype, t.shape, t.nbytes() ? f->data(t) : nullptr, t.nbytes()});
  }
  // Round trip: what was read writes back (names and metadata are valid UTF-8, as the reader
  // checked) and reads again as the same tensors.
  const std::string path = scratch.path("round.safetensors");
  write_safetensors(path, views, f->metadata());
  const SafetensorsFile g = SafetensorsFile::open(path);
  QKV_FUZZ_CHECK(g.tensors().size() == f->tensors().size());
  QKV_FUZZ_CHECK(g.metadata() == f->metadata());
  for (const StTensorInfo& t : f->tensors()) {
    const StTensorInfo* u = g.find(t.name);
    QKV_FUZZ_CHECK(u && u->dtype == t.dtype && u->shape == t.shape && u->nbytes() == t.nbytes());
    QKV_FUZZ_CHECK(std::memcmp(g.data(*u), f->data(t), t.nbytes()) == 0);
  }
  return 0;
}
