// jinja2's static name resolution (jinja2/idtracking.py), which decides what a name means before
// the template runs. Each scope (the template, a for loop's body, its else branch and its filter,
// a macro, a with / set / generation block) declares the names it assigns. A name a scope assigns
// whose first mention in that scope (in jinja2's visiting order) is the assignment starts out
// undefined there, hiding any variable of that name passed to render, until the assignment runs:
//
//   {% for m in messages %}{{ s }}{% endfor %}{% set s = 'x' %}   prints nothing for s,
//   {{ s }}{% set s = 'x' %}                                       prints the s passed in.
//
// The pass records those names per scope (Program::root_undefined, Stmt::undefined_names...);
// the renderer binds them to Undefined when it enters the scope. Names first assigned inside an
// if branch are exempt (jinja2's branch_update resolves them from outside instead).
#include <map>
#include <set>

#include "ast.h"

namespace qkv::jinja {

namespace {

enum class Load { Param, Resolve, Alias, Undefined };

struct Symbols {
  const Symbols* parent = nullptr;
  std::map<std::string, Load> refs;
  std::set<std::string> stores;

  bool find_ref(const std::string& name) const {
    for (const Symbols* s = this; s; s = s->parent)
      if (s->refs.count(name)) return true;
    return false;
  }
  void load(const std::string& name) {
    if (!find_ref(name)) refs[name] = Load::Resolve;
  }
  void store(const std::string& name) {
    stores.insert(name);
    if (refs.count(name)) return;
    refs[name] = parent && parent->find_ref(name) ? Load::Alias : Load::Undefined;
  }
  void param(const std::string& name) {
    stores.insert(name);
    refs[name] = Load::Param;
  }
  std::vector<std::string> undefined_names() const {
    std::vector<std::string> out;
    for (const auto& [name, load] : refs)
      if (load == Load::Undefined) out.push_back(name);
    return out;
  }
};

void visit_expr(Symbols& sym, const Expr* e) {
  if (!e) return;
  if (e->kind == EK::Name) {
    sym.load(e->name);
    return;
  }
  for (const ExprPtr& a : e->args) visit_expr(sym, a.get());
}

void visit_target(Symbols& sym, const Expr& t, bool as_param) {
  if (t.kind == EK::Name) {
    if (as_param)
      sym.param(t.name);
    else
      sym.store(t.name);
  } else if (t.kind == EK::NSRef) {
    sym.load(t.name);
  } else {
    for (const ExprPtr& a : t.args) visit_target(sym, *a, as_param);
  }
}

void visit_stmts(Symbols& sym, const std::vector<StmtPtr>& body);

// jinja2's FrameSymbolVisitor: what a statement means for the names of the scope it is in
// (without entering the scopes it opens).
void visit_stmt(Symbols& sym, const Stmt& s) {
  switch (s.kind) {
    case SK::Print: visit_expr(sym, s.expr.get()); break;
    case SK::Set:
      visit_expr(sym, s.expr.get());
      visit_target(sym, *s.target, false);
      break;
    case SK::SetBlock: visit_target(sym, *s.target, false); break;
    case SK::For: visit_expr(sym, s.expr.get()); break;
    case SK::Macro: sym.store(s.text); break;
    case SK::With:
      for (const ExprPtr& d : s.defaults) visit_expr(sym, d.get());
      break;
    case SK::If: {
      visit_expr(sym, s.expr.get());
      Symbols body = sym, other = sym;
      visit_stmts(body, s.body);
      visit_stmts(other, s.else_body);
      // branch_update: names stored in a branch but not before in this scope are resolved from
      // outside (alias) or from the context (resolve), never left undefined.
      std::set<std::string> branch_stores;
      for (const Symbols* b : {&body, &other})
        for (const std::string& n : b->stores)
          if (!sym.stores.count(n)) branch_stores.insert(n);
      for (const Symbols* b : {&body, &other}) {
        for (const auto& [n, load] : b->refs) sym.refs[n] = load;
        sym.stores.insert(b->stores.begin(), b->stores.end());
      }
      for (const std::string& n : branch_stores)
        sym.refs[n] = sym.parent && sym.parent->find_ref(n) ? Load::Alias : Load::Resolve;
      break;
    }
    default: break;
  }
}

void visit_stmts(Symbols& sym, const std::vector<StmtPtr>& body) {
  for (const StmtPtr& s : body) visit_stmt(sym, *s);
}

void analyze_scopes(const std::vector<StmtPtr>& body, const Symbols& scope);

// Analyzes a scope of the given statements (and its parameters) under `parent`, records its
// undefined names, then the scopes nested in it.
std::vector<std::string> analyze(const std::vector<StmtPtr>& body, const Symbols& parent,
                                 const std::vector<const Expr*>& params, const Expr* first_expr = nullptr) {
  Symbols sym;
  sym.parent = &parent;
  for (const Expr* p : params) visit_target(sym, *p, true);
  visit_expr(sym, first_expr);
  visit_stmts(sym, body);
  analyze_scopes(body, sym);
  return sym.undefined_names();
}

// The scopes opened by statements of a scope (through its if branches), each under `scope`.
void analyze_scopes(const std::vector<StmtPtr>& body, const Symbols& scope) {
  for (const StmtPtr& sp : body) {
    Stmt& s = *sp;
    switch (s.kind) {
      case SK::If:
        analyze_scopes(s.body, scope);
        analyze_scopes(s.else_body, scope);
        break;
      case SK::For:
        s.undefined_names = analyze(s.body, scope, {s.target.get()});
        s.undefined_names_else = analyze(s.else_body, scope, {});
        break;
      case SK::Macro: {
        Symbols sym;
        sym.parent = &scope;
        for (const std::string& p : s.params) sym.param(p);
        for (const ExprPtr& d : s.defaults) visit_expr(sym, d.get());
        visit_stmts(sym, s.body);
        analyze_scopes(s.body, sym);
        s.undefined_names = sym.undefined_names();
        break;
      }
      case SK::With: {
        Symbols sym;
        sym.parent = &scope;
        for (const std::string& p : s.params) sym.param(p);
        visit_stmts(sym, s.body);
        analyze_scopes(s.body, sym);
        s.undefined_names = sym.undefined_names();
        break;
      }
      case SK::SetBlock: case SK::Generation: s.undefined_names = analyze(s.body, scope, {}); break;
      default: break;
    }
  }
}

}  // namespace

void resolve_names(Program& program) {
  Symbols root;
  visit_stmts(root, program.body);
  analyze_scopes(program.body, root);
  program.root_undefined = root.undefined_names();
}

}  // namespace qkv::jinja
