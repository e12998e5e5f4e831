// Attribute and item access as jinja2's ImmutableSandboxedEnvironment does them, and the methods
// of str, dict and list that a sandboxed template may call.
//
//   x.name   (getattr): a method of x if it has one, else x["name"], else Undefined;
//   x[key]   (getitem): x[key] if it exists, else (key a str) a method of x, else Undefined.
// Methods that would change a list or dict (append, pop, update, ...) are refused as the sandbox
// refuses them: the attribute is an Undefined whose use is an error naming it.
#include <algorithm>

#include "builtins.h"
#include "render.h"
#include "text.h"

namespace qkv::jinja {

namespace {

Value bound(const std::string& name, std::function<Value(Renderer&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->call = std::move(fn);
  Value v;
  v.kind = Kind::Func;
  v.fn = std::move(c);
  return v;
}

std::optional<std::string> opt_str(const Params& p, std::size_t k, const char* fn) {
  const Value* v = p.get(k);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_str()) throw Fail{std::string(fn) + ": the argument must be a string or None, not " + type_name(*v)};
  return v->text();
}

// str.startswith / endswith: a prefix or a tuple of prefixes, optional start / end (code points).
bool affix(const std::string& s, const CallArgs& a, bool start, const char* fn) {
  Params p(fn, a, {"prefix", "start", "end"});
  if (!p.get(0)) throw Fail{std::string(fn) + " takes at least 1 argument (0 given)"};
  std::string subject = s;
  if (p.get(1) || p.get(2)) {
    const std::u32string t = text::decode(s);
    const auto n = static_cast<std::int64_t>(t.size());
    std::int64_t b = p.int_arg(1, 0), e = p.int_arg(2, n);
    if (b < 0) b = std::max<std::int64_t>(b + n, 0);
    if (e < 0) e = std::max<std::int64_t>(e + n, 0);
    b = std::min(b, n);
    e = std::min(e, n);
    if (b > e) return false;
    subject = text::encode(std::u32string_view(t).substr(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b)));
  }
  std::vector<Value> options;
  if (p.get(0)->is_list() && p.get(0)->arr->tuple)
    options = p.get(0)->arr->items;
  else
    options.push_back(*p.get(0));
  for (const Value& o : options) {
    if (!o.is_str())
      throw Fail{std::string(fn) + " first arg must be str or a tuple of str, not " + type_name(o)};
    const std::string& x = o.text();
    if (x.size() <= subject.size() &&
        (start ? subject.compare(0, x.size(), x) == 0 : subject.compare(subject.size() - x.size(), x.size(), x) == 0))
      return true;
  }
  return false;
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  const std::u32string t = text::decode(s);
  return !t.empty() && std::all_of(t.begin(), t.end(), pred);
}

std::optional<Value> str_method(const Value& obj, const std::string& name) {
  const std::string s = obj.text();
  const std::string fn = "str." + name;
  const auto strip = [&](bool l, bool r) {
    return bound(fn, [s, fn, l, r](Renderer& rd, CallArgs& a) {
      Params p(fn, a, {"chars"});
      return rd.make_str(text::strip(s, opt_str(p, 0, fn.c_str()), l, r));
    });
  };
  if (name == "strip") return strip(true, true);
  if (name == "lstrip") return strip(true, false);
  if (name == "rstrip") return strip(false, true);
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return bound(fn, [s, fn, right](Renderer&, CallArgs& a) {
      Params p(fn, a, {"sep", "maxsplit"});
      std::vector<Value> parts;
      for (std::string& part : text::split(s, opt_str(p, 0, fn.c_str()), p.int_arg(1, -1), right))
        parts.push_back(Value::str(std::move(part)));
      return Value::list(std::move(parts));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return bound(fn, [s, fn, start](Renderer&, CallArgs& a) { return Value::boolean(affix(s, a, start, fn.c_str())); });
  }
  using Map1 = std::string (*)(std::string_view);
  const auto mapping = [&](Map1 f) {
    return bound(fn, [s, fn, f](Renderer& r, CallArgs& a) {
      Params(fn, a, {});
      return r.make_str(f(s));
    });
  };
  if (name == "upper") return mapping(text::upper);
  if (name == "lower") return mapping(text::lower);
  if (name == "title") return mapping(text::title);
  if (name == "capitalize") return mapping(text::capitalize);
  if (name == "replace")
    return bound(fn, [s, fn](Renderer& r, CallArgs& a) {
      Params p(fn, a, {"old", "new", "count"});
      return r.make_str(text::replace(s, p.str_arg(0), p.str_arg(1), p.int_arg(2, -1), r.limits().max_output_bytes));
    });
  if (name == "find" || name == "count" || name == "index") {
    return bound(fn, [s, fn, name](Renderer&, CallArgs& a) {
      Params p(fn, a, {"sub"});
      const std::string sub = p.str_arg(0);
      if (name == "count") return Value::integer(text::count(s, sub));
      const std::int64_t at = text::find(s, sub);
      if (at < 0 && name == "index") throw Fail{"substring not found"};
      return Value::integer(at);
    });
  }
  if (name == "join")
    return bound(fn, [s, fn](Renderer& r, CallArgs& a) {
      Params p(fn, a, {"iterable"});
      if (!p.get(0)) throw Fail{"str.join takes exactly one argument (0 given)"};
      std::string out;
      bool first = true;
      for (const Value& item : r.iterate(*p.get(0))) {
        if (!item.is_str()) throw Fail{"sequence item: expected str instance, " + type_name(item) + " found"};
        if (!first) out += s;
        first = false;
        out += item.text();
        if (out.size() > r.limits().max_output_bytes) return r.make_str(std::move(out));  // fails
      }
      return r.make_str(std::move(out));
    });
  using Pred = bool (*)(char32_t);
  const auto predicate = [&](Pred pred) {
    return bound(fn, [s, fn, pred](Renderer&, CallArgs& a) {
      Params(fn, a, {});
      return Value::boolean(all_chars(s, pred));
    });
  };
  if (name == "isspace") return predicate(text::is_space);
  if (name == "isdigit") return predicate([](char32_t c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha")
    return predicate([](char32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; });
  if (name == "isalnum")
    return predicate([](char32_t c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); });
  if (name == "islower" || name == "isupper") {
    const bool lower = name == "islower";
    return bound(fn, [s, fn, lower](Renderer&, CallArgs& a) {
      Params(fn, a, {});
      return Value::boolean(lower ? text::is_lower(s) : text::is_upper(s));
    });
  }
  if (name == "format" || name == "format_map")
    return Value::undefined("str." + name + " is not supported in chat templates");
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& obj, const std::string& name) {
  const std::shared_ptr<Map> m = obj.map;
  const std::string fn = "dict." + name;
  if (name == "items" || name == "keys" || name == "values") {
    return bound(fn, [m, fn, name](Renderer&, CallArgs& a) {
      Params(fn, a, {});
      std::vector<Value> out;
      for (const auto& [k, v] : m->items)
        out.push_back(name == "items" ? Value::list({k, v}, true) : name == "keys" ? k : v);
      return Value::list(std::move(out));
    });
  }
  if (name == "get")
    return bound(fn, [m, fn](Renderer&, CallArgs& a) {
      Params p(fn, a, {"key", "default"});
      if (!p.get(0)) throw Fail{"dict.get expected at least 1 argument, got 0"};
      const Value* v = m->find(*p.get(0));
      return v ? *v : p.get_or(1, Value::none());
    });
  static const char* const mutating[] = {"pop", "popitem", "setdefault", "update", "clear"};
  for (const char* x : mutating)
    if (name == x)
      return Value::undefined("access to attribute '" + name +
                              "' of 'dict' object is unsafe (chat templates cannot change a dict)");
  if (name == "copy" || name == "fromkeys") return Value::undefined("dict." + name + " is not supported in chat templates");
  return std::nullopt;
}

std::optional<Value> list_method(const Value& obj, const std::string& name) {
  const std::shared_ptr<const Array> arr = obj.arr;
  const std::string fn = type_name(obj) + "." + name;
  if (name == "index" || name == "count") {
    return bound(fn, [arr, fn, name](Renderer&, CallArgs& a) {
      Params p(fn, a, {"value"});
      if (!p.get(0)) throw Fail{fn + " takes exactly one argument (0 given)"};
      std::int64_t n = 0;
      for (std::size_t k = 0; k < arr->items.size(); ++k) {
        if (!equals(arr->items[k], *p.get(0))) continue;
        if (name == "index") return Value::integer(static_cast<std::int64_t>(k));
        ++n;
      }
      if (name == "index") throw Fail{"the value is not in the list"};
      return Value::integer(n);
    });
  }
  static const char* const mutating[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  for (const char* x : mutating)
    if (name == x)
      return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) +
                              "' object is unsafe (chat templates cannot change a list)");
  return std::nullopt;
}

}  // namespace

std::optional<Value> method_of(const Value& obj, const std::string& name) {
  if (obj.is_str()) return str_method(obj, name);
  if (obj.is_dict()) return dict_method(obj, name);
  if (obj.is_list()) return list_method(obj, name);
  return std::nullopt;
}

Value Renderer::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_')
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe");
  if (std::optional<Value> m = method_of(obj, name)) return *m;
  if (obj.is_dict() || obj.kind == Kind::Namespace || obj.kind == Kind::Loop) {
    if (const Value* v = obj.map->find(name)) return *v;
  }
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
}

Value Renderer::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (key.is_str() || key.is_number() || key.is_none())
      if (const Value* v = obj.map->find(key)) return *v;
  } else if ((obj.is_list() || obj.is_str()) && key.is_int_like()) {
    const std::int64_t n = obj.is_list() ? static_cast<std::int64_t>(obj.arr->items.size()) : text::length(obj.text());
    std::int64_t k = key.as_int();
    if (k < 0) k += n;
    if (k >= 0 && k < n) {
      if (obj.is_list()) return obj.arr->items[static_cast<std::size_t>(k)];
      return Value::str(text::encode(std::u32string(1, text::decode(obj.text())[static_cast<std::size_t>(k)])));
    }
  }
  if (key.is_str()) {
    if (obj.kind == Kind::Namespace || obj.kind == Kind::Loop || (!obj.is_dict() && !obj.is_list() && !obj.is_str()))
      return getattr(obj, key.text());
    if (std::optional<Value> m = method_of(obj, key.text())) return *m;
    return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + key.text() + "'");
  }
  return Value::undefined(type_name(obj) + " object has no element " + repr(key));
}

}  // namespace qkv::jinja
