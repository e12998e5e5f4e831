// The syntax tree of qkv's Jinja2 subset: jinja2's nodes (jinja2/nodes.py) for the statements
// and expressions chat templates use. A parsed tree is never changed; rendering only reads it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "value.h"

namespace qkv::jinja {

enum class EK : std::uint8_t {
  Const,    // value
  Name,     // name
  NSRef,    // name.attr as an assignment target (`set ns.x = ...`): name, attr in `attr`
  List,     // args = items
  Tuple,    // args = items
  Dict,     // args = key, value, key, value, ...
  Attr,     // args[0].attr
  Item,     // args[0][args[1]]
  Slice,    // args[0][args[1]:args[2]:args[3]] (null: omitted)
  Call,     // args[0](args[1..]); the last kw_names.size() arguments are keyword arguments
  Filter,   // args[0] | name(args[1..])  (kw_names as for Call)
  Test,     // args[0] is name(args[1..])
  Not,      // not args[0]
  Neg,      // -args[0]
  Pos,      // +args[0]
  Binary,   // args[0] op args[1]: + - * / // % **
  Concat,   // args[0] ~ args[1] ~ ...
  Compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (==, !=, <, <=, >, >=, in, notin)
  And,
  Or,
  Cond,     // args[1] if args[0] else args[2] (args[2] null: Undefined)
};

struct Expr {
  EK kind;
  std::size_t pos;  // offset in the normalized source, for errors
  Value value;
  std::string name;  // Name / NSRef / Attr / Filter / Test / Binary: the operator
  std::string attr;  // NSRef
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::string> kw_names;
  std::vector<std::string> ops;
  int depth = 1;  // of the subtree (bounded by the parser)
};
using ExprPtr = std::unique_ptr<Expr>;

enum class SK : std::uint8_t {
  Data,        // text
  Print,       // {{ expr }}
  If,          // if expr: body; else: else_body (an elif is an If alone in else_body)
  For,         // for target in expr [if filter]: body; else: else_body
  Set,         // set target = expr
  SetBlock,    // set target: captures body's output
  Macro,       // macro name(params = defaults): body
  Break,
  Continue,
  Generation,  // transformers' {% generation %}: body
  With,        // with params = defaults: body
};

struct Stmt {
  SK kind;
  std::size_t pos;
  std::string text;  // Data; Macro: its name
  ExprPtr expr;
  ExprPtr target;
  ExprPtr filter;
  std::vector<std::unique_ptr<Stmt>> body, else_body;
  std::vector<std::string> params;  // Macro / With
  std::vector<ExprPtr> defaults;    // Macro: for the last params; With: one per param
  // The scope this statement opens (For: its body; Macro, With, SetBlock, Generation: theirs)
  // starts with these names undefined (scope.cpp); For's else branch: undefined_names_else.
  std::vector<std::string> undefined_names, undefined_names_else;
};
using StmtPtr = std::unique_ptr<Stmt>;

// A parsed template: its statements and where its errors are.
struct Program {
  std::vector<StmtPtr> body;
  std::vector<std::string> root_undefined;  // names the template's own scope starts undefined
};

// Parses the tokens of a normalized source (SyntaxFail on an error or an unsupported construct).
Program parse_tokens(std::vector<struct Token> tokens);
// jinja2's static name resolution: fills the undefined names of every scope (scope.cpp).
void resolve_names(Program& program);

}  // namespace qkv::jinja
