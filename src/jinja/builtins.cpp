// jinja2's filters and tests, and the globals transformers adds (see builtins.h). Each
// function names the jinja2 / Python code it follows where the behaviour is not obvious.
#include "builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <unordered_map>

#include "render.h"
#include "text.h"

namespace qkv::jinja {

Params::Params(const std::string& fn, const CallArgs& args, std::initializer_list<const char*> names)
    : fn_(fn), names_(names), given_(names.size(), nullptr) {
  if (args.pos.size() > names_.size()) {
    if (names_.empty()) throw Fail{fn + " takes no arguments (" + std::to_string(args.pos.size()) + " given)"};
    throw Fail{fn + " takes at most " + std::to_string(names_.size()) + " argument(s) (" +
               std::to_string(args.pos.size()) + " given)"};
  }
  for (std::size_t k = 0; k < args.pos.size(); ++k) given_[k] = &args.pos[k];
  for (const auto& [name, v] : args.kw) {
    std::size_t k = 0;
    while (k < names_.size() && name != names_[k]) ++k;
    if (k == names_.size()) throw Fail{fn + " got an unexpected keyword argument '" + name + "'"};
    if (given_[k]) throw Fail{fn + " got multiple values for the argument '" + name + "'"};
    given_[k] = &v;
  }
}

std::int64_t Params::int_arg(std::size_t k, std::int64_t dflt) const {
  if (!given_[k] || given_[k]->is_none()) return dflt;
  if (!given_[k]->is_int_like())
    throw Fail{fn_ + ": the argument '" + names_[k] + "' must be an integer, not " + type_name(*given_[k])};
  return given_[k]->as_int();
}

std::string Params::str_arg(std::size_t k) const {
  if (!given_[k]) throw Fail{fn_ + " is missing the argument '" + std::string(names_[k]) + "'"};
  if (!given_[k]->is_str())
    throw Fail{fn_ + ": the argument '" + names_[k] + "' must be a string, not " + type_name(*given_[k])};
  return given_[k]->text();
}

namespace {

using FilterFn = std::function<Value(Renderer&, const Value&, CallArgs&)>;

Value make_list(std::vector<Value> items) { return Value::list(std::move(items)); }

std::int64_t length_of(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::Str: return text::length(v.text());
    case Kind::List: return static_cast<std::int64_t>(v.arr->items.size());
    case Kind::Dict: return static_cast<std::int64_t>(v.map->items.size());
    default: throw Fail{"object of type '" + type_name(v) + "' has no len()"};
  }
}

// Python's float(str): surrounding whitespace, a sign, digits with single `_`, inf / nan.
std::optional<double> parse_float(const std::string& s) {
  std::string t = text::strip(s, std::nullopt, true, true);
  std::string clean;
  for (std::size_t k = 0; k < t.size(); ++k) {
    if (t[k] == '_') {
      if (k == 0 || k + 1 == t.size() || !std::isdigit(static_cast<unsigned char>(t[k - 1])) ||
          !std::isdigit(static_cast<unsigned char>(t[k + 1])))
        return std::nullopt;
      continue;
    }
    clean += t[k];
  }
  if (clean.empty() || clean.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

// Python's int(str, base): whitespace, sign, digits with single `_`, a 0x / 0o / 0b prefix when it
// matches the base (or base 0).
std::optional<std::int64_t> parse_int(const std::string& s, std::int64_t base) {
  std::string t = text::strip(s, std::nullopt, true, true);
  bool neg = false;
  std::size_t k = 0;
  if (k < t.size() && (t[k] == '+' || t[k] == '-')) neg = t[k++] == '-';
  if (k + 1 < t.size() && t[k] == '0') {
    const char p = static_cast<char>(t[k + 1] | 0x20);
    const int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (pb && (base == 0 || base == pb)) {
      base = pb;
      k += 2;
      if (k < t.size() && t[k] == '_') ++k;
    }
  }
  if (base == 0) base = 10;
  if (base < 2 || base > 36) throw Fail{"int: the base must be 0 or between 2 and 36"};
  if (k == t.size()) return std::nullopt;
  unsigned __int128 v = 0;
  bool prev_digit = false;
  for (; k < t.size(); ++k) {
    const char c = t[k];
    if (c == '_') {
      if (!prev_digit || k + 1 == t.size()) return std::nullopt;
      prev_digit = false;
      continue;
    }
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10
                                                         : 99;
    if (d >= base) return std::nullopt;
    v = v * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (v > static_cast<unsigned __int128>(INT64_MAX) + 1) throw Fail{"int: the number does not fit in 64 bits"};
    prev_digit = true;
  }
  if (!neg && v > static_cast<unsigned __int128>(INT64_MAX)) throw Fail{"int: the number does not fit in 64 bits"};
  return neg ? static_cast<std::int64_t>(-static_cast<__int128>(v)) : static_cast<std::int64_t>(v);
}

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (environment.getitem).
Value attr_path(Renderer& r, Value v, const std::string& path) {
  std::size_t at = 0;
  while (true) {
    const std::size_t dot = path.find('.', at);
    const std::string part = path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits && part.size() < 18 ? r.getitem(v, Value::integer(std::stoll(part))) : r.getitem(v, Value::str(part));
    if (dot == std::string::npos) return v;
    at = dot + 1;
  }
}

// The test named by args.pos[first] (none: truthiness), applied to each item by select & co.
std::function<bool(const Value&)> make_test(Renderer& r, CallArgs& args, std::size_t first, const char* fn) {
  if (args.pos.size() <= first) {
    if (!args.kw.empty()) throw Fail{std::string(fn) + ": keyword arguments need a test name"};
    return [](const Value& v) { return truthy(v); };
  }
  if (!args.pos[first].is_str()) throw Fail{std::string(fn) + ": the test name must be a string"};
  const std::string name = args.pos[first].text();
  if (!has_test(name)) throw Fail{std::string(fn) + ": the test '" + name + "' is not supported"};
  auto rest = std::make_shared<CallArgs>();
  rest->pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(first) + 1, args.pos.end());
  rest->kw = args.kw;
  return [&r, name, rest](const Value& v) {
    CallArgs a = *rest;
    return apply_test(r, name, v, a);
  };
}

Value select_filter(Renderer& r, const Value& seq, CallArgs& args, bool by_attr, bool keep, const char* fn) {
  std::vector<Value> out;
  if (!truthy(seq)) return make_list(std::move(out));
  std::string attr;
  if (by_attr) {
    if (args.pos.empty() || !args.pos[0].is_str()) throw Fail{std::string(fn) + " needs an attribute name"};
    attr = args.pos[0].text();
  }
  const auto test = make_test(r, args, by_attr ? 1 : 0, fn);
  for (const Value& item : r.iterate(seq))
    if (test(by_attr ? attr_path(r, item, attr) : item) == keep) out.push_back(item);
  return make_list(std::move(out));
}

// The key sort / unique compare by: the attribute, lower-cased unless case_sensitive.
Value sort_key(Renderer& r, const Value& item, const Value* attribute, bool case_sensitive) {
  Value k = attribute ? attr_path(r, item, to_str(*attribute)) : item;
  if (!case_sensitive && k.is_str()) return Value::str(text::lower(k.text()));
  return k;
}

Value filter_tojson(Renderer& r, const Value& v, CallArgs& args) {
  Params p("the filter 'tojson'", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle st;
  st.max_bytes = r.limits().max_output_bytes;
  st.ensure_ascii = truthy(p.get_or(0, Value::boolean(false)));
  if (const Value* ind = p.get(1); ind && !ind->is_none()) {
    if (!ind->is_int_like()) throw Fail{"tojson: indent must be an integer or None"};
    st.indent = static_cast<int>(std::clamp<std::int64_t>(ind->as_int(), 0, 1 << 20));
    st.item_sep = ",";
  }
  if (const Value* sep = p.get(2); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->arr->items.size() != 2 || !sep->arr->items[0].is_str() ||
        !sep->arr->items[1].is_str())
      throw Fail{"tojson: separators must be a pair of strings"};
    st.item_sep = sep->arr->items[0].text();
    st.key_sep = sep->arr->items[1].text();
  }
  st.sort_keys = truthy(p.get_or(3, Value::boolean(false)));
  return r.make_str(to_json(v, st));
}

Value filter_indent(Renderer& r, const Value& v, CallArgs& args) {
  Params p("the filter 'indent'", args, {"width", "first", "blank"});
  std::string ind;
  const Value width = p.get_or(0, Value::integer(4));
  if (width.is_str()) {
    ind = width.text();
  } else {
    const std::int64_t w = p.int_arg(0, 4);
    if (w > 1024) throw Fail{"indent: the width " + std::to_string(w) + " is too large"};
    ind.assign(static_cast<std::size_t>(std::max<std::int64_t>(w, 0)), ' ');
  }
  const bool first = truthy(p.get_or(1, Value::boolean(false))), blank = truthy(p.get_or(2, Value::boolean(false)));
  // jinja2 appends "\n" to the value itself: only a string can be indented.
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_str()) throw Fail{"indent: the value must be a string, not " + type_name(v)};
  // Python's str.splitlines() of s + "\n".
  const std::u32string t = text::decode(v.text() + "\n");
  std::vector<std::string> lines;
  std::u32string cur;
  for (std::size_t k = 0; k < t.size(); ++k) {
    const char32_t c = t[k];
    if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 ||
        c == 0x2029) {
      if (c == '\r' && k + 1 < t.size() && t[k + 1] == '\n') ++k;
      lines.push_back(text::encode(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) lines.push_back(text::encode(cur));
  std::string out;
  const auto add = [&](const std::string& s) {
    out += s;
    if (out.size() > r.limits().max_output_bytes) r.make_str(out);  // fails
  };
  for (std::size_t k = 0; k < lines.size(); ++k) {
    if (k) add("\n");
    if (k && (blank || !lines[k].empty())) add(ind);
    add(lines[k]);
  }
  if (first) out = ind + out;
  return r.make_str(std::move(out));
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = [] {
    std::unordered_map<std::string, FilterFn> f;
    const auto no_args = [](const char* fn, const CallArgs& a) { Params(fn, a, {}); };
    f["abs"] = [=](Renderer&, const Value& v, CallArgs& a) {
      no_args("the filter 'abs'", a);
      if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
      if (!v.is_int_like()) throw Fail{"bad operand type for abs(): '" + type_name(v) + "'"};
      if (v.as_int() == INT64_MIN) throw Fail{"integer overflow: the result does not fit in 64 bits"};
      return Value::integer(std::llabs(v.as_int()));
    };
    f["capitalize"] = [=](Renderer& r, const Value& v, CallArgs& a) {
      no_args("the filter 'capitalize'", a);
      return r.make_str(text::capitalize(to_str(v)));
    };
    f["count"] = f["length"] = [=](Renderer&, const Value& v, CallArgs& a) {
      no_args("the filter 'length'", a);
      return Value::integer(length_of(v));
    };
    f["default"] = f["d"] = [](Renderer&, const Value& v, CallArgs& a) {
      Params p("the filter 'default'", a, {"default_value", "boolean"});
      const bool boolean = truthy(p.get_or(1, Value::boolean(false)));
      if (v.is_undefined() || (boolean && !truthy(v))) return p.get_or(0, Value::str(""));
      return v;
    };
    f["first"] = [=](Renderer& r, const Value& v, CallArgs& a) {
      no_args("the filter 'first'", a);
      std::vector<Value> items = r.iterate(v);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    f["last"] = [=](Renderer& r, const Value& v, CallArgs& a) {
      no_args("the filter 'last'", a);
      std::vector<Value> items = r.iterate(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    f["float"] = [](Renderer&, const Value& v, CallArgs& a) {
      Params p("the filter 'float'", a, {"default"});
      if (v.is_undefined()) fail_undefined(v);  // float(Undefined) raises
      if (v.is_number()) return Value::number(v.as_double());
      if (v.is_str())
        if (auto d = parse_float(v.text())) return Value::number(*d);
      return p.get_or(0, Value::number(0.0));
    };
    f["int"] = [](Renderer&, const Value& v, CallArgs& a) {
      // jinja2's do_int: int(value, base) for a string, int(value) otherwise, then int(float(value)).
      Params p("the filter 'int'", a, {"default", "base"});
      const std::int64_t base = p.int_arg(1, 10);
      if (v.is_undefined()) fail_undefined(v);  // int(Undefined) raises
      if (v.is_int_like()) return Value::integer(v.as_int());
      const auto from_float = [&](double d) {
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return p.get_or(0, Value::integer(0));
        return Value::integer(static_cast<std::int64_t>(d));
      };
      if (v.kind == Kind::Float) return from_float(v.f);
      if (v.is_str()) {
        if (auto i = parse_int(v.text(), base)) return Value::integer(*i);
        if (auto d = parse_float(v.text())) return from_float(*d);
      }
      return p.get_or(0, Value::integer(0));
    };
    f["items"] = [=](Renderer&, const Value& v, CallArgs& a) {
      no_args("the filter 'items'", a);
      std::vector<Value> out;
      if (v.is_undefined()) return make_list(std::move(out));
      if (!v.is_dict()) throw Fail{"Can only get item pairs from a mapping."};
      for (const auto& [k, x] : v.map->items) out.push_back(Value::list({k, x}, true));
      return make_list(std::move(out));
    };
    f["join"] = [](Renderer& r, const Value& v, CallArgs& a) {
      Params p("the filter 'join'", a, {"d", "attribute"});
      const std::string sep = to_str(p.get_or(0, Value::str("")));
      const Value* attr = p.get(1);
      std::string out;
      bool first = true;
      for (const Value& item : r.iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(attr && !attr->is_none() ? attr_path(r, item, to_str(*attr)) : item, r.limits().max_output_bytes);
        if (out.size() > r.limits().max_output_bytes) return r.make_str(std::move(out));  // fails
      }
      return r.make_str(std::move(out));
    };
    f["list"] = [=](Renderer& r, const Value& v, CallArgs& a) {
      no_args("the filter 'list'", a);
      return make_list(r.iterate(v));
    };
    f["lower"] = [=](Renderer& r, const Value& v, CallArgs& a) {
      no_args("the filter 'lower'", a);
      return r.make_str(text::lower(to_str(v)));
    };
    f["upper"] = [=](Renderer& r, const Value& v, CallArgs& a) {
      no_args("the filter 'upper'", a);
      return r.make_str(text::upper(to_str(v)));
    };
    f["title"] = [=](Renderer& r, const Value& v, CallArgs& a) {
      no_args("the filter 'title'", a);
      return r.make_str(text::title_filter(to_str(v)));
    };
    f["map"] = [](Renderer& r, const Value& v, CallArgs& a) {
      std::vector<Value> out;
      if (!truthy(v)) return make_list(std::move(out));
      if (a.pos.empty() && !a.kw.empty() && a.kw[0].first == "attribute") {
        Params p("the filter 'map'", a, {"attribute", "default"});
        const std::string attr = to_str(*p.get(0));
        for (const Value& item : r.iterate(v)) {
          Value x = attr_path(r, item, attr);
          if (x.is_undefined() && p.get(1)) x = *p.get(1);
          out.push_back(std::move(x));
        }
        return make_list(std::move(out));
      }
      if (a.pos.empty() || !a.pos[0].is_str()) throw Fail{"map requires a filter name or attribute="};
      const std::string name = a.pos[0].text();
      if (!has_filter(name)) throw Fail{"map: the filter '" + name + "' is not supported"};
      for (const Value& item : r.iterate(v)) {
        CallArgs rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        rest.kw = a.kw;
        out.push_back(apply_filter(r, name, item, rest));
      }
      return make_list(std::move(out));
    };
    f["select"] = [](Renderer& r, const Value& v, CallArgs& a) { return select_filter(r, v, a, false, true, "select"); };
    f["reject"] = [](Renderer& r, const Value& v, CallArgs& a) { return select_filter(r, v, a, false, false, "reject"); };
    f["selectattr"] = [](Renderer& r, const Value& v, CallArgs& a) {
      return select_filter(r, v, a, true, true, "selectattr");
    };
    f["rejectattr"] = [](Renderer& r, const Value& v, CallArgs& a) {
      return select_filter(r, v, a, true, false, "rejectattr");
    };
    f["replace"] = [](Renderer& r, const Value& v, CallArgs& a) {
      Params p("the filter 'replace'", a, {"old", "new", "count"});
      const std::string s = to_str(v);
      return r.make_str(text::replace(s, to_str(p.get_or(0, Value())), to_str(p.get_or(1, Value())),
                                      p.int_arg(2, -1), r.limits().max_output_bytes));
    };
    f["reverse"] = [=](Renderer& r, const Value& v, CallArgs& a) {
      no_args("the filter 'reverse'", a);
      if (v.is_str()) {
        std::u32string t = text::decode(v.text());
        std::reverse(t.begin(), t.end());
        return Value::str(text::encode(t));
      }
      std::vector<Value> items = r.iterate(v);
      std::reverse(items.begin(), items.end());
      return make_list(std::move(items));
    };
    f["safe"] = f["string"] = [=](Renderer& r, const Value& v, CallArgs& a) {
      no_args("the filter 'string'", a);
      return v.is_str() ? v : r.make_str(to_str(v, r.limits().max_output_bytes));
    };
    f["sort"] = [](Renderer& r, const Value& v, CallArgs& a) {
      Params p("the filter 'sort'", a, {"reverse", "case_sensitive", "attribute"});
      const bool rev = truthy(p.get_or(0, Value::boolean(false)));
      const bool cs = truthy(p.get_or(1, Value::boolean(false)));
      const Value* attr = p.get(2) && !p.get(2)->is_none() ? p.get(2) : nullptr;
      std::vector<std::pair<Value, Value>> keyed;
      for (const Value& item : r.iterate(v)) keyed.emplace_back(sort_key(r, item, attr, cs), item);
      std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& x, const auto& y) {
        return rev ? less(y.first, x.first) : less(x.first, y.first);
      });
      std::vector<Value> out;
      for (auto& kv : keyed) out.push_back(std::move(kv.second));
      return make_list(std::move(out));
    };
    f["unique"] = [](Renderer& r, const Value& v, CallArgs& a) {
      Params p("the filter 'unique'", a, {"case_sensitive", "attribute"});
      const bool cs = truthy(p.get_or(0, Value::boolean(false)));
      const Value* attr = p.get(1) && !p.get(1)->is_none() ? p.get(1) : nullptr;
      std::vector<Value> out;
      Map seen;
      for (const Value& item : r.iterate(v)) {
        const Value k = sort_key(r, item, attr, cs);
        if (seen.find(k)) continue;
        seen.set(k, Value::none());
        out.push_back(item);
      }
      return make_list(std::move(out));
    };
    f["trim"] = [](Renderer& r, const Value& v, CallArgs& a) {
      Params p("the filter 'trim'", a, {"chars"});
      std::optional<std::string> chars;
      if (p.get(0) && !p.get(0)->is_none()) chars = to_str(*p.get(0));
      return r.make_str(text::strip(to_str(v), chars, true, true));
    };
    f["tojson"] = filter_tojson;
    f["indent"] = filter_indent;
    return f;
  }();
  return table;
}

using TestFn = std::function<bool(Renderer&, const Value&, CallArgs&)>;

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = [] {
    std::unordered_map<std::string, TestFn> t;
    const auto unary = [&t](std::initializer_list<const char*> names, std::function<bool(const Value&)> fn) {
      for (const char* n : names)
        t[n] = [fn, n](Renderer&, const Value& v, CallArgs& a) {
          Params(std::string("the test '") + n + "'", a, {});
          return fn(v);
        };
    };
    unary({"defined"}, [](const Value& v) { return !v.is_undefined(); });
    unary({"undefined"}, [](const Value& v) { return v.is_undefined(); });
    unary({"none"}, [](const Value& v) { return v.is_none(); });
    unary({"boolean"}, [](const Value& v) { return v.kind == Kind::Bool; });
    unary({"true"}, [](const Value& v) { return v.kind == Kind::Bool && v.b; });
    unary({"false"}, [](const Value& v) { return v.kind == Kind::Bool && !v.b; });
    unary({"integer"}, [](const Value& v) { return v.kind == Kind::Int; });
    unary({"float"}, [](const Value& v) { return v.kind == Kind::Float; });
    unary({"number"}, [](const Value& v) { return v.is_number(); });
    unary({"string"}, [](const Value& v) { return v.is_str(); });
    unary({"mapping"}, [](const Value& v) { return v.is_dict(); });
    unary({"iterable", "sequence"},
          [](const Value& v) { return v.is_undefined() || v.is_str() || v.is_list() || v.is_dict(); });
    unary({"callable"}, [](const Value& v) { return v.kind == Kind::Func || v.is_undefined(); });
    unary({"lower"}, [](const Value& v) { return text::is_lower(to_str(v)); });
    unary({"upper"}, [](const Value& v) { return text::is_upper(to_str(v)); });
    // jinja2: odd is value % 2 == 1, even value % 2 == 0, divisibleby value % num == 0 (Python's %).
    const auto modulo = [](const Value& v, std::int64_t d) {
      if (v.is_undefined()) fail_undefined(v);
      if (v.kind == Kind::Float) {
        double m = std::fmod(v.f, static_cast<double>(d));
        if (m != 0 && ((m < 0) != (d < 0))) m += static_cast<double>(d);
        return Value::number(m);
      }
      if (!v.is_int_like()) throw Fail{"unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'"};
      if (d == -1) return Value::integer(0);
      std::int64_t m = v.as_int() % d;
      if (m != 0 && ((m < 0) != (d < 0))) m += d;
      return Value::integer(m);
    };
    unary({"odd"}, [modulo](const Value& v) { return equals(modulo(v, 2), Value::integer(1)); });
    unary({"even"}, [modulo](const Value& v) { return equals(modulo(v, 2), Value::integer(0)); });
    t["divisibleby"] = [modulo](Renderer&, const Value& v, CallArgs& a) {
      Params p("the test 'divisibleby'", a, {"num"});
      const std::int64_t d = p.int_arg(0, 0);
      if (d == 0) throw Fail{"integer division or modulo by zero"};
      return equals(modulo(v, d), Value::integer(0));
    };
    const auto binary = [&t](std::initializer_list<const char*> names,
                             std::function<bool(const Value&, const Value&)> fn) {
      for (const char* n : names)
        t[n] = [fn, n](Renderer&, const Value& v, CallArgs& a) {
          Params p(std::string("the test '") + n + "'", a, {"other"});
          if (!p.get(0)) throw Fail{std::string("the test '") + n + "' needs an argument"};
          return fn(v, *p.get(0));
        };
    };
    binary({"==", "eq", "equalto"}, [](const Value& a, const Value& b) { return equals(a, b); });
    binary({"!=", "ne"}, [](const Value& a, const Value& b) { return !equals(a, b); });
    binary({">", "gt", "greaterthan"}, [](const Value& a, const Value& b) { return less(b, a, ">"); });
    binary({">=", "ge"}, [](const Value& a, const Value& b) { return !less(a, b, ">="); });
    binary({"<", "lt", "lessthan"}, [](const Value& a, const Value& b) { return less(a, b, "<"); });
    binary({"<=", "le"}, [](const Value& a, const Value& b) { return !less(b, a, "<="); });
    binary({"in"}, [](const Value& a, const Value& b) { return contains(b, a); });
    binary({"sameas"}, [](const Value& a, const Value& b) {
      if (a.kind != b.kind) return false;
      if (a.is_list()) return a.arr == b.arr;
      if (a.map || a.fn) return a.map == b.map && a.fn == b.fn;
      return equals(a, b);
    });
    return t;
  }();
  return table;
}

Value func(std::string name, std::function<Value(Renderer&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->call = std::move(fn);
  Value v;
  v.kind = Kind::Func;
  v.fn = std::move(c);
  return v;
}

// jinja2's sandbox refuses ranges of more than MAX_RANGE items.
constexpr std::int64_t kMaxRange = 100000;

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) != 0; }
bool has_test(const std::string& name) { return tests().count(name) != 0; }

Value apply_filter(Renderer& r, const std::string& name, const Value& subject, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) throw Fail{"the filter '" + name + "' is not supported"};
  return it->second(r, subject, args);
}

bool apply_test(Renderer& r, const std::string& name, const Value& subject, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) throw Fail{"the test '" + name + "' is not supported"};
  return it->second(r, subject, args);
}

