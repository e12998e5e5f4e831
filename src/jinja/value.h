// The values of qkv's Jinja2 subset (chat templates), with Python's semantics: what jinja2 does
// with the Python objects transformers hands it (str, int, float, bool, None, list, tuple, dict,
// jinja2's Undefined and Namespace, loop contexts and callables).
//
// Strings are UTF-8 and measured, indexed and sliced in code points as Python does. Lists, tuples
// and dicts are immutable once built (transformers renders in jinja2's ImmutableSandboxedEnvironment);
// only a namespace's attributes change (`{% set ns.x = ... %}`). Containers are shared, so copying
// a Value is cheap.
//
// Operations that Python would refuse (TypeError, ZeroDivisionError, ...) throw jinja::Fail with a
// sentence; the evaluator adds the template's line and column.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace qkv::jinja {

// An error without a position; the evaluator turns it into a TemplateError at the node it
// was evaluating.
struct Fail {
  std::string message;
};

// The work a render may do, counted on its thread: every node evaluated and every byte or item an
// operation touches is charged; past the limit, charge() fails. A Budget is installed for the
// duration of a render (the render is then free of hangs whatever the template does).
struct Budget {
  std::uint64_t used = 0;
  std::uint64_t limit = UINT64_MAX;
};
class BudgetScope {
 public:
  explicit BudgetScope(Budget* b);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* saved_;
};
void charge(std::uint64_t units);

enum class Kind : std::uint8_t { Undefined, None, Bool, Int, Float, Str, List, Dict, Namespace, Loop, Func };

struct Value;
struct Array;
struct Map;
struct Callable;

// Deepest nesting of lists / dicts a value may have (printing, comparing and freeing recurse).
inline constexpr int kMaxDepth = 128;
// Most items a list may hold (a Value is ~80 bytes: 2^20 items are ~80 MiB).
inline constexpr std::size_t kMaxItems = std::size_t{1} << 20;

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0.0;
  std::shared_ptr<const std::string> s;  // Str: the text; Undefined: the message an error would give
  std::shared_ptr<const Array> arr;      // List (and tuples)
  std::shared_ptr<Map> map;              // Dict (never changed once built), Namespace, Loop
  std::shared_ptr<const Callable> fn;    // Func

  static Value undefined(std::string message = "");
  static Value none();
  static Value boolean(bool v);
  static Value integer(std::int64_t v);
  static Value number(double v);
  static Value str(std::string v);
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(std::shared_ptr<Map> m);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_str() const { return kind == Kind::Str; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_int_like() const { return kind == Kind::Int || kind == Kind::Bool; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Bool || kind == Kind::Float; }
  const std::string& text() const { return *s; }  // Str only
  double as_double() const;                       // numbers only
  std::int64_t as_int() const { return kind == Kind::Bool ? (b ? 1 : 0) : i; }
  int depth() const;                              // containers: 1 + the deepest item; else 0
};

struct Array {
  std::vector<Value> items;
  bool tuple = false;
  int depth = 1;
  bool has_ns = false;  // holds a namespace, loop or function (see holds_namespace)
};

// An insertion-ordered dict (or a namespace's / loop context's attributes). Keys are str, int,
// float, bool or None; 1, 1.0 and True are one key, as in Python.
struct Map {
  std::vector<std::pair<Value, Value>> items;
  std::unordered_map<std::string, std::size_t> index;
  int depth = 1;
  bool has_ns = false;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;  // a str key
  void set(const Value& key, Value value);          // replaces the value, keeping the key's place
};

// Arguments of a call: positional, then keyword (in the order written).
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Renderer;
struct Callable {
  std::string name;  // for messages: "raise_exception", "str.split", "macro 'f'", ...
  std::string repr;  // what printing it shows ("<Macro 'f'>"); empty: "<function NAME>"
  std::function<Value(Renderer&, CallArgs&)> call;
};

// The key a Map indexes `key` under; Fail for an unhashable key (a list, dict, ...).
std::string map_key(const Value& key);

// Whether v is or holds a namespace, a loop context or a function. A namespace attribute may not
// hold one: namespaces are the only mutable values, and this keeps them from containing
// themselves (a cycle that printing would follow forever) or growing deeper than kMaxDepth.
bool holds_namespace(const Value& v);

// Python's type name: "str", "int", "NoneType", "list", "dict", "Namespace", ...
std::string type_name(const Value& v);
// Python's truth value (Undefined is false).
bool truthy(const Value& v);
// str(v): what `{{ v }}` prints ("" for Undefined, "None", "True", "1.0", "[1, 'a']").
// Fails past max_bytes (a list repeating one long string prints to more than it holds).
std::string to_str(const Value& v, std::size_t max_bytes = SIZE_MAX);
// repr(v), as Python prints items inside a list or dict.
std::string repr(const Value& v, std::size_t max_bytes = SIZE_MAX);
// Python's repr of a float ("1.0", "1e+16", "0.30000000000000004", "inf").
std::string float_repr(double d);
// Python's == (1 == 1.0 == True; a tuple never equals a list; Undefined equals Undefined).
bool equals(const Value& a, const Value& b);
// Python's <: numbers, strings, lists and tuples; Fail otherwise ("'<' not supported between ...").
bool less(const Value& a, const Value& b, const char* op = "<");
// `item in container` (substring, list item, dict key; nothing is in Undefined).
bool contains(const Value& container, const Value& item);
// Fails with jinja2's message for using an undefined value ("'x' is undefined").
[[noreturn]] void fail_undefined(const Value& v);

// transformers' tojson: json.dumps(v, ensure_ascii, indent, separators, sort_keys).
struct JsonStyle {
  bool ensure_ascii = false;
  int indent = -1;  // -1: None (one line)
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
  std::size_t max_bytes = SIZE_MAX;  // Fail past this many bytes of JSON
};
std::string to_json(const Value& v, const JsonStyle& style);

}  // namespace qkv::jinja
