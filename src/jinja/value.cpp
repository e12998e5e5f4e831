// Values of qkv's Jinja2 subset with Python's semantics (see value.h): keys, truth, str(),
// repr(), ==, <, `in`, and json.dumps as transformers' tojson calls it.
#include "value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "text.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::jinja {

namespace utf8 = ::qkv::tokenize::utf8;

namespace {
thread_local Budget* current_budget = nullptr;
}  // namespace

BudgetScope::BudgetScope(Budget* b) : saved_(current_budget) { current_budget = b; }
BudgetScope::~BudgetScope() { current_budget = saved_; }

void charge(std::uint64_t units) {
  Budget* b = current_budget;
  if (!b) return;
  b->used += units;
  if (b->used > b->limit)
    throw Fail{"the template does too much work (over " + std::to_string(b->limit) +
               " steps: max_work); it may loop or build huge values"};
}

Value Value::undefined(std::string message) {
  Value v;
  v.s = std::make_shared<const std::string>(std::move(message));
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}
Value Value::integer(std::int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::str(std::string x) {
  Value v;
  v.kind = Kind::Str;
  v.s = std::make_shared<const std::string>(std::move(x));
  return v;
}
Value Value::list(std::vector<Value> items, bool tuple) {
  if (items.size() > kMaxItems)
    throw Fail{"a list of " + std::to_string(items.size()) + " items is more than the " + std::to_string(kMaxItems) +
               " a chat template may build"};
  charge(items.size() + 1);
  auto a = std::make_shared<Array>();
  int depth = 0;
  for (const Value& x : items) {
    depth = std::max(depth, x.depth());
    a->has_ns = a->has_ns || holds_namespace(x);
  }
  if (depth + 1 > kMaxDepth) throw Fail{"a list nests deeper than " + std::to_string(kMaxDepth) + " levels"};
  a->depth = depth + 1;
  a->items = std::move(items);
  a->tuple = tuple;
  Value v;
  v.kind = Kind::List;
  v.arr = std::move(a);
  return v;
}
Value Value::dict(std::shared_ptr<Map> m) {
  Value v;
  v.kind = Kind::Dict;
  v.map = std::move(m);
  return v;
}

double Value::as_double() const {
  return kind == Kind::Float ? f : static_cast<double>(as_int());
}

int Value::depth() const {
  if (kind == Kind::List) return arr->depth;
  if (kind == Kind::Dict || kind == Kind::Namespace || kind == Kind::Loop) return map->depth;
  return 0;
}

bool holds_namespace(const Value& v) {
  switch (v.kind) {
    case Kind::Namespace: case Kind::Loop: case Kind::Func: return true;
    case Kind::List: return v.arr->has_ns;
    case Kind::Dict: return v.map->has_ns;
    default: return false;
  }
}

std::string map_key(const Value& key) {
  switch (key.kind) {
    case Kind::Str: return "s" + key.text();
    case Kind::Int: case Kind::Bool: return "i" + std::to_string(key.as_int());
    case Kind::Float:
      if (std::isfinite(key.f) && key.f == std::trunc(key.f) && std::fabs(key.f) < 9.2e18)
        return "i" + std::to_string(static_cast<std::int64_t>(key.f));
      return "f" + float_repr(key.f);
    case Kind::None: return "n";
    case Kind::Undefined: return "u";  // jinja2's Undefined is hashable (and equal to any Undefined)
    default: throw Fail{"unhashable type: '" + type_name(key) + "' cannot be a dict key"};
  }
}

const Value* Map::find(const Value& key) const {
  const auto it = index.find(map_key(key));
  return it == index.end() ? nullptr : &items[it->second].second;
}

const Value* Map::find(const std::string& key) const {
  const auto it = index.find("s" + key);
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Map::set(const Value& key, Value value) {
  const std::string k = map_key(key);
  depth = std::max(depth, value.depth() + 1);
  has_ns = has_ns || holds_namespace(value);
  if (depth > kMaxDepth)
    throw Fail{"a dict or namespace nests deeper than " + std::to_string(kMaxDepth) + " levels"};
  const auto it = index.find(k);
  if (it != index.end()) {
    items[it->second].second = std::move(value);
    return;
  }
  if (items.size() >= kMaxItems)
    throw Fail{"a dict of more than " + std::to_string(kMaxItems) + " items is more than a chat template may build"};
  charge(k.size() + 1);
  index.emplace(k, items.size());
  items.emplace_back(key, std::move(value));
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::List: return v.arr->tuple ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Loop: return "LoopContext";
    case Kind::Func: return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0.0;
    case Kind::Str: return !v.s->empty();
    case Kind::List: return !v.arr->items.empty();
    case Kind::Dict: return !v.map->items.empty();
    default: return true;
  }
}

void fail_undefined(const Value& v) {
  throw Fail{v.s && !v.s->empty() ? *v.s : std::string("a value is undefined")};
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: exponent form when exp < -4 or exp >= 16.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const std::size_t e_at = sci.find('e');
  std::string mant = sci.substr(0, e_at);
  const int exp = std::stoi(sci.substr(e_at + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + e;
  }
  if (exp < 0) return out + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  const std::size_t int_len = static_cast<std::size_t>(exp) + 1;
  if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

namespace {

std::string repr_str(const std::string& s) {
  charge(s.size() + 1);
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : text::decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!text::is_printable(c)) {
      char buf[16];
      if (c < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else {
      utf8::append_code_point(c, out);
    }
  }
  out += quote;
  return out;
}

void check_size(const std::string& out, std::size_t max_bytes) {
  charge(out.size() / 64 + 1);
  if (out.size() > max_bytes)
    throw Fail{"printing a value would exceed the limit of " + std::to_string(max_bytes) + " bytes"};
}

std::string repr_map(const Map& m, std::size_t max_bytes) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : m.items) {
    if (!first) out += ", ";
    first = false;
    out += repr(k, max_bytes) + ": " + repr(v, max_bytes);
    check_size(out, max_bytes);
  }
  return out + "}";
}

}  // namespace

std::string repr(const Value& v, std::size_t max_bytes) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::Str: return repr_str(*v.s);
    case Kind::List: {
      const auto& items = v.arr->items;
      std::string out = v.arr->tuple ? "(" : "[";
      for (std::size_t k = 0; k < items.size(); ++k) {
        out += (k ? ", " : "") + repr(items[k], max_bytes);
        check_size(out, max_bytes);
      }
      if (v.arr->tuple && items.size() == 1) out += ",";
      return out + (v.arr->tuple ? ")" : "]");
    }
    case Kind::Dict: return repr_map(*v.map, max_bytes);
    case Kind::Namespace: return "<Namespace " + repr_map(*v.map, max_bytes) + ">";
    case Kind::Loop: return "<LoopContext>";
    case Kind::Func: return v.fn->repr.empty() ? "<function " + v.fn->name + ">" : v.fn->repr;
    default: return to_str(v);
  }
}