void add_globals(std::unordered_map<std::string, Value>& frame) {
  frame["raise_exception"] = func("raise_exception", [](Renderer&, CallArgs& a) -> Value {
    Params p("raise_exception()", a, {"message"});
    throw Raised{to_str(p.get_or(0, Value()))};
  });
  frame["range"] = func("range", [](Renderer&, CallArgs& a) {
    if (!a.kw.empty()) throw Fail{"range() takes no keyword arguments"};
    if (a.pos.empty() || a.pos.size() > 3) throw Fail{"range expected 1 to 3 arguments"};
    for (const Value& v : a.pos)
      if (!v.is_int_like()) throw Fail{"range: '" + type_name(v) + "' object cannot be interpreted as an integer"};
    const std::int64_t start = a.pos.size() > 1 ? a.pos[0].as_int() : 0;
    const std::int64_t stop = a.pos.size() > 1 ? a.pos[1].as_int() : a.pos[0].as_int();
    const std::int64_t step = a.pos.size() > 2 ? a.pos[2].as_int() : 1;
    if (step == 0) throw Fail{"range() arg 3 must not be zero"};
    const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 n = span <= 0 ? 0 : (span + (step > 0 ? step : -static_cast<__int128>(step)) - 1) /
                                           (step > 0 ? step : -static_cast<__int128>(step));
    if (n > kMaxRange)
      throw Fail{"Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ")."};
    std::vector<Value> items;
    for (__int128 k = 0; k < n; ++k) items.push_back(Value::integer(static_cast<std::int64_t>(start + k * step)));
    return Value::list(std::move(items));
  });
  const auto make_map = [](const char* fn, CallArgs& a, bool ns) {
    auto m = std::make_shared<Map>();
    if (a.pos.size() > 1) throw Fail{std::string(fn) + " takes at most 1 positional argument"};
    if (!a.pos.empty()) {
      const Value& init = a.pos[0];
      if (init.is_dict()) {
        for (const auto& [k, v] : init.map->items) m->set(k, v);
      } else if (init.is_list()) {
        for (const Value& pair : init.arr->items) {
          if (!pair.is_list() || pair.arr->items.size() != 2)
            throw Fail{std::string(fn) + ": each item of the sequence must be a pair"};
          m->set(pair.arr->items[0], pair.arr->items[1]);
        }
      } else if (!init.is_undefined()) {
        throw Fail{std::string(fn) + ": '" + type_name(init) + "' object is not a mapping or a sequence of pairs"};
      }
    }
    for (auto& [k, v] : a.kw) m->set(Value::str(k), v);
    if (ns && m->has_ns) throw Fail{"a namespace cannot hold a namespace, loop or function"};
    if (ns)
      for (const auto& kv : m->items)
        if (kv.first.is_str() && !kv.first.text().empty() && kv.first.text()[0] == '_')
          throw Fail{"chat templates cannot store underscore-prefixed attributes on a namespace ('" +
                     kv.first.text() + "')"};
    return m;
  };
  frame["namespace"] = func("namespace", [make_map](Renderer&, CallArgs& a) {
    Value v;
    v.kind = Kind::Namespace;
    v.map = make_map("namespace", a, true);
    return v;
  });
  frame["dict"] = func("dict", [make_map](Renderer&, CallArgs& a) { return Value::dict(make_map("dict", a, false)); });
  frame["strftime_now"] = func("strftime_now", [](Renderer& r, CallArgs& a) {
    Params p("strftime_now()", a, {"format"});
    const std::string fmt = p.str_arg(0);
    if (fmt.size() > 256) throw Fail{"strftime_now: the format is longer than 256 bytes"};
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::string out(fmt.size() * 16 + 64, '\0');
    const std::size_t n = fmt.empty() ? 0 : std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
    out.resize(n);
    return r.make_str(std::move(out));
  });
}

}  // namespace qkv::jinja
