// The parser of qkv's Jinja2 subset: jinja2's grammar (jinja2/parser.py) and precedence, from
// lowest to highest:
//   x if c else y  <  or  <  and  <  not  <  comparisons, in, not in  <  + -  <  ~  <  * / // %
//   <  **  <  unary - +  <  filters (|f) and tests (is t)  <  postfix .a [i] [a:b:c] (args)
// Every construct it accepts is one the evaluator runs; anything else (an unknown tag, filter or
// test, a jinja2 feature outside the subset) is an error at its position, at parse time.
#include <algorithm>
#include <set>

#include "ast.h"
#include "builtins.h"
#include "lexer.h"

namespace qkv::jinja {

namespace {

// Nesting of expressions and statements is bounded, so a hostile template cannot exhaust the
// stack (of the parser or of the evaluator, which recurses over the same tree).
constexpr int kMaxNesting = 128;
constexpr int kMaxExprDepth = 256;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Program run() {
    Program p;
    p.body = subparse({});
    if (cur().type != Tok::Eof) fail(cur().pos, "unexpected '" + cur().text + "'");
    return p;
  }

 private:
  // ---- token stream ----
  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  [[noreturn]] void fail(std::size_t pos, std::string msg) const { throw SyntaxFail{pos, std::move(msg)}; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::Eof: return "end of template";
      case Tok::BlockEnd: return "end of statement block (%})";
      case Tok::VarEnd: return "end of print statement (}})";
      case Tok::Name: return "'" + t.text + "'";
      case Tok::Op: return "'" + t.text + "'";
      case Tok::String: return "a string";
      case Tok::Int: case Tok::Float: return "a number";
      default: return "text";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(cur().pos, std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail(cur().pos, "expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail(cur().pos, "expected the end of the tag (%}), got " + describe(cur()));
    next();
  }

  struct Nest {
    Nest(Parser& p, std::size_t pos) : p_(p) {
      if (++p_.depth_ > kMaxNesting)
        p_.fail(pos, "the template nests deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~Nest() { --p_.depth_; }
    Parser& p_;
  };

  static ExprPtr node(EK kind, std::size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // Appends a child (or an omitted one: null), keeping the tree's depth bounded: chains such as
  // 1+1+1+... or a|f|f|f... nest as deeply as they are long.
  void add(Expr& parent, ExprPtr child) {
    if (child) {
      parent.depth = std::max(parent.depth, child->depth + 1);
      if (parent.depth > kMaxExprDepth)
        fail(parent.pos, "an expression nests or chains deeper than " + std::to_string(kMaxExprDepth) + " levels");
    }
    parent.args.push_back(std::move(child));
  }

  // ---- statements ----
  // Statements up to one of `ends` (the tag name is left as the current token) or the end.
  std::vector<StmtPtr> subparse(const std::set<std::string>& ends) {
    std::vector<StmtPtr> body;
    while (cur().type != Tok::Eof) {
      const Token& tok = cur();
      if (tok.type == Tok::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = SK::Data;
        s->pos = tok.pos;
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == Tok::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = SK::Print;
        s->pos = cur().pos;
        s->expr = parse_tuple(true);
        if (cur().type != Tok::VarEnd) fail(cur().pos, "expected the end of the print tag (}}), got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (tok.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name && ends.count(cur().text)) return body;
        body.push_back(statement());
        expect_block_end();
      } else {
        fail(tok.pos, "unexpected " + describe(tok));
      }
    }
    return body;
  }

  // Statements until one of `ends`; leaves the stream on that tag's name.
  std::vector<StmtPtr> block_body(const std::set<std::string>& ends, std::size_t open_pos, const char* what) {
    expect_block_end();
    open_.emplace_back(what, *ends.rbegin());  // the closing tag sorts last: endfor, endif, ...
    auto body = subparse(ends);
    open_.pop_back();
    if (cur().type == Tok::Eof) {
      std::string names;
      for (const auto& e : ends) names += (names.empty() ? "" : " or ") + ("{% " + e + " %}");
      fail(open_pos, std::string("this ") + what + " is never closed: expected " + names + " before the end of the template");
    }
    return body;
  }

  StmtPtr statement() {
    const Token& tok = cur();
    if (tok.type != Tok::Name) fail(tok.pos, "expected a tag name, got " + describe(tok));
    Nest nest(*this, tok.pos);
    const std::string& n = tok.text;
    if (n == "for") return parse_for();
    if (n == "if") return parse_if();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "with") return parse_with();
    if (n == "break" || n == "continue") {
      if (loops_ == 0) fail(tok.pos, "'" + n + "' is outside of a for loop");
      auto s = std::make_unique<Stmt>();
      s->kind = n == "break" ? SK::Break : SK::Continue;
      s->pos = tok.pos;
      next();
      return s;
    }
    if (n == "generation") {
      auto s = std::make_unique<Stmt>();
      s->kind = SK::Generation;
      s->pos = tok.pos;
      next();
      s->body = block_body({"endgeneration"}, s->pos, "{% generation %}");
      next();
      return s;
    }
    static const std::set<std::string> closers = {"endfor", "endif", "elif", "else", "endmacro", "endset", "endwith",
                                                  "endgeneration", "endraw", "endcall", "endfilter", "endblock"};
    if (closers.count(n)) {
      if (open_.empty()) fail(tok.pos, "unexpected {% " + n + " %}: no block is open here");
      fail(tok.pos, "unexpected {% " + n + " %}: the innermost open block is a " + open_.back().first +
                        ", closed by {% " + open_.back().second + " %}");
    }
    static const std::set<std::string> unsupported = {"call", "filter", "block", "extends", "include", "import",
                                                      "from", "autoescape", "print", "do", "trans"};
    if (unsupported.count(n)) fail(tok.pos, "the tag '" + n + "' is not supported");
    fail(tok.pos, "unknown tag '" + n + "'");
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<Stmt>();
    s->kind = SK::For;
    s->pos = cur().pos;
    next();
    s->target = assign_target(false, "in");
    if (!skip_name("in")) fail(cur().pos, "expected 'in' in the for loop, got " + describe(cur()));
    s->expr = parse_tuple(false, "recursive");
    if (skip_name("if")) s->filter = expression(true);
    if (is_name("recursive")) fail(cur().pos, "recursive for loops are not supported");
    ++loops_;
    s->body = block_body({"endfor", "else"}, s->pos, "for loop");
    --loops_;  // `break` in the else branch has no loop of this for
    if (skip_name("else")) {
      s->else_body = block_body({"endfor"}, s->pos, "for loop");
    }
    next();  // endfor
    return s;
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<Stmt>();
    s->kind = SK::If;
    s->pos = cur().pos;
    next();
    s->expr = parse_tuple(false);
    s->body = block_body({"elif", "else", "endif"}, s->pos, "if block");
    if (is_name("elif")) {
      Nest nest(*this, cur().pos);  // an elif is an if nested in the else branch
      s->else_body.push_back(parse_if());  // parses through endif; the stream is at its end tag's name
      return s;
    }
    if (skip_name("else")) s->else_body = block_body({"endif"}, s->pos, "if block");
    next();  // endif
    return s;
  }

  StmtPtr parse_set() {
    auto s = std::make_unique<Stmt>();
    s->pos = cur().pos;
    next();
    s->target = assign_target(true, nullptr);
    if (skip_op("=")) {
      s->kind = SK::Set;
      s->expr = parse_tuple(true);
      return s;
    }
    if (is_op("|")) fail(cur().pos, "filters on {% set %} blocks are not supported");
    s->kind = SK::SetBlock;
    s->body = block_body({"endset"}, s->pos, "{% set %} block");
    next();
    return s;
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<Stmt>();
    s->kind = SK::Macro;
    s->pos = cur().pos;
    next();
    s->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      s->params.push_back(expect_name());
      if (skip_op("="))
        s->defaults.push_back(expression(true));
      else if (!s->defaults.empty())
        fail(cur().pos, "a macro parameter without a default follows one with a default");
    }
    next();
    const int loops = loops_;
    loops_ = 0;  // `break` in a macro body is outside any loop
    s->body = block_body({"endmacro"}, s->pos, "macro");
    loops_ = loops;
    next();
    return s;
  }

  StmtPtr parse_with() {
    auto s = std::make_unique<Stmt>();
    s->kind = SK::With;
    s->pos = cur().pos;
    next();
    while (cur().type != Tok::BlockEnd) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expect_name());
      expect_op("=");
      s->defaults.push_back(expression(true));
    }
    s->body = block_body({"endwith"}, s->pos, "{% with %} block");
    next();
    return s;
  }

  // A name, a namespace attribute (`ns.x`, for set only) or a tuple of names.
  ExprPtr assign_target(bool with_namespace, const char* extra_end) {
    const std::size_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (cur().type == Tok::BlockEnd || is_op("=") || (extra_end && is_name(extra_end))) break;
      if (cur().type != Tok::Name) fail(cur().pos, "cannot assign to " + describe(cur()));
      const std::string& n = cur().text;
      if (n == "true" || n == "false" || n == "True" || n == "False" || n == "none" || n == "None")
        fail(cur().pos, "cannot assign to the constant '" + n + "'");
      ExprPtr e = node(EK::Name, cur().pos);
      e->name = n;
      next();
      if (with_namespace && is_op(".")) {
        next();
        e->kind = EK::NSRef;
        e->attr = expect_name();
      } else if (is_op(".") || is_op("[")) {
        fail(cur().pos, "only names and namespace attributes (ns.x) can be assigned to");
      }
      items.push_back(std::move(e));
      if (!is_op(",")) break;
      tuple = true;
    }
    if (items.empty()) fail(pos, "expected a name to assign to, got " + describe(cur()));
    if (!tuple) return std::move(items[0]);
    ExprPtr t = node(EK::Tuple, pos);
    t->args = std::move(items);
    return t;
  }

