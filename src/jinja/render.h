// The evaluator of qkv's Jinja2 subset: renders a parsed Program with jinja2's scoping (a for
// loop's body and a macro's body are their own scopes; if does not open one; namespaces are
// shared objects) and jinja2's Undefined (empty when printed, false, empty when iterated, an
// error when used as a value). One Renderer renders once; the Program is only read.
//
// A hostile template cannot hang, crash or exhaust memory: nesting is bounded by the parser, and
// the renderer bounds the output, the work (value.h's Budget), the loop iterations and the
// depth of macro calls; passing a bound is a TemplateError like any other.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ast.h"
#include "error.h"
#include "lexer.h"
#include "value.h"

namespace qkv::jinja {

struct Limits {
  std::size_t max_output_bytes;
  std::uint64_t max_work;
  std::uint64_t max_loop_iterations;
  int max_call_depth;
};


// raise_exception(msg): rendering stops with msg as the error (its own class so the evaluator
// reports it as the template's message, not as a failure of the template).
struct Raised {
  std::string message;
};

class Renderer {
 public:
  using Frame = std::unordered_map<std::string, Value>;

  Renderer(const Program& program, const SourceMap& map, const std::string& source_name, const Limits& limits);

  // Renders with `vars` (and the globals) as the template's variables.
  std::string render(Frame vars);

  // ---- for the builtins ----
  const Limits& limits() const { return limits_; }
  // A string result of at most the output limit (Fail otherwise); charged to the budget.
  Value make_str(std::string s) const;
  Value call(const Value& callee, CallArgs& args);
  Value filter(const std::string& name, const Value& subject, CallArgs& args);
  bool test(const std::string& name, const Value& subject, CallArgs& args);
  // jinja2's sandboxed getattr (`x.name`) and getitem (`x[key]`).
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  // The items `for` iterates over (dict: keys, str: characters; Undefined: none).
  std::vector<Value> iterate(const Value& v);

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const std::vector<StmtPtr>& body);
  // Runs body in a new scope that starts with `undefined` names undefined (and `init` set).
  Flow exec_scope(const std::vector<StmtPtr>& body, const std::vector<std::string>& undefined, Frame init = {});
  static void mark_undefined(Frame& f, const std::vector<std::string>& names);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  void assign(const Expr& target, const Value& v);
  Value call_macro(const Stmt& m, CallArgs& args);
  void write(const std::string& s);

  Value eval(const Expr& e);
  Value eval_node(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_compare(const Expr& e);
  Value binary(const std::string& op, const Value& a, const Value& b);
  void args_of(const Expr& e, std::size_t first, CallArgs& out);
  const Value* lookup(const std::string& name) const;

  [[noreturn]] void fail(std::size_t pos, const std::string& message, bool raised = false) const;

  const Program& program_;
  const SourceMap& map_;
  const std::string& source_name_;
  Limits limits_;
  Budget budget_;
  std::vector<Frame> frames_;
  std::string out_;
  std::uint64_t iterations_ = 0;
  int call_depth_ = 0;
};

}  // namespace qkv::jinja
