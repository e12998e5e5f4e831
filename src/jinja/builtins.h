// The builtins of qkv's Jinja2 subset: jinja2's filters and tests that chat templates use, the
// globals transformers provides (raise_exception, strftime_now, namespace, dict, range), and the
// methods of str, dict and list a sandboxed template may call (strip, split, startswith, items,
// get, ...). Each behaves as the Python it stands for.
#pragma once
#include <initializer_list>
#include <optional>
#include <unordered_map>
#include <vector>
#include <string>

#include "value.h"

namespace qkv::jinja {

class Renderer;

// Whether the parser accepts `|name` / `is name`.
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

Value apply_filter(Renderer& r, const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(Renderer& r, const std::string& name, const Value& subject, CallArgs& args);

// The global functions a template sees (raise_exception, strftime_now, namespace, dict, range).
void add_globals(std::unordered_map<std::string, Value>& frame);

// obj.name when obj is a str, dict or list and name is one of its methods: a bound method.
// nullopt when it is no method of obj (the caller then looks for a key or gives Undefined).
std::optional<Value> method_of(const Value& obj, const std::string& name);

// Binds a call's arguments to named parameters as Python does: positional first, then keywords;
// Fail on too many arguments, an unknown or repeated keyword.
class Params {
 public:
  Params(const std::string& fn, const CallArgs& args, std::initializer_list<const char*> names);
  const Value* get(std::size_t k) const { return given_[k]; }
  Value get_or(std::size_t k, Value dflt) const { return given_[k] ? *given_[k] : std::move(dflt); }
  // The argument as an int / a str (Fail naming the parameter otherwise).
  std::int64_t int_arg(std::size_t k, std::int64_t dflt) const;
  std::string str_arg(std::size_t k) const;

 private:
  std::string fn_;
  std::vector<const char*> names_;
  std::vector<const Value*> given_;
};

}  // namespace qkv::jinja
