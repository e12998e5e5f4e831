// What a command reads and writes, checked before it does any work (issue 25 item 1).
//
// Every command that writes checks its inputs and its output first:
//   - an input file must be a regular file ("... is a directory, expected a text file"),
//     an input folder a folder;
//   - an output that exists and holds something is refused unless the user says
//     --overwrite (or, for a training run, --resume): nothing of the user's is replaced
//     by a mistake;
//   - the nearest existing folder above the output must be writable.
// Leftovers of killed writers of the same output (io::recover_folder) are cleaned first.
// Folders are then written through io::StagedFolder, files through the atomic writers.
#pragma once
#include <string>
#include <vector>

namespace qkv::tool {

// `flag` names the option in messages ("--out"); `cmd` starts them ("train lm").
struct OutputSpec {
  std::string cmd, flag = "--out";
  bool overwrite = false;
  // What to suggest besides --overwrite when the output is taken
  // (e.g. "--resume to continue the run it holds").
  std::string alternative;
};

// A folder output: absent, an empty folder, or (with overwrite) any folder. Recovers an
// interrupted commit and removes dead writers' staging folders first. ValueError when
// it holds files ("... already holds config.json, model.safetensors, ...; give --overwrite
// to replace it ..."), IOError when it is a file or its parent cannot be written.
void check_output_folder(const std::string& path, const OutputSpec& spec);
// A file output: absent, or (with overwrite) a regular file. Removes dead writers' temp
// files first. ValueError when it exists, IOError when it is a folder or cannot be written.
void check_output_file(const std::string& path, const OutputSpec& spec);

// An input, checked before any work: IOError starting with `where` ("train lm: --text")
// and naming the path when it is missing or unreadable ("train lm: --text x.txt: no such
// file (expected a text file)") or of the wrong kind ("train lm: --text tests is a directory,
// expected a text file").
void check_input_file(const std::string& path, const std::string& where, const std::string& kind = "a text file");
void check_input_folder(const std::string& path, const std::string& where, const std::string& kind = "a folder");

// True when both paths name the same existing file (or the same path).
bool same_file(const std::string& a, const std::string& b);

// The word for what `path` is ("a folder", "a file", "missing").
std::string path_kind(const std::string& path);

// A word for a POSIX shell: as is when it needs no quoting, else in single quotes.
std::string shell_quote(const std::string& s);
// "a b 'c d'" for a list of words.
std::string shell_join(const std::vector<std::string>& words);

}  // namespace qkv::tool
