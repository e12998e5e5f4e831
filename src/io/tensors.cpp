#include "qkv/io/tensors.h"

#include <cstring>
#include <optional>

#include "qkv/core/memory.h"
#include "qkv/io/mapped_file.h"

namespace qkv::io {

namespace {

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3FF;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

StDType to_st(DType dt) {
  switch (dt) {
    case DType::F32: return StDType::F32;
    case DType::F64: return StDType::F64;
    case DType::I64: return StDType::I64;
    case DType::Bool: return StDType::BOOL;
  }
  return StDType::F32;
}

}  // namespace

Tensor view_tensor(const SafetensorsFile& f, const StTensorInfo& info) {
  std::optional<DType> dt;
  switch (info.dtype) {
    case StDType::F32: dt = DType::F32; break;
    case StDType::F64: dt = DType::F64; break;
    case StDType::I64: dt = DType::I64; break;
    default: break;
  }
  const std::shared_ptr<const MappedFile> map = f.mapping();
  const std::uint8_t* src = f.data(info);
  if (!dt || !map || !map->is_mapped() || info.numel() == 0 ||
      reinterpret_cast<std::uintptr_t>(src) % dtype_size(*dt) != 0)
    return to_tensor(f, info);
  // The mapping is private and writable (copy-on-write), so the view may be written.
  return Tensor::from_external(const_cast<std::uint8_t*>(src), info.shape, *dt, map);
}

Tensor to_tensor(const SafetensorsFile& f, const StTensorInfo& info) {
  const std::uint8_t* src = f.data(info);
  const std::int64_t n = info.numel();
  auto copy_as = [&](DType dt) {
    Tensor t = Tensor::empty(info.shape, dt);
    if (n) std::memcpy(t.raw_data(), src, static_cast<std::size_t>(info.nbytes()));
    return t;
  };
  switch (info.dtype) {
    case StDType::F32: return copy_as(DType::F32);
    case StDType::F64: return copy_as(DType::F64);
    case StDType::I64: return copy_as(DType::I64);
    case StDType::BOOL: {
      Tensor t = Tensor::empty(info.shape, DType::Bool);
      bool* d = t.data<bool>();
      for (std::int64_t i = 0; i < n; ++i) {
        if (src[i] > 1)
          throw FormatError(f.source() + ": tensor '" + info.name + "' is BOOL but holds byte " +
                            std::to_string(src[i]) + " at element " + std::to_string(i));
        d[i] = src[i] != 0;
      }
      return t;
    }
    case StDType::F16:
    case StDType::BF16: {
      Tensor t = Tensor::empty(info.shape, DType::F32);
      float* d = t.data<float>();
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        if (info.dtype == StDType::F16) {
          d[i] = half_to_float(h);
        } else {
          const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
          std::memcpy(&d[i], &bits, 4);
        }
      }
      return t;
    }
    default:
      throw FormatError(f.source() + ": tensor '" + info.name + "' has dtype " + st_dtype_name(info.dtype) +
                        ", which qkv does not load (supported: F32, F64, F16, BF16, I64, BOOL)");
  }
}

const Tensor& LoadedTensors::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw FormatError(source + ": no tensor named '" + name + "'");
}

bool LoadedTensors::contains(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

static LoadedTensors load_safetensors_from(const SafetensorsFile& f, const std::string& path);

LoadedTensors load_safetensors(const std::string& path) { return load_safetensors_from(SafetensorsFile::open(path), path); }

LoadedTensors load_safetensors_bytes(std::vector<std::uint8_t> bytes, const std::string& source) {
  return load_safetensors_from(SafetensorsFile::parse(std::move(bytes), source), source);
}

static LoadedTensors load_safetensors_from(const SafetensorsFile& f, const std::string& path) {
  MemoryEstimate need;  // the loaded tensors (16-bit floats become float32) beside the file's bytes
  for (const auto& info : f.tensors())
    need.add_bytes(info.dtype == StDType::F16 || info.dtype == StDType::BF16 ? 2 * info.nbytes() : info.nbytes());
  need.check(path + ": loading its " + std::to_string(f.tensors().size()) + " tensors");
  LoadedTensors out;
  out.source = path;
  out.metadata = f.metadata();
  // Float32 (and F64, I64) tensors view the mapped file, copy-on-write: nothing is copied.
  for (const auto& info : f.tensors()) out.tensors.emplace_back(info.name, view_tensor(f, info));
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> keep;  // contiguous copies must outlive the write
  std::vector<StTensorView> views;
  for (const auto& [n, t] : tensors) {
    if (!t.defined()) throw ValueError("save_safetensors: tensor '" + n + "' is undefined");
    Tensor c = t.detach().contiguous();
    keep.push_back(c);
    views.push_back(StTensorView{n, to_st(c.dtype()), c.shape(), c.numel() ? c.raw_data() : nullptr,
                                 static_cast<std::uint64_t>(c.numel()) * dtype_size(c.dtype())});
  }
  write_safetensors(path, views, metadata);
}

}  // namespace qkv::io
