// Rendering a parsed template (see render.h): statements, expressions, scoping, and the
// arithmetic of Python's int, float, str and list.
#include "render.h"

#include <algorithm>
#include <cmath>

#include "builtins.h"
#include "text.h"

namespace qkv::jinja {

namespace {

// Every node evaluated and every loop iteration costs this much of the work budget (a byte
// touched costs 1): measured here, the default budget (2^31) is then ~1-3 s of the slowest work.
constexpr std::uint64_t kNodeCost = 128;
constexpr std::uint64_t kIterationCost = 512;

std::int64_t checked(bool overflow, std::int64_t v) {
  if (overflow) throw Fail{"integer overflow: the result does not fit in 64 bits"};
  return v;
}

}  // namespace

Renderer::Renderer(const Program& program, const SourceMap& map, const std::string& source_name,
                   const Limits& limits)
    : program_(program), map_(map), source_name_(source_name), limits_(limits) {
  budget_.limit = limits.max_work;
}

void Renderer::fail(std::size_t pos, const std::string& message, bool raised) const {
  throw_template_error(map_, source_name_, pos, message, raised);
}

std::string Renderer::render(Frame vars) {
  BudgetScope scope(&budget_);
  Frame globals;
  add_globals(globals);
  for (auto& [k, v] : vars) globals[k] = std::move(v);
  mark_undefined(globals, program_.root_undefined);
  frames_.clear();
  frames_.push_back(std::move(globals));
  out_.clear();
  exec_body(program_.body);
  return std::move(out_);
}

Value Renderer::make_str(std::string s) const {
  if (s.size() > limits_.max_output_bytes)
    throw Fail{"a string of " + std::to_string(s.size()) + " bytes is longer than the output limit of " +
               std::to_string(limits_.max_output_bytes) + " bytes (max_output_bytes)"};
  charge(s.size() / 8 + 1);
  return Value::str(std::move(s));
}

void Renderer::write(const std::string& s) {
  if (out_.size() + s.size() > limits_.max_output_bytes)
    throw Fail{"the output would exceed the limit of " + std::to_string(limits_.max_output_bytes) +
               " bytes (max_output_bytes)"};
  charge(s.size() / 8 + 1);
  out_ += s;
}

// ---- statements ----

void Renderer::mark_undefined(Frame& f, const std::vector<std::string>& names) {
  for (const std::string& n : names) f[n] = Value::undefined("'" + n + "' is undefined");
}

Renderer::Flow Renderer::exec_scope(const std::vector<StmtPtr>& body, const std::vector<std::string>& undefined,
                                    Frame init) {
  mark_undefined(init, undefined);
  frames_.push_back(std::move(init));
  Flow f;
  try {
    f = exec_body(body);
  } catch (...) {
    frames_.pop_back();
    throw;
  }
  frames_.pop_back();
  return f;
}

Renderer::Flow Renderer::exec_body(const std::vector<StmtPtr>& body) {
  for (const StmtPtr& s : body) {
    const Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec(const Stmt& s) {
  try {
    charge(kNodeCost);
    switch (s.kind) {
      case SK::Data: write(s.text); break;
      case SK::Print: write(to_str(eval(*s.expr), limits_.max_output_bytes)); break;
      case SK::If: return exec_body(truthy(eval(*s.expr)) ? s.body : s.else_body);
      case SK::For: return exec_for(s);
      case SK::Set: exec_set(s); break;
      case SK::SetBlock: {
        std::string saved;
        saved.swap(out_);
        try {
          exec_scope(s.body, s.undefined_names);
        } catch (...) {
          out_.swap(saved);
          throw;
        }
        out_.swap(saved);
        assign(*s.target, Value::str(std::move(saved)));
        break;
      }
      case SK::Macro: {
        const Stmt* m = &s;
        auto fn = std::make_shared<Callable>();
        fn->name = "macro '" + s.text + "'";
        fn->repr = "<Macro '" + s.text + "'>";
        fn->call = [m](Renderer& r, CallArgs& args) { return r.call_macro(*m, args); };
        Value v;
        v.kind = Kind::Func;
        v.fn = std::move(fn);
        frames_.back()[s.text] = std::move(v);
        break;
      }
      case SK::Break: return Flow::Break;
      case SK::Continue: return Flow::Continue;
      case SK::Generation: return exec_scope(s.body, s.undefined_names);
      case SK::With: {
        Frame f;
        for (std::size_t k = 0; k < s.params.size(); ++k) f[s.params[k]] = eval(*s.defaults[k]);
        return exec_scope(s.body, s.undefined_names, std::move(f));
      }
    }
  } catch (const Fail& f) {
    fail(s.pos, f.message);
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_for(const Stmt& s) {
  std::vector<Value> items = iterate(eval(*s.expr));
  if (s.filter) {
    // `for x in xs if cond`: the condition sees the loop variable (not `loop`).
    std::vector<Value> kept;
    for (Value& item : items) {
      if (++iterations_ > limits_.max_loop_iterations) break;
      frames_.emplace_back();
      assign(*s.target, item);
      const bool keep = truthy(eval(*s.filter));
      frames_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const std::int64_t n = static_cast<std::int64_t>(items.size());
  // One loop object for the whole loop, updated in place each iteration (as jinja2's LoopContext).
  static const char* const kLoopKeys[] = {"index0", "index", "revindex0", "revindex", "first", "last",
                                          "length", "depth", "depth0", "previtem", "nextitem", "cycle"};
  auto loop = std::make_shared<Map>();
  for (const char* key : kLoopKeys) loop->set(Value::str(key), Value::none());
  auto cycle = std::make_shared<Callable>();
  cycle->name = "loop.cycle";
  cycle->call = [weak = std::weak_ptr<Map>(loop)](Renderer&, CallArgs& args) {
    const std::shared_ptr<Map> l = weak.lock();
    if (!l) throw Fail{"loop.cycle was called after its loop ended"};
    if (args.pos.empty() || !args.kw.empty()) throw Fail{"loop.cycle needs at least one positional argument"};
    return args.pos[static_cast<std::size_t>(l->items[0].second.i) % args.pos.size()];
  };
  loop->items[11].second.kind = Kind::Func;
  loop->items[11].second.fn = std::move(cycle);
  loop->items[7].second = Value::integer(1);
  loop->items[8].second = Value::integer(0);
  loop->items[6].second = Value::integer(n);
  Value lv;
  lv.kind = Kind::Loop;
  lv.map = loop;
  for (std::int64_t k = 0; k < n; ++k) {
    if (++iterations_ > limits_.max_loop_iterations)
      throw Fail{"the template runs more than " + std::to_string(limits_.max_loop_iterations) +
                 " loop iterations (max_loop_iterations)"};
    charge(kIterationCost);
    auto& li = loop->items;
    li[0].second = Value::integer(k);
    li[1].second = Value::integer(k + 1);
    li[2].second = Value::integer(n - k - 1);
    li[3].second = Value::integer(n - k);
    li[4].second = Value::boolean(k == 0);
    li[5].second = Value::boolean(k == n - 1);
    li[9].second = k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value::undefined("there is no previous item");
    li[10].second = k + 1 < n ? items[static_cast<std::size_t>(k + 1)] : Value::undefined("there is no next item");
    for (std::size_t x : {std::size_t{9}, std::size_t{10}}) loop->depth = std::max(loop->depth, li[x].second.depth() + 1);
    Frame scope;
    mark_undefined(scope, s.undefined_names);
    scope["loop"] = lv;
    frames_.push_back(std::move(scope));
    Flow f;
    try {
      assign(*s.target, items[static_cast<std::size_t>(k)]);
      f = exec_body(s.body);
    } catch (...) {
      frames_.pop_back();
      throw;
    }
    frames_.pop_back();
    if (f == Flow::Break) break;
  }
  if (n == 0) {
    const Flow f = exec_scope(s.else_body, s.undefined_names_else);
    return f == Flow::Normal ? f : Flow::Normal;  // break / continue in else belong to no loop of this for
  }
  return Flow::Normal;
}

void Renderer::exec_set(const Stmt& s) { assign(*s.target, eval(*s.expr)); }

void Renderer::assign(const Expr& target, const Value& v) {
  if (target.kind == EK::Name) {
    frames_.back()[target.name] = v;
  } else if (target.kind == EK::NSRef) {
    const Value* ns = lookup(target.name);
    if (!ns || ns->kind != Kind::Namespace)
      throw Fail{"cannot assign the attribute '" + target.attr + "' of '" + target.name +
                 "': it is not a namespace (make it with namespace())"};
    if (!target.attr.empty() && target.attr[0] == '_')
      throw Fail{"chat templates cannot store underscore-prefixed attributes on a namespace ('" + target.attr + "')"};
    if (holds_namespace(v))
      throw Fail{"the namespace attribute '" + target.attr + "' cannot hold a " + type_name(v) +
                 (v.is_list() || v.is_dict() ? " holding a namespace, loop or function" : "")};
    ns->map->set(Value::str(target.attr), v);
  } else {  // a tuple of names: unpack
    std::vector<Value> items = iterate(v);
    if (items.size() != target.args.size())
      throw Fail{"cannot unpack " + std::to_string(items.size()) + " values into " +
                 std::to_string(target.args.size()) + " names"};
    for (std::size_t k = 0; k < items.size(); ++k) assign(*target.args[k], items[k]);
  }
}

namespace {
// Whether parameter `name` was given positionally (among the first n_pos parameters).
bool given_positionally(const std::string& name, std::size_t n_pos, const std::vector<std::string>& params) {
  for (std::size_t k = 0; k < n_pos && k < params.size(); ++k)
    if (params[k] == name) return true;
  return false;
}
}  // namespace

Value Renderer::call_macro(const Stmt& m, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth)
    throw Fail{"macro calls nest deeper than " + std::to_string(limits_.max_call_depth) + " (max_call_depth)"};
  if (args.pos.size() > m.params.size())
    throw Fail{"macro '" + m.text + "' takes not more than " + std::to_string(m.params.size()) + " argument(s)"};
  Frame f;
  mark_undefined(f, m.undefined_names);
  const std::size_t first_default = m.params.size() - m.defaults.size();
  for (std::size_t k = 0; k < args.pos.size(); ++k) f[m.params[k]] = args.pos[k];
  for (auto& [name, v] : args.kw) {
    const auto it = std::find(m.params.begin(), m.params.end(), name);
    if (it == m.params.end()) throw Fail{"macro '" + m.text + "' takes no keyword argument '" + name + "'"};
    if (given_positionally(name, args.pos.size(), m.params))
      throw Fail{"macro '" + m.text + "' got the argument '" + name + "' twice"};
    f[name] = v;
  }
  // The body sees the template's variables and its own; not the caller's loop variables.
  std::vector<Frame> saved(std::make_move_iterator(frames_.begin() + 1), std::make_move_iterator(frames_.end()));
  frames_.resize(1);
  frames_.push_back(Frame{});
  for (std::size_t k = args.pos.size(); k < m.params.size(); ++k) {
    if (std::any_of(args.kw.begin(), args.kw.end(), [&](const auto& kw) { return kw.first == m.params[k]; })) continue;
    f[m.params[k]] = k >= first_default ? eval(*m.defaults[k - first_default])
                                        : Value::undefined("the parameter '" + m.params[k] + "' of macro '" + m.text +
                                                           "' was not given");
  }
  frames_.back() = std::move(f);
  std::string saved_out;
  saved_out.swap(out_);
  ++call_depth_;
  const auto restore = [&] {
    --call_depth_;
    out_.swap(saved_out);
    frames_.resize(1);
    for (Frame& fr : saved) frames_.push_back(std::move(fr));
  };
  try {
    exec_body(m.body);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return Value::str(std::move(saved_out));
}

const Value* Renderer::lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    const auto hit = it->find(name);
    if (hit != it->end()) return &hit->second;
  }
  return nullptr;
}

// ---- expressions ----

Value Renderer::eval(const Expr& e) {
  try {
    charge(kNodeCost);
    return eval_node(e);
  } catch (const Fail& f) {
    fail(e.pos, f.message);
  } catch (const Raised& r) {
    fail(e.pos, r.message, true);
  }
}

void Renderer::args_of(const Expr& e, std::size_t first, CallArgs& out) {
  const std::size_t n_kw = e.kw_names.size();
  const std::size_t n_pos = e.args.size() - first - n_kw;
  for (std::size_t k = 0; k < n_pos; ++k) out.pos.push_back(eval(*e.args[first + k]));
  for (std::size_t k = 0; k < n_kw; ++k) out.kw.emplace_back(e.kw_names[k], eval(*e.args[first + n_pos + k]));
}

Value Renderer::eval_node(const Expr& e) {
  switch (e.kind) {
    case EK::Const: return e.value;
    case EK::Name: {
      const Value* v = lookup(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case EK::NSRef: throw Fail{"a namespace attribute is only an assignment target"};
    case EK::List: case EK::Tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const ExprPtr& a : e.args) items.push_back(eval(*a));
      return Value::list(std::move(items), e.kind == EK::Tuple);
    }
    case EK::Dict: {
      auto m = std::make_shared<Map>();
      for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k]);
        m->set(key, eval(*e.args[k + 1]));
      }
      return Value::dict(std::move(m));
    }
    case EK::Attr: return getattr(eval(*e.args[0]), e.name);
    case EK::Item: return getitem(eval(*e.args[0]), eval(*e.args[1]));
    case EK::Slice: {
      const Value obj = eval(*e.args[0]);
      std::optional<std::int64_t> bound[3];
      for (int k = 0; k < 3; ++k) {
        if (!e.args[static_cast<std::size_t>(k) + 1]) continue;
        const Value b = eval(*e.args[static_cast<std::size_t>(k) + 1]);
        if (b.is_none()) continue;
        if (!b.is_int_like()) throw Fail{"slice indices must be integers or None, not " + type_name(b)};
        bound[k] = b.as_int();
      }
      const std::int64_t step = bound[2] ? *bound[2] : 1;
      if (step == 0) throw Fail{"slice step cannot be zero"};
      if (obj.is_undefined()) fail_undefined(obj);
      if (obj.is_str()) {
        const std::u32string t = text::decode(obj.text());
        std::u32string out;
        for (std::int64_t k : text::slice_indices(static_cast<std::int64_t>(t.size()), bound[0], bound[1], step))
          out.push_back(t[static_cast<std::size_t>(k)]);
        return Value::str(text::encode(out));
      }
      if (obj.is_list()) {
        std::vector<Value> out;
        const auto& items = obj.arr->items;
        for (std::int64_t k : text::slice_indices(static_cast<std::int64_t>(items.size()), bound[0], bound[1], step))
          out.push_back(items[static_cast<std::size_t>(k)]);
        return Value::list(std::move(out), obj.arr->tuple);
      }
      throw Fail{"'" + type_name(obj) + "' object is not subscriptable with a slice"};
    }
    case EK::Call: return eval_call(e);
    case EK::Filter: {
      const Value subject = eval(*e.args[0]);
      CallArgs args;
      args_of(e, 1, args);
      return filter(e.name, subject, args);
    }
    case EK::Test: {
      const Value subject = eval(*e.args[0]);
      CallArgs args;
      args_of(e, 1, args);
      return Value::boolean(test(e.name, subject, args));
    }
    case EK::Not: return Value::boolean(!truthy(eval(*e.args[0])));
    case EK::Neg: case EK::Pos: {
      const Value v = eval(*e.args[0]);
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number())
        throw Fail{std::string("bad operand type for unary ") + (e.kind == EK::Neg ? "-" : "+") + ": '" +
                   type_name(v) + "'"};
      if (e.kind == EK::Pos) return v.kind == Kind::Bool ? Value::integer(v.as_int()) : v;
      if (v.kind == Kind::Float) return Value::number(-v.f);
      return Value::integer(checked(v.as_int() == INT64_MIN, -v.as_int()));
    }
    case EK::Binary: {
      const Value a = eval(*e.args[0]);
      return binary(e.name, a, eval(*e.args[1]));
    }
    case EK::Concat: {
      std::string s;
      for (const ExprPtr& a : e.args) {
        s += to_str(eval(*a), limits_.max_output_bytes);
        if (s.size() > limits_.max_output_bytes) return make_str(std::move(s));  // fails: too long
      }
      return make_str(std::move(s));
    }
    case EK::Compare: return eval_compare(e);
    case EK::And: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case EK::Or: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case EK::Cond:
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("the conditional expression gave no value (no else)");
  }
  throw Fail{"unknown expression"};
}

Value Renderer::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (std::size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.args[k + 1]);
    const std::string& op = e.ops[k];
    bool r;
    if (op == "==")
      r = equals(left, right);
    else if (op == "!=")
      r = !equals(left, right);
    else if (op == "<")
      r = less(left, right, "<");
    else if (op == ">")
      r = less(right, left, ">");
    else if (op == "<=")
      r = !less(right, left, "<=");
    else if (op == ">=")
      r = !less(left, right, ">=");
    else if (op == "in")
      r = contains(right, left);
    else
      r = !contains(right, left);
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Renderer::eval_call(const Expr& e) {
  const Value callee = eval(*e.args[0]);
  CallArgs args;
  args_of(e, 1, args);
  return call(callee, args);
}

Value Renderer::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (callee.kind != Kind::Func) throw Fail{"'" + type_name(callee) + "' object is not callable"};
  return callee.fn->call(*this, args);
}