std::string to_str(const Value& v, std::size_t max_bytes) {
  switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return float_repr(v.f);
    case Kind::Str: return *v.s;
    default: return repr(v, max_bytes);
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined: case Kind::None: return true;
    case Kind::Str:
      if (a.s == b.s) return true;
      charge(std::min(a.s->size(), b.s->size()) / 8 + 1);
      return *a.s == *b.s;
    case Kind::List: {
      if (a.arr == b.arr) return true;
      charge(a.arr->items.size() + 1);
      if (a.arr->tuple != b.arr->tuple || a.arr->items.size() != b.arr->items.size()) return false;
      for (std::size_t k = 0; k < a.arr->items.size(); ++k)
        if (!equals(a.arr->items[k], b.arr->items[k])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.map == b.map) return true;
      if (a.map->items.size() != b.map->items.size()) return false;
      charge(a.map->items.size() + 1);
      for (const auto& [k, v] : a.map->items) {
        const Value* other = b.map->find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default: return a.map == b.map && a.fn == b.fn;  // identity
  }
}

bool less(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_str() && b.is_str()) {
    charge(std::min(a.s->size(), b.s->size()) / 8 + 1);
    return *a.s < *b.s;  // UTF-8 byte order is code point order
  }
  if (a.is_list() && b.is_list() && a.arr->tuple == b.arr->tuple) {
    const auto& x = a.arr->items;
    const auto& y = b.arr->items;
    for (std::size_t k = 0; k < x.size() && k < y.size(); ++k)
      if (!equals(x[k], y[k])) return less(x[k], y[k], op);
    return x.size() < y.size();
  }
  throw Fail{std::string("'") + op + "' is not supported between instances of '" + type_name(a) + "' and '" +
             type_name(b) + "'"};
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::Undefined: return false;
    case Kind::Str:
      if (!item.is_str())
        throw Fail{"'in <string>' requires a string as the left operand, not " + type_name(item)};
      charge(container.s->size() / 8 + 1);
      return container.s->find(*item.s) != std::string::npos;
    case Kind::List:
      charge(container.arr->items.size() + 1);
      return std::any_of(container.arr->items.begin(), container.arr->items.end(),
                         [&](const Value& x) { return equals(x, item); });
    case Kind::Dict: return container.map->find(item) != nullptr;
    default: throw Fail{"argument of type '" + type_name(container) + "' is not iterable"};
  }
}

