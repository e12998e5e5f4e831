// The parts of a chat reply: which generated tokens are the model's reasoning, which its answer
// and which the markup of its chat format, for the reasoning models people run:
//
//   Think    Qwen3, SmolLM3, DeepSeek-R1's distills, QwQ: the reasoning between <think> and
//            </think> (single tokens of the vocabulary), the answer after.
//   Harmony  gpt-oss (OpenAI's harmony format): messages <|start|>{header}<|channel|>{channel}
//            <|message|>{body}<|end|> (the last ended by <|return|> or <|call|>); the body of the
//            "analysis" channel is reasoning, of "final" (and "commentary") the answer; headers,
//            channel names and the control tokens are markup.
//   Plain    every other model: all of it is the answer.
//
// The front ends show the answer as the reply (qkv chat, the server's message content) and the
// reasoning apart (the server's reasoning_content, as llama.cpp's server and vLLM name it; qkv
// chat prints it dimmed), and keep the answer alone in the conversation's history (the chat
// templates of these models drop earlier turns' reasoning themselves).
//
//   infer::ReplySplitter split(lm.tok(), infer::reply_format(lm.tok()), prompt_ids);
//   for each generated id: switch (split.push(id)) { case ReplyPart::Content: ...; }
//
// Thread safety: a ReplySplitter belongs to one sequence; reply_format is a pure function.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/infer/text_stream.h"
#include "qkv/tokenize/tokenizer.h"

namespace qkv::infer {

enum class ReplyFormat { Plain, Think, Harmony };
const char* reply_format_name(ReplyFormat f);  // "plain" | "think" | "harmony"

// The format a model's replies follow, from its vocabulary: Harmony when <|start|>, <|channel|>,
// <|message|> and <|end|> are tokens of it, Think when <think> and </think> are, else Plain.
ReplyFormat reply_format(const tokenize::Tokenizer& tok);

enum class ReplyPart { Content, Reasoning, Markup };

class ReplySplitter {
 public:
  // `prompt`: the ids the reply continues. A Think prompt whose last <think> is not closed (the
  // generation prompts of DeepSeek-R1's templates end with "<think>\n") starts in the reasoning;
  // a Harmony reply starts after the prompt's "<|start|>assistant", its first token normally
  // <|channel|> (a reply that starts with text is taken as the answer).
  ReplySplitter(const tokenize::Tokenizer& tok, ReplyFormat format, const std::vector<std::int64_t>& prompt = {});
  // The part generated token `id` belongs to.
  ReplyPart push(std::int64_t id);
  ReplyFormat format() const { return format_; }

 private:
  enum class State { Text, Header, ChannelName, Constrain, Body, Between };
  ReplyFormat format_;
  const tokenize::Tokenizer* tok_;
  // Think: <think>, </think>. Harmony: <|start|>, <|channel|>, <|message|>, <|end|>, <|return|>,
  // <|call|>, <|constrain|> (the last three optional).
  std::optional<std::int64_t> open_, close_, start_, channel_, message_, end_, return_, call_, constrain_;
  State state_ = State::Text;
  bool reasoning_ = false;  // Think: inside <think>; Harmony: the body is the analysis channel
  std::string channel_name_;
};

// A reply's text as the front ends show it: the answer through a TextStream of its own (stop
// strings, whole characters), the reasoning through another, the markup dropped; after a reasoning
// model's reasoning, the whitespace that separates it from the answer (the "\n\n" after
// </think>) is not part of the answer. With ReplyFormat::Plain, the answer's stream alone: the
// text a TextStream gives.
class ReplyStream {
 public:
  struct Piece {
    std::string content, reasoning;
  };
  ReplyStream(std::shared_ptr<const tokenize::Tokenizer> tok, ReplyFormat format, const std::vector<std::int64_t>& prompt,
              TextStreamOptions content);
  // The text generated token `id` releases. Nothing once stopped().
  Piece push(std::int64_t id);
  // What the streams still hold.
  Piece finish();
  // A stop string appeared in the answer.
  bool stopped() const { return content_.stopped(); }
  // The answer and the reasoning released so far, as shown.
  const std::string& text() const { return text_; }
  const std::string& reasoning() const { return reasoning_text_; }
  const TextStream& content_stream() const { return content_; }
  ReplyFormat format() const { return split_.format(); }

 private:
  std::string answer(std::string piece);
  ReplySplitter split_;
  TextStream content_, reasoning_;
  std::string text_, reasoning_text_;
  bool started_ = false;
};

}  // namespace qkv::infer
