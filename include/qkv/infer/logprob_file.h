// A run's log-probabilities saved to a file, so another model can be compared with it token by
// token (`qkv perplexity --save-logits FILE`, then `--kl-reference FILE` with the other model:
// KL divergence and the statistics of infer/kl_divergence.h, as llama-perplexity's
// --kl-divergence-base / --kl-divergence).
//
// The file is a safetensors file (io/safetensors.h; PyTorch's safetensors package reads it):
//
//   tokens     I64 [T]     the text's token ids (BOS included when the model adds one)
//   positions  I64 [M]     the scored positions, ascending, each in [1, T) (infer/score.h)
//   logprobs   F32 [M, V]  row m: log-softmax over the whole vocabulary of the logits that
//                          predict token positions[m] (natural log; computed in float64 from the
//                          model's float32 logits, then rounded to float32)
//   __metadata__  format "qkv.logprobs", version "1", vocab V, context N, stride S (the windows
//                 that made the positions), model (the model's file or folder name)
//
// Size: 4 V bytes per scored token, 8 (T + M) more and a small header: for SmolLM2's vocabulary
// of 49,152 that is 196,608 bytes (192 KiB) per token, 1,000 scored tokens ~ 188 MiB. The full
// vocabulary in float32 keeps KL exact (a model against its own file gives 0); llama.cpp's file
// stores each row as 16-bit steps between the row's minimum and maximum (half the size, about
// 2e-4 nats of rounding), and top-k plus the rest's mass would bound KL from below only.
//
// The writer streams rows to a temp file beside the target and renames it into place once every
// row is written (io::SafetensorsStreamWriter): an interrupted run leaves the user's file as it
// was. The reader maps the file (rows are read from the page cache as they are used, nothing is
// loaded whole) and checks every size against the bytes present.
//
// Thread safety: a writer is used by one thread; a reader is read-only once opened.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/io/safetensors.h"

namespace qkv::infer {

inline constexpr const char* kLogprobFormat = "qkv.logprobs";
inline constexpr const char* kLogprobVersion = "1";

// What a file describes: the text's tokens, the scored positions and how they were made.
struct LogprobPlan {
  std::vector<std::int64_t> tokens;     // T
  std::vector<std::int64_t> positions;  // M, ascending, in [1, T)
  std::int64_t vocab = 0;               // V
  std::int64_t context = 0, stride = 0;
  std::string model;                    // for messages (may be empty)
};

class LogprobWriter {
 public:
  // Checks the plan (ValueError: no positions, positions not ascending in [1, T), V < 1) and the
  // room on the file system (IOError), then creates the temp file and writes the header.
  LogprobWriter(const std::string& path, LogprobPlan plan);
  ~LogprobWriter();
  const LogprobPlan& plan() const { return plan_; }
  // The log-softmax row of the next scored position, from the model's logits [V] (float32).
  void add_logits(const float* logits);
  // The same already computed: float32 log-probabilities [V].
  void add_logprobs(const float* logprobs);
  std::int64_t rows_written() const { return rows_; }
  std::uint64_t file_bytes() const { return out_->file_bytes(); }  // the whole file's
  // IOError unless every position's row was given; renames the file into place.
  void commit();

 private:
  LogprobPlan plan_;
  std::unique_ptr<io::SafetensorsStreamWriter> out_;
  std::vector<float> row_;
  std::int64_t rows_ = 0;
};

// A saved file, checked and mapped.
class ReferenceLogprobs {
 public:
  // IOError when missing or unreadable, FormatError naming the file and the problem when it is not
  // a safetensors file of this format (tensors missing or of the wrong dtype or shape, positions
  // out of order or out of range, token ids negative, metadata absent or not numbers).
  static ReferenceLogprobs open(const std::string& path);
  const LogprobPlan& plan() const { return plan_; }  // tokens and positions copied, the rest mapped
  const std::string& path() const { return path_; }
  // Row m of the log-probabilities [V] (float32, in the file's mapping; may be unaligned on a
  // hand-made file, then a copy in the calling thread's buffer).
  const float* row(std::int64_t m) const;
  // ValueError naming `what` (the option, "--kl-reference") and the first difference when the
  // file was made from other tokens, another vocabulary size, or other windows (context, stride).
  void check_matches(const std::vector<std::int64_t>& tokens, std::int64_t vocab, std::int64_t context,
                     std::int64_t stride, const std::string& what) const;

 private:
  std::string path_;
  LogprobPlan plan_;
  std::shared_ptr<const io::SafetensorsFile> file_;
  const std::uint8_t* rows_ = nullptr;
};

}  // namespace qkv::infer