Value Renderer::filter(const std::string& name, const Value& subject, CallArgs& args) {
  return apply_filter(*this, name, subject, args);
}

bool Renderer::test(const std::string& name, const Value& subject, CallArgs& args) {
  return apply_test(*this, name, subject, args);
}

Value Renderer::binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const auto unsupported = [&]() -> Fail {
    if (op == "+" && a.is_str()) return Fail{"can only concatenate str (not \"" + type_name(b) + "\") to str"};
    if (op == "+" && a.is_list() && !a.arr->tuple)
      return Fail{"can only concatenate list (not \"" + type_name(b) + "\") to list"};
    return Fail{"unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'"};
  };
  if (a.is_number() && b.is_number()) {
    const bool ints = a.is_int_like() && b.is_int_like();
    const std::int64_t x = a.as_int(), y = b.as_int();
    const double fx = a.as_double(), fy = b.as_double();
    std::int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      if (!ints) return Value::number(op == "+" ? fx + fy : op == "-" ? fx - fy : fx * fy);
      const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                            : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                        : __builtin_mul_overflow(x, y, &r);
      return Value::integer(checked(overflow, r));
    }
    if (op == "/") {
      if (fy == 0) throw Fail{"division by zero"};
      return Value::number(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints) {
        if (y == 0) throw Fail{"integer division or modulo by zero"};
        if (x == INT64_MIN && y == -1) throw Fail{"integer overflow: the result does not fit in 64 bits"};
        std::int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::integer(op == "//" ? q : m);
      }
      if (fy == 0) throw Fail{"float division or modulo by zero"};
      // CPython's float_divmod.
      double m = std::fmod(fx, fy);
      double div = (fx - m) / fy;
      if (m != 0) {
        if ((fy < 0) != (m < 0)) {
          m += fy;
          div -= 1.0;
        }
      } else {
        m = std::copysign(0.0, fy);
      }
      if (op == "%") return Value::number(m);
      double fl;
      if (div != 0) {
        fl = std::floor(div);
        if (div - fl > 0.5) fl += 1.0;
      } else {
        fl = std::copysign(0.0, fx / fy);
      }
      return Value::number(fl);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        std::int64_t base = x, result = 1, exp = y;
        while (exp > 0) {
          if (exp & 1) {
            const bool overflow = __builtin_mul_overflow(result, base, &result);
            checked(overflow, result);
          }
          exp >>= 1;
          if (exp > 0) {
            const bool overflow = __builtin_mul_overflow(base, base, &base);
            checked(overflow, base);
          }
        }
        return Value::integer(result);
      }
      if (fx == 0 && fy < 0) throw Fail{"0.0 cannot be raised to a negative power"};
      return Value::number(std::pow(fx, fy));
    }
  }
  if (op == "+" && a.is_str() && b.is_str()) {
    if (a.text().size() + b.text().size() > limits_.max_output_bytes)
      throw Fail{"a string of " + std::to_string(a.text().size() + b.text().size()) +
                 " bytes is longer than the output limit of " + std::to_string(limits_.max_output_bytes) +
                 " bytes (max_output_bytes)"};
    return make_str(a.text() + b.text());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.arr->tuple == b.arr->tuple) {
    if (a.arr->items.size() + b.arr->items.size() > kMaxItems)
      throw Fail{"a list of more than " + std::to_string(kMaxItems) + " items is more than a chat template may build"};
    std::vector<Value> items = a.arr->items;
    items.insert(items.end(), b.arr->items.begin(), b.arr->items.end());
    return Value::list(std::move(items), a.arr->tuple);
  }
  if (op == "*" && (((a.is_str() || a.is_list()) && b.is_int_like()) || ((b.is_str() || b.is_list()) && a.is_int_like()))) {
    const Value& seq = a.is_int_like() ? b : a;
    const std::int64_t n = std::max<std::int64_t>(0, (a.is_int_like() ? a : b).as_int());
    if (seq.is_str()) {
      const std::size_t len = seq.text().size();
      if (len && static_cast<std::uint64_t>(n) > limits_.max_output_bytes / len)
        throw Fail{"repeating a string " + std::to_string(n) + " times exceeds the output limit of " +
                   std::to_string(limits_.max_output_bytes) + " bytes (max_output_bytes)"};
      std::string s;
      for (std::int64_t k = 0; k < n; ++k) s += seq.text();
      return make_str(std::move(s));
    }
    const std::size_t len = seq.arr->items.size();
    if (len && static_cast<std::uint64_t>(n) > kMaxItems / len)
      throw Fail{"repeating a list " + std::to_string(n) + " times makes more than the " + std::to_string(kMaxItems) +
                 " items a chat template may build"};
    std::vector<Value> items;
    for (std::int64_t k = 0; k < n; ++k) items.insert(items.end(), seq.arr->items.begin(), seq.arr->items.end());
    return Value::list(std::move(items), seq.arr->tuple);
  }
  if (op == "%" && a.is_str()) throw Fail{"printf-style string formatting (str % value) is not supported"};
  throw unsupported();
}

std::vector<Value> Renderer::iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List: return v.arr->items;
    case Kind::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.map->items.size());
      for (const auto& kv : v.map->items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::Str: {
      if (static_cast<std::size_t>(text::length(v.text())) > kMaxItems)
        throw Fail{"iterating over a string of more than " + std::to_string(kMaxItems) + " characters"};
      std::vector<Value> chars;
      for (char32_t c : text::decode(v.text())) chars.push_back(Value::str(text::encode(std::u32string(1, c))));
      return chars;
    }
    default: throw Fail{"'" + type_name(v) + "' object is not iterable"};
  }
}

}  // namespace qkv::jinja