  // ---- expressions ----
  // jinja2's parse_tuple: expressions separated by commas make a tuple.
  ExprPtr parse_tuple(bool with_condexpr, const char* extra_end = nullptr, bool explicit_parens = false) {
    const std::size_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") ||
          (extra_end && is_name(extra_end)))
        break;
      items.push_back(expression(with_condexpr));
      if (!is_op(",")) break;
      tuple = true;
    }
    if (!tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(cur().pos, "expected an expression, got " + describe(cur()));
    }
    ExprPtr t = node(EK::Tuple, pos);
    t->args = std::move(items);
    return t;
  }

  ExprPtr expression(bool with_condexpr) { return with_condexpr ? condexpr() : or_expr(); }

  ExprPtr condexpr() {
    ExprPtr e = or_expr();
    while (is_name("if")) {
      const std::size_t pos = cur().pos;
      next();
      ExprPtr c = node(EK::Cond, pos);
      add(*c, or_expr());
      add(*c, std::move(e));
      if (skip_name("else")) {
        Nest nest(*this, cur().pos);
        add(*c, condexpr());
      } else {
        add(*c, nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary_chain(EK kind, const char* word, ExprPtr (Parser::*sub)()) {
    ExprPtr e = (this->*sub)();
    while (is_name(word)) {
      ExprPtr b = node(kind, cur().pos);
      next();
      add(*b, std::move(e));
      add(*b, (this->*sub)());
      e = std::move(b);
    }
    return e;
  }
  ExprPtr or_expr() { return binary_chain(EK::Or, "or", &Parser::and_expr); }
  ExprPtr and_expr() { return binary_chain(EK::And, "and", &Parser::not_expr); }

  ExprPtr not_expr() {
    if (is_name("not")) {
      Nest nest(*this, cur().pos);
      ExprPtr e = node(EK::Not, cur().pos);
      next();
      add(*e, not_expr());
      return e;
    }
    return compare();
  }

  ExprPtr compare() {
    const std::size_t pos = cur().pos;
    ExprPtr first = math1();
    ExprPtr c;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!c) {
        c = node(EK::Compare, pos);
        add(*c, std::move(first));
      }
      c->ops.push_back(op);
      add(*c, math1());
    }
    return c ? std::move(c) : std::move(first);
  }

  ExprPtr binary_ops(std::initializer_list<const char*> ops, ExprPtr (Parser::*sub)()) {
    ExprPtr e = (this->*sub)();
    while (cur().type == Tok::Op) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (cur().text == op) hit = op;
      if (!hit) break;
      ExprPtr b = node(EK::Binary, cur().pos);
      b->name = hit;
      next();
      add(*b, std::move(e));
      add(*b, (this->*sub)());
      e = std::move(b);
    }
    return e;
  }
  ExprPtr math1() { return binary_ops({"+", "-"}, &Parser::concat); }
  ExprPtr concat() {
    ExprPtr e = math2();
    if (!is_op("~")) return e;
    ExprPtr c = node(EK::Concat, cur().pos);
    add(*c, std::move(e));
    while (skip_op("~")) add(*c, math2());
    return c;
  }
  ExprPtr math2() { return binary_ops({"*", "/", "//", "%"}, &Parser::pow_expr); }
  ExprPtr pow_expr() { return binary_ops({"**"}, &Parser::unary_f); }
  ExprPtr unary_f() { return unary(true); }

  ExprPtr unary(bool with_filter) {
    Nest nest(*this, cur().pos);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? EK::Neg : EK::Pos, cur().pos);
      next();
      add(*e, unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters_and_tests(std::move(e));
    return e;
  }

  ExprPtr primary() {
    const Token& tok = cur();
    const std::size_t pos = tok.pos;
    if (tok.type == Tok::Name) {
      ExprPtr e = node(EK::Const, pos);
      if (tok.text == "true" || tok.text == "True")
        e->value = Value::boolean(true);
      else if (tok.text == "false" || tok.text == "False")
        e->value = Value::boolean(false);
      else if (tok.text == "none" || tok.text == "None")
        e->value = Value::none();
      else {
        e->kind = EK::Name;
        e->name = tok.text;
      }
      next();
      return e;
    }
    if (tok.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) {  // adjacent strings join, as in Python
        s += cur().text;
        next();
      }
      ExprPtr e = node(EK::Const, pos);
      e->value = Value::str(std::move(s));
      return e;
    }
    if (tok.type == Tok::Int || tok.type == Tok::Float) {
      ExprPtr e = node(EK::Const, pos);
      e->value = tok.type == Tok::Int ? Value::integer(tok.i) : Value::number(tok.f);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, nullptr, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      ExprPtr e = node(EK::List, pos);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        add(*e, expression(true));
      }
      next();
      return e;
    }
    if (is_op("{")) {
      next();
      ExprPtr e = node(EK::Dict, pos);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        add(*e, expression(true));
        expect_op(":");
        add(*e, expression(true));
      }
      next();
      return e;
    }
    fail(pos, "unexpected " + describe(tok));
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const std::size_t pos = cur().pos;
        next();
        if (cur().type == Tok::Name) {
          ExprPtr a = node(EK::Attr, pos);
          a->name = cur().text;
          next();
          add(*a, std::move(e));
          e = std::move(a);
        } else if (cur().type == Tok::Int) {
          ExprPtr a = node(EK::Item, pos);
          add(*a, std::move(e));
          ExprPtr k = node(EK::Const, cur().pos);
          k->value = Value::integer(cur().i);
          add(*a, std::move(k));
          next();
          e = std::move(a);
        } else {
          fail(cur().pos, "expected a name or a number after '.', got " + describe(cur()));
        }
      } else if (is_op("[")) {
        e = subscript(std::move(e));
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj) {
    const std::size_t pos = cur().pos;
    next();  // [
    if (is_op("]")) fail(cur().pos, "expected a subscript expression, got ']'");
    ExprPtr start, stop, step;
    bool slice = false;
    if (!is_op(":")) start = expression(true);
    if (skip_op(":")) {
      slice = true;
      if (!is_op(":") && !is_op("]")) stop = expression(true);
      if (skip_op(":") && !is_op("]")) step = expression(true);
    }
    if (is_op(",")) fail(cur().pos, "subscripts with several indices (a[i, j]) are not supported");
    expect_op("]");
    ExprPtr e = node(slice ? EK::Slice : EK::Item, pos);
    add(*e, std::move(obj));
    add(*e, std::move(start));
    if (slice) {
      add(*e, std::move(stop));
      add(*e, std::move(step));
    }
    return e;
  }

  // (args): positional arguments, then keyword arguments name=value.
  void call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail(cur().pos, "*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        e.kw_names.push_back(cur().text);
        next();
        next();
        add(e, expression(true));
      } else {
        if (!e.kw_names.empty()) fail(cur().pos, "a positional argument follows a keyword argument");
        add(e, expression(true));
      }
    }
    next();
  }

  ExprPtr call(ExprPtr callee) {
    ExprPtr e = node(EK::Call, cur().pos);
    add(*e, std::move(callee));
    call_args(*e);
    return e;
  }

  ExprPtr filters_and_tests(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        ExprPtr f = node(EK::Filter, cur().pos);
        f->name = expect_name();
        if (is_op(".")) fail(cur().pos, "dotted filter names are not supported");
        if (!has_filter(f->name)) fail(f->pos, "the filter '" + f->name + "' is not supported");
        add(*f, std::move(e));
        if (is_op("(")) call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        const bool negated = skip_name("not");
        ExprPtr t = node(EK::Test, cur().pos);
        if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                      cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
          t->name = cur().text;
          next();
        } else {
          t->name = expect_name();
        }
        if (!has_test(t->name)) fail(t->pos, "the test '" + t->name + "' is not supported");
        add(*t, std::move(e));
        if (is_op("(")) {
          call_args(*t);
        } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                    cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail(cur().pos, "tests cannot be chained with 'is'");
          add(*t, postfix(primary()));  // `x is divisibleby 3`
        }
        if (negated) {
          ExprPtr n = node(EK::Not, t->pos);
          add(*n, std::move(t));
          e = std::move(n);
        } else {
          e = std::move(t);
        }
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;
  std::vector<std::pair<std::string, std::string>> open_;  // open blocks: what, closing tag
};

}  // namespace

Program parse_tokens(std::vector<Token> tokens) {
  Program p = Parser(std::move(tokens)).run();
  resolve_names(p);
  return p;
}

}  // namespace qkv::jinja
