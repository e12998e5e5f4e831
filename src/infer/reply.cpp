// The parts of a chat reply (see reply.h): two small state machines over the generated ids.
#include "qkv/infer/reply.h"

#include <algorithm>

namespace qkv::infer {

const char* reply_format_name(ReplyFormat f) {
  switch (f) {
    case ReplyFormat::Think: return "think";
    case ReplyFormat::Harmony: return "harmony";
    case ReplyFormat::Plain: break;
  }
  return "plain";
}

ReplyFormat reply_format(const tokenize::Tokenizer& tok) {
  auto has = [&](const char* t) { return tok.token_to_id(t).has_value(); };
  if (has("<|start|>") && has("<|channel|>") && has("<|message|>") && has("<|end|>")) return ReplyFormat::Harmony;
  if (has("<think>") && has("</think>")) return ReplyFormat::Think;
  return ReplyFormat::Plain;
}

ReplySplitter::ReplySplitter(const tokenize::Tokenizer& tok, ReplyFormat format, const std::vector<std::int64_t>& prompt)
    : format_(format), tok_(&tok) {
  if (format_ == ReplyFormat::Think) {
    open_ = tok.token_to_id("<think>");
    close_ = tok.token_to_id("</think>");
    if (!open_ || !close_) format_ = ReplyFormat::Plain;
    // Inside an unclosed <think> of the prompt: the reply starts with reasoning.
    for (auto it = prompt.rbegin(); format_ == ReplyFormat::Think && it != prompt.rend(); ++it) {
      if (*it == *close_) break;
      if (*it == *open_) {
        reasoning_ = true;
        break;
      }
    }
  } else if (format_ == ReplyFormat::Harmony) {
    start_ = tok.token_to_id("<|start|>");
    channel_ = tok.token_to_id("<|channel|>");
    message_ = tok.token_to_id("<|message|>");
    end_ = tok.token_to_id("<|end|>");
    return_ = tok.token_to_id("<|return|>");
    call_ = tok.token_to_id("<|call|>");
    constrain_ = tok.token_to_id("<|constrain|>");
    if (!start_ || !channel_ || !message_ || !end_) format_ = ReplyFormat::Plain;
    // The prompt's last message header, replayed: a prompt that ends inside a message (say after
    // "<|channel|>final<|message|>") continues its channel; one that ends with the bare header
    // "<|start|>assistant" waits for the reply's own <|channel|> (text before it is the answer).
    if (format_ == ReplyFormat::Harmony) {
      auto last = prompt.end();
      for (auto it = prompt.begin(); it != prompt.end(); ++it)
        if (*it == *start_) last = it;
      for (auto it = last; it != prompt.end(); ++it) push(*it);
      if (state_ == State::Header || state_ == State::Between) state_ = State::Text;
    }
  }
}

ReplyPart ReplySplitter::push(std::int64_t id) {
  switch (format_) {
    case ReplyFormat::Plain: return ReplyPart::Content;
    case ReplyFormat::Think:
      if (id == *open_) {
        reasoning_ = true;
        return ReplyPart::Markup;
      }
      if (id == *close_) {
        reasoning_ = false;
        return ReplyPart::Markup;
      }
      return reasoning_ ? ReplyPart::Reasoning : ReplyPart::Content;
    case ReplyFormat::Harmony: break;
  }
  auto is = [&](const std::optional<std::int64_t>& t) { return t && id == *t; };
  if (is(start_)) {
    state_ = State::Header;
    return ReplyPart::Markup;
  }
  if (is(channel_)) {
    state_ = State::ChannelName;
    channel_name_.clear();
    return ReplyPart::Markup;
  }
  if (is(constrain_)) {  // "<|constrain|>json": the body's format, before <|message|>
    state_ = State::Constrain;
    return ReplyPart::Markup;
  }
  if (is(message_)) {
    // The channel is the name's first word ("commentary to=functions.f": a tool call's channel).
    const std::size_t a = channel_name_.find_first_not_of(" \t\n");
    const std::string name =
        a == std::string::npos ? std::string() : channel_name_.substr(a, channel_name_.find_first_of(" \t\n", a) - a);
    reasoning_ = name == "analysis";
    state_ = State::Body;
    return ReplyPart::Markup;
  }
  if (is(end_) || is(return_) || is(call_)) {
    state_ = State::Between;
    return ReplyPart::Markup;
  }
  switch (state_) {
    case State::Text: return ReplyPart::Content;  // a reply that does not follow the format
    case State::Body: return reasoning_ ? ReplyPart::Reasoning : ReplyPart::Content;
    case State::ChannelName:
      if (id >= 0 && id < tok_->vocab_size()) channel_name_ += tok_->token_text(id);
      return ReplyPart::Markup;
    case State::Header:
    case State::Constrain:
    case State::Between: break;
  }
  return ReplyPart::Markup;
}

ReplyStream::ReplyStream(std::shared_ptr<const tokenize::Tokenizer> tok, ReplyFormat format,
                         const std::vector<std::int64_t>& prompt, TextStreamOptions content)
    : split_(*tok, format, prompt), content_(tok, content), reasoning_(tok, {.skip = content.skip}) {}

std::string ReplyStream::answer(std::string piece) {
  if (split_.format() != ReplyFormat::Plain && !started_) {
    piece.erase(0, std::min(piece.size(), piece.find_first_not_of(" \t\r\n")));
    started_ = !piece.empty();
  }
  return piece;
}

ReplyStream::Piece ReplyStream::push(std::int64_t id) {
  if (content_.stopped()) return {};
  Piece p;
  switch (split_.push(id)) {
    case ReplyPart::Content: p.content = answer(content_.push(id)); break;
    case ReplyPart::Reasoning: p.reasoning = reasoning_.push(id); break;
    case ReplyPart::Markup: break;
  }
  text_ += p.content;
  reasoning_text_ += p.reasoning;
  return p;
}

ReplyStream::Piece ReplyStream::finish() {
  Piece p{answer(content_.finish()), reasoning_.finish()};
  text_ += p.content;
  reasoning_text_ += p.reasoning;
  return p;
}

}  // namespace qkv::infer
