// qkv inspect FILE: tensors (name, dtype, shape, bytes), metadata and header size of a
// safetensors file, read header-only by the library's strict reader; GGUF files (detected by
// their magic) are listed by cmd_inspect_gguf.cpp.
#include "cmd_inspect.h"

#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "command.h"
#include "format.h"
#include "qkv/io/gguf.h"
#include "qkv/io/safetensors.h"

namespace qkv::tool {

int run_inspect(const InspectOptions& opt, std::ostream& out) {
  if (io::is_gguf_file(opt.file)) return run_inspect_gguf(opt, out);
  const io::SafetensorsFile f = io::SafetensorsFile::open_header(opt.file);
  std::uint64_t data_bytes = 0;
  for (const auto& t : f.tensors()) data_bytes += t.nbytes();

  if (opt.json) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : f.tensors())
      tensors.push_back({{"name", t.name},
                         {"dtype", io::st_dtype_name(t.dtype)},
                         {"shape", t.shape},
                         {"numel", t.numel()},
                         {"bytes", t.nbytes()},
                         {"data_offsets", {t.begin, t.end}}});
    nlohmann::json j = {{"file", f.source()},         {"format", "safetensors"}, {"file_size", f.file_size()},
                        {"header_size", f.header_size()}, {"data_bytes", data_bytes}, {"metadata", f.metadata()},
                        {"tensors", tensors}};
    out << j.dump() << '\n';
    return 0;
  }

  out << "file:     " << f.source() << '\n'
      << "size:     " << f.file_size() << " bytes = 8 (header length) + " << f.header_size() << " (JSON header) + "
      << data_bytes << " (tensor data)\n"
      << "tensors:  " << f.tensors().size() << '\n';
  if (!f.tensors().empty()) {
    out << '\n';
    Table t({"name", "dtype", "shape", "numel", "bytes", "data offsets"});
    t.align(1, Table::Align::Left).align(2, Table::Align::Left);
    for (const auto& ti : f.tensors())
      t.add_row({ti.name, io::st_dtype_name(ti.dtype), shape_list(ti.shape), std::to_string(ti.numel()),
                 std::to_string(ti.nbytes()), "[" + std::to_string(ti.begin) + ", " + std::to_string(ti.end) + ")"});
    t.print(out);
  }
  out << "\nmetadata: ";
  if (f.metadata().empty()) {
    out << "none\n";
  } else {
    out << f.metadata().size() << " key(s)\n";
    for (const auto& [k, v] : f.metadata()) out << "  " << k << ": " << v << '\n';
  }
  return 0;
}

QKV_TOOL_COMMAND(inspect, {
    .name = "inspect",
    .summary = "List the tensors (name, type, shape, bytes) and metadata of a .safetensors or .gguf file",
    .order = 50,
    .group = "Inspect, convert and measure",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Reads the header of FILE with qkv's strict readers -- safetensors, or GGUF when the file starts with "
          "the GGUF magic, whatever its name -- and lists its tensors (name, type, shape in PyTorch order, "
          "element count, bytes, data offsets) and its metadata (safetensors: the __metadata__ entries and the "
          "header size; GGUF: every key with its type, long arrays and strings shortened unless --full). No "
          "tensor data is read: a file of any size takes milliseconds. A missing or corrupt file gives one line "
          "naming the problem and exit code 1.");
      auto opt = std::make_shared<InspectOptions>();
      sub.add_option("FILE", opt->file, "The .safetensors or .gguf file")->required();
      sub.add_flag("--json", opt->json, "Print one JSON object instead of the table");
      sub.add_flag("--full", opt->full,
                   "GGUF: print every element of the metadata arrays and long strings (the chat template) whole");
      return [opt] { return run_inspect(*opt, std::cout); };
    }});

}  // namespace qkv::tool
