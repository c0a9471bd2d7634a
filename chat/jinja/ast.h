// The Jinja AST: expressions and statements, each with its template line.
#ifndef KVSERVE_CHAT_JINJA_AST_H_
#define KVSERVE_CHAT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace kvserve::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kGetAttr,  // args[0].name
    kGetItem,  // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null entries: omitted)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..])
    kUnary,    // name in {"-", "+", "not"} applied to args[0]
    kBinary,   // args[0] name args[1]; name in {+ - * / // % ** ~}
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
    kAnd,      // args[0] and args[1]
    kOr,       // args[0] or args[1]
    kCond,     // args[1] if args[0] else args[2] (args[2] null: undefined)
    kList,     // [args...] (also tuples)
    kDict,     // {kwargs as key expr pairs: keys[i]: args[i]}
  };
  Kind kind;
  int line = 0;
  Json literal;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> args;
  std::vector<ExprPtr> keys;  // kDict
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
};

// The variable a {% filter %} block's rendered body is bound to (not a
// name the lexer can produce).
inline constexpr const char* kFilterBody = "\x01filter body";

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kData,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (cond, body) ..., else_body
    kFor,       // for targets in expr [if cond]: body, else_body
    kSet,       // set targets = expr; or set target_obj.attr = expr
    kSetBlock,  // {% set name %}body{% endset %}
    kMacro,     // name(params) body
    kBreak,
    kContinue,
    kScope,   // body rendered as is ({% generation %})
    kFilter,  // {% filter f|g(x) %}body{% endfilter %}: expr filters the Name kFilterBody
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;  // for / set names; macro: name in text
  std::string attr;                  // set ns.attr: targets[0] is the object name
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters (default may be null)
};

}  // namespace kvserve::chat::jinja

#endif  // KVSERVE_CHAT_JINJA_AST_H_