namespace {

void json_str(const std::string& s, bool ensure_ascii, std::string& out) {
  charge(s.size() + 1);
  out += '"';
  for (char32_t c : text::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char buf[16];
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {  // a surrogate pair
            const char32_t u = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (u >> 10)),
                          static_cast<unsigned>(0xDC00 + (u & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          utf8::append_code_point(c, out);
        }
      }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return float_repr(d);
}

// A dict key as json.dumps writes it (str keys as they are; numbers, bools and None converted).
std::string json_key(const Value& k) {
  switch (k.kind) {
    case Kind::Str: return *k.s;
    case Kind::Bool: return k.b ? "true" : "false";
    case Kind::Int: return std::to_string(k.i);
    case Kind::Float: return json_float(k.f);
    case Kind::None: return "null";
    default: throw Fail{"tojson: keys must be str, int, float, bool or None, not " + type_name(k)};
  }
}

void json_value(const Value& v, const JsonStyle& st, int level, std::string& out) {
  const auto newline = [&](int lvl) {
    if (st.indent < 0) return;
    if (out.size() + static_cast<std::size_t>(st.indent) * static_cast<std::size_t>(lvl) >= st.max_bytes)
      throw Fail{"tojson: the JSON would exceed the limit of " + std::to_string(st.max_bytes) + " bytes"};
    out += '\n';
    out.append(static_cast<std::size_t>(st.indent) * static_cast<std::size_t>(lvl), ' ');
  };
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float: out += json_float(v.f); return;
    case Kind::Str:
      json_str(*v.s, st.ensure_ascii, out);
      if (out.size() > st.max_bytes)
        throw Fail{"tojson: the JSON would exceed the limit of " + std::to_string(st.max_bytes) + " bytes"};
      return;
    case Kind::List: {
      const auto& items = v.arr->items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        newline(level + 1);
        json_value(items[k], st, level + 1, out);
      }
      newline(level);
      out += ']';
      return;
    }
    case Kind::Dict: {
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, x] : v.map->items) {
        if (st.sort_keys && !k.is_str())
          throw Fail{"tojson: sort_keys needs str keys, and a key is " + type_name(k)};
        items.emplace_back(json_key(k), &x);
      }
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        newline(level + 1);
        json_str(items[k].first, st.ensure_ascii, out);
        out += st.key_sep;
        json_value(*items[k].second, st, level + 1, out);
      }
      newline(level);
      out += '}';
      return;
    }
    default: throw Fail{"tojson: Object of type " + type_name(v) + " is not JSON serializable"};
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(v, style, 0, out);
  return out;
}

}  // namespace qkv::jinja
