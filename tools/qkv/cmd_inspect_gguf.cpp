// qkv inspect FILE.gguf: the header, every metadata key (type and value; long arrays and
// strings shortened unless --full) and the tensor table (name, type, shape in PyTorch order,
// elements, bytes, offset), read header-only by qkv::io::GGUFFile::open_header. Tensors of every
// GGML type are listed; a type qkv does not compute with (IQ2_XXS, NVFP4, ...) is marked "*" (in
// --json, "computable": false).
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <ostream>

#include <nlohmann/json.hpp>

#include "cmd_inspect.h"
#include "format.h"
#include "qkv/core/error.h"
#include "qkv/io/gguf.h"
#include "qkv/models/decoder_io.h"

namespace qkv::tool {

namespace {

constexpr std::uint64_t kTextArrayItems = 5;    // array elements shown in the table
constexpr std::uint64_t kJsonArrayItems = 8;    // ... and in --json
constexpr std::size_t kTextStringBytes = 100;   // string bytes shown in the table

// A string for one table line: quoted, control characters escaped, cut after `limit` bytes
// (at a character boundary) unless limit is 0.
std::string quoted(std::string_view s, std::size_t limit, bool* cut) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  std::size_t i = 0;
  for (; i < s.size() && (limit == 0 || i < limit); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += "\\x";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) out += s[i++];  // finish a character
  *cut = i < s.size();
  return out + (*cut ? "...\"" : "\"");
}

std::string number(const io::GGUFValue& v) {
  if (const auto x = v.as_float()) {
    char buf[40];
    std::snprintf(buf, sizeof buf, v.type() == io::GGUFType::F32 ? "%.9g" : "%.17g", *x);
    return buf;
  }
  if (v.type() == io::GGUFType::U64) return std::to_string(*v.as_uint());
  return std::to_string(*v.as_int());
}

// The value as one line of text; *note gets "(N bytes; --full shows all)" when a string was cut.
std::string value_text(const io::GGUFValue& v, bool full, std::string* note) {
  if (!v.is_array()) {
    if (const auto s = v.as_string()) {
      bool cut = false;
      std::string q = quoted(*s, full ? 0 : kTextStringBytes, &cut);
      if (cut && note->empty()) *note = "(" + std::to_string(s->size()) + " bytes; --full shows all)";
      return q;
    }
    if (const auto b = v.as_bool()) return *b ? "true" : "false";
    return number(v);
  }
  const std::uint64_t shown = full ? v.size() : std::min(v.size(), kTextArrayItems);
  std::string out = "[";
  for (std::uint64_t i = 0; i < shown; ++i) {
    if (i) out += ", ";
    if (v.element_type() == io::GGUFType::ARRAY)
      out += value_text(*v.array_at(i), full, note);
    else
      out += value_text(*v.element(i), full, note);
  }
  if (shown < v.size()) out += (shown ? ", ... " : "... ") + std::to_string(v.size() - shown) + " more";
  return out + "]";
}

std::string type_text(const io::GGUFValue& v) {
  if (!v.is_array()) return io::gguf_type_name(v.type());
  const std::string elem = v.element_type() == io::GGUFType::ARRAY ? "array" : io::gguf_type_name(v.element_type());
  return elem + "[" + std::to_string(v.size()) + "]";
}

nlohmann::json value_json(const io::GGUFValue& v, bool full) {
  if (!v.is_array()) {
    if (const auto s = v.as_string()) return std::string(*s);
    if (const auto b = v.as_bool()) return *b;
    if (const auto x = v.as_float()) return *x;
    if (v.type() == io::GGUFType::U64) return *v.as_uint();
    return *v.as_int();
  }
  nlohmann::json items = nlohmann::json::array();
  const std::uint64_t shown = full ? v.size() : std::min(v.size(), kJsonArrayItems);
  for (std::uint64_t i = 0; i < shown; ++i)
    items.push_back(v.element_type() == io::GGUFType::ARRAY ? value_json(*v.array_at(i), full)
                                                            : value_json(*v.element(i), full));
  return items;
}

nlohmann::json entry_json(const io::GGUFValue& v, bool full) {
  nlohmann::json j = {{"type", io::gguf_type_name(v.type())}};
  if (v.is_array()) {
    j["element_type"] = io::gguf_type_name(v.element_type());
    j["count"] = v.size();
    j["truncated"] = !full && v.size() > kJsonArrayItems;
  }
  j["value"] = value_json(v, full);
  return j;
}

// A tensor's type for the table: GGML's name, with "*" for a type qkv does not compute with.
std::string type_text(const io::GGUFTensorInfo& t) { return t.type_name() + (t.computable() ? "" : "*"); }

// The model a decoder GGUF file holds (the registry's reading of its metadata), or nothing for a
// file qkv does not run as a decoder.
struct ModelSummary {
  models::DecoderSpec spec;
  models::DecoderFootprint footprint;
};
std::optional<ModelSummary> model_summary(const io::GGUFFile& f) {
  try {
    ModelSummary m;
    m.spec = models::decoder_spec_from_gguf(f);
    m.footprint = models::decoder_footprint(f, m.spec);
    return m;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

int run_inspect_gguf(const InspectOptions& opt, std::ostream& out) {
  const io::GGUFFile f = io::GGUFFile::open_header(opt.file);
  std::uint64_t data_bytes = 0;
  std::int64_t elements = 0;
  std::map<std::string, int> by_type;
  bool foreign = false;  // a tensor of a type qkv does not compute with
  for (const io::GGUFTensorInfo& t : f.tensors()) {
    data_bytes += t.nbytes;
    elements += t.numel();
    ++by_type[type_text(t)];
    foreign = foreign || !t.computable();
  }

  if (opt.json) {
    nlohmann::json meta = nlohmann::json::object();
    for (const io::GGUFKeyValue& kv : f.metadata()) meta[std::string(kv.key)] = entry_json(kv.value, opt.full);
    nlohmann::json tensors = nlohmann::json::array();
    for (const io::GGUFTensorInfo& t : f.tensors())
      tensors.push_back({{"name", t.name},
                         {"type", t.type_name()},
                         {"computable", t.computable()},
                         {"shape", t.shape},
                         {"dims", t.dims},
                         {"numel", t.numel()},
                         {"bytes", t.nbytes},
                         {"offset", t.offset}});
    nlohmann::json model = nullptr;
    if (const auto m = model_summary(f)) {
      const models::DecoderSpec& c = m->spec;
      model = {{"arch", c.arch}, {"layers", c.num_layers()}, {"hidden_size", c.hidden_size}, {"heads", c.num_heads},
               {"kv_heads", c.num_kv_heads}, {"head_dim", c.head_dim}, {"vocab_size", c.vocab_size},
               {"parameters", m->footprint.parameters}, {"active_parameters", m->footprint.active_parameters},
               {"decode_bytes_per_token", m->footprint.decode_bytes}};
      if (c.moe.experts > 0)
        model["experts"] = {{"count", c.moe.experts}, {"per_token", c.moe.top_k}, {"expert_ff", c.moe.expert_ff},
                            {"renormalized", c.moe.routing.renormalize}};
    }
    const nlohmann::json j = {{"file", f.source()},
                              {"model", model},
                              {"format", "gguf"},
                              {"version", f.version()},
                              {"alignment", f.alignment()},
                              {"file_size", f.file_size()},
                              {"data_offset", f.data_offset()},
                              {"data_bytes", data_bytes},
                              {"metadata", meta},
                              {"tensors", tensors}};
    out << j.dump() << '\n';
    return 0;
  }

  std::string types;
  for (const auto& [name, n] : by_type) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  const std::uint64_t head = std::min(f.data_offset(), f.file_size());
  out << "file:     " << f.source() << '\n'
      << "format:   GGUF version " << f.version() << ", alignment " << f.alignment() << '\n'
      << "size:     " << f.file_size() << " bytes = " << head << " (header, metadata, tensor infos) + "
      << f.file_size() - head << " (tensor data and padding)\n"
      << "tensors:  " << f.tensors().size() << (types.empty() ? "" : " (" + types + ")") << ", " << elements
      << " elements, " << data_bytes << " bytes\n"
      << "metadata: " << f.metadata().size() << (f.metadata().size() == 1 ? " key\n" : " keys\n");
  if (const auto m = model_summary(f)) {
    const models::DecoderSpec& c = m->spec;
    out << "model:    " << c.arch << ", " << c.num_layers() << " layers, hidden " << c.hidden_size << ", " << c.num_heads
        << " heads (" << c.num_kv_heads << " key/value) of " << c.head_dim << ", vocabulary " << c.vocab_size << '\n';
    if (const auto n = std::count_if(c.layers.begin(), c.layers.end(),
                                     [](const models::LayerSpec& l) { return l.mixer == models::Mixer::GatedDeltaNet; }))
      out << "linear:   " << n << " of " << c.num_layers() << " layers Gated DeltaNet (" << c.linear.key_heads
          << " key heads of " << c.linear.key_dim << ", " << c.linear.value_heads << " value heads of " << c.linear.value_dim
          << ", convolution of " << c.linear.conv_kernel << "): a state of " << c.linear.state_floats() * 4
          << " bytes per layer and sequence instead of keys and values\n";
    if (c.moe.experts > 0)
      out << "experts:  " << c.moe.experts << " per layer, " << c.moe.top_k << " per token, " << c.moe.expert_ff
          << " wide" << (c.moe.routing.renormalize ? ", weights renormalised" : "") << '\n';
    out << "per token: " << m->footprint.active_parameters << " of " << m->footprint.parameters
        << " parameters; a decode step reads " << m->footprint.decode_bytes << " bytes of weights\n";
  }
  if (!f.metadata().empty()) {
    out << '\n';
    Table t({"key", "type", "value"});
    t.align(1, Table::Align::Left).align(2, Table::Align::Left);
    for (const io::GGUFKeyValue& kv : f.metadata()) {
      std::string note;
      std::string value = value_text(kv.value, opt.full, &note);
      if (!note.empty()) value += " " + note;
      t.add_row({std::string(kv.key), type_text(kv.value), value});
    }
    t.print(out);
  }
  if (!f.tensors().empty()) {
    out << '\n';
    Table t({"name", "type", "shape", "numel", "bytes", "offset"});
    t.align(1, Table::Align::Left).align(2, Table::Align::Left);
    for (const io::GGUFTensorInfo& ti : f.tensors())
      t.add_row({ti.name, type_text(ti), shape_list(ti.shape), std::to_string(ti.numel()), std::to_string(ti.nbytes),
                 std::to_string(ti.offset)});
    t.print(out);
    if (foreign)
      out << "\n* a type qkv reads but does not compute with: the file cannot be loaded as a model (qkv computes with "
          << kernels::computable_types_list() << ")\n";
  }
  return 0;
}

}  // namespace qkv::tool
