#include "chat/jinja/parser.h"

#include <set>
#include <string>

#include "chat/jinja/filters.h"

namespace kvserve::chat::jinja {
namespace {

using K = Token::Kind;

ExprPtr MakeExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body ParseTemplate() {
    std::string end;
    Body body = ParseBody({}, &end);
    return body;
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Next() { return t_[i_++]; }
  bool IsOp(const char* op) const { return Cur().kind == K::kOp && Cur().text == op; }
  bool IsName(const char* name) const { return Cur().kind == K::kName && Cur().text == name; }
  [[noreturn]] void Fail(const std::string& what) const {
    std::string got;
    switch (Cur().kind) {
      case K::kEof:
        got = "end of template";
        break;
      case K::kBlockEnd:
        got = "end of statement block";
        break;
      case K::kVarEnd:
        got = "end of print statement";
        break;
      default:
        got = "'" + Cur().text + "'";
    }
    throw Error(what + ", got " + got, Cur().line);
  }
  void ExpectOp(const char* op) {
    if (!IsOp(op)) Fail(std::string("expected '") + op + "'");
    ++i_;
  }
  void ExpectBlockEnd() {
    if (Cur().kind != K::kBlockEnd) Fail("expected end of statement block");
    ++i_;
  }
  std::string ExpectName() {
    if (Cur().kind != K::kName) Fail("expected a name");
    return Next().text;
  }

  // Statements until a {% tag %} whose name is in `ends` (consumed with the
  // name; *end receives it), or the end of the template when ends is empty.
  Body ParseBody(const std::set<std::string>& ends, std::string* end) {
    Body body;
    while (true) {
      const Token& tok = Cur();
      switch (tok.kind) {
        case K::kEof:
          if (!ends.empty()) {
            throw Error("unexpected end of template; expected " + Join(ends), tok.line);
          }
          return body;
        case K::kData: {
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::kData;
          s->line = tok.line;
          s->text = tok.text;
          body.push_back(std::move(s));
          ++i_;
          break;
        }
        case K::kVarBegin: {
          ++i_;
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::kOutput;
          s->line = tok.line;
          s->expr = ParseExpr();
          if (Cur().kind != K::kVarEnd) Fail("expected end of print statement");
          ++i_;
          body.push_back(std::move(s));
          break;
        }
        case K::kBlockBegin: {
          ++i_;
          if (Cur().kind != K::kName) Fail("expected a statement name");
          const std::string name = Cur().text;
          if (ends.count(name)) {
            ++i_;
            *end = name;
            return body;
          }
          body.push_back(ParseStatement());
          break;
        }
        default:
          Fail("unexpected token");
      }
    }
  }

  static std::string Join(const std::set<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "'" : " or '") + n + "'";
    return out;
  }

  StmtPtr ParseStatement() {
    const Token& tok = Next();
    auto s = std::make_unique<Stmt>();
    s->line = tok.line;
    const std::string& name = tok.text;
    std::string end;
    if (name == "if") {
      s->kind = Stmt::Kind::kIf;
      ExprPtr cond = ParseExpr();
      while (true) {
        ExpectBlockEnd();
        Body b = ParseBody({"elif", "else", "endif"}, &end);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end != "elif") break;
        cond = ParseExpr();
      }
      if (end == "else") {
        ExpectBlockEnd();
        s->else_body = ParseBody({"endif"}, &end);
      }
      ExpectBlockEnd();
    } else if (name == "for") {
      s->kind = Stmt::Kind::kFor;
      s->targets.push_back(ExpectName());
      while (IsOp(",")) {
        ++i_;
        s->targets.push_back(ExpectName());
      }
      if (!IsName("in")) Fail("expected 'in'");
      ++i_;
      s->expr = ParseExpr(/*with_cond=*/false);
      if (IsName("if")) {
        ++i_;
        s->cond = ParseExpr();
      }
      if (IsName("recursive")) Fail("recursive for loops are not supported");
      ExpectBlockEnd();
      s->body = ParseBody({"else", "endfor"}, &end);
      if (end == "else") {
        ExpectBlockEnd();
        s->else_body = ParseBody({"endfor"}, &end);
      }
      ExpectBlockEnd();
    } else if (name == "set") {
      s->kind = Stmt::Kind::kSet;
      s->targets.push_back(ExpectName());
      if (IsOp(".")) {
        ++i_;
        s->attr = ExpectName();
      } else {
        while (IsOp(",")) {
          ++i_;
          s->targets.push_back(ExpectName());
        }
      }
      if (Cur().kind == K::kBlockEnd && s->targets.size() == 1 && s->attr.empty()) {
        ++i_;
        s->kind = Stmt::Kind::kSetBlock;
        s->body = ParseBody({"endset"}, &end);
        ExpectBlockEnd();
        return s;
      }
      ExpectOp("=");
      s->expr = ParseTupleOrExpr();
      ExpectBlockEnd();
    } else if (name == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->text = ExpectName();
      ExpectOp("(");
      while (!IsOp(")")) {
        if (!s->params.empty()) ExpectOp(",");
        if (IsOp(")")) break;
        std::string param = ExpectName();
        ExprPtr def;
        if (IsOp("=")) {
          ++i_;
          def = ParseExpr();
        }
        s->params.emplace_back(std::move(param), std::move(def));
      }
      ++i_;
      ExpectBlockEnd();
      s->body = ParseBody({"endmacro"}, &end);
      ExpectBlockEnd();
    } else if (name == "break" || name == "continue") {
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      ExpectBlockEnd();
    } else if (name == "filter") {
      s->kind = Stmt::Kind::kFilter;
      auto input = MakeExpr(Expr::Kind::kName, tok.line);
      input->name = kFilterBody;
      s->expr = std::move(input);
      do {
        if (IsOp("|")) ++i_;
        const int line = Cur().line;
        auto f = MakeExpr(Expr::Kind::kFilter, line);
        f->name = ExpectName();
        if (!IsFilter(f->name)) throw Error("no filter named '" + f->name + "'", line);
        f->args.push_back(std::move(s->expr));
        if (IsOp("(")) ParseArgs(f.get());
        s->expr = std::move(f);
      } while (IsOp("|"));
      ExpectBlockEnd();
      s->body = ParseBody({"endfilter"}, &end);
      ExpectBlockEnd();
    } else if (name == "generation") {
      // transformers' AssistantTracker extension: renders its body unchanged.
      s->kind = Stmt::Kind::kScope;
      ExpectBlockEnd();
      s->body = ParseBody({"endgeneration"}, &end);
      ExpectBlockEnd();
    } else {
      throw Error("unknown or unsupported tag '" + name + "'", tok.line);
    }
    return s;
  }

  // "a, b" (a tuple, as a list) or one expression.
  ExprPtr ParseTupleOrExpr() {
    const int line = Cur().line;
    ExprPtr first = ParseExpr();
    if (!IsOp(",")) return first;
    auto list = MakeExpr(Expr::Kind::kList, line);
    list->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++i_;
      if (Cur().kind == K::kBlockEnd || Cur().kind == K::kVarEnd) break;
      list->args.push_back(ParseExpr());
    }
    return list;
  }

  ExprPtr ParseExpr(bool with_cond = true) {
    ExprPtr e = ParseOr();
    if (!with_cond) return e;
    while (IsName("if")) {
      const int line = Next().line;
      auto c = MakeExpr(Expr::Kind::kCond, line);
      c->args.push_back(ParseOr());
      c->args.push_back(std::move(e));
      if (IsName("else")) {
        ++i_;
        c->args.push_back(ParseExpr());
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr Binary(Expr::Kind kind, ExprPtr a, ExprPtr b, int line, std::string op = "") {
    auto e = MakeExpr(kind, line);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (IsName("or")) {
      const int line = Next().line;
      e = Binary(Expr::Kind::kOr, std::move(e), ParseAnd(), line);
    }
    return e;
  }

  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (IsName("and")) {
      const int line = Next().line;
      e = Binary(Expr::Kind::kAnd, std::move(e), ParseNot(), line);
    }
    return e;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      const int line = Next().line;
      auto e = MakeExpr(Expr::Kind::kUnary, line);
      e->name = "not";
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    const int line = Cur().line;
    ExprPtr first = ParseMath1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().kind == K::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                   Cur().text == ">" || Cur().text == "<=" || Cur().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++i_;
        op = "in";
      } else if (IsName("not") && t_[i_ + 1].kind == K::kName && t_[i_ + 1].text == "in") {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = MakeExpr(Expr::Kind::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(ParseMath1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& op = Next();
      e = Binary(Expr::Kind::kBinary, std::move(e), ParseConcat(), op.line, op.text);
    }
    return e;
  }

  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (IsOp("~")) {
      const Token& op = Next();
      e = Binary(Expr::Kind::kBinary, std::move(e), ParseMath2(), op.line, "~");
    }
    return e;
  }

  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& op = Next();
      e = Binary(Expr::Kind::kBinary, std::move(e), ParsePow(), op.line, op.text);
    }
    return e;
  }

  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary(true);
    while (IsOp("**")) {
      const Token& op = Next();
      e = Binary(Expr::Kind::kBinary, std::move(e), ParseUnary(true), op.line, "**");
    }
    return e;
  }

  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const Token& op = Next();
      e = MakeExpr(Expr::Kind::kUnary, op.line);
      e->name = op.text;
      e->args.push_back(ParseUnary(false));
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    if (with_filter) e = ParseFilterExpr(std::move(e));
    return e;
  }

  ExprPtr ParsePrimary() {
    const Token& tok = Cur();
    switch (tok.kind) {
      case K::kName: {
        ++i_;
        auto e = MakeExpr(Expr::Kind::kLiteral, tok.line);
        if (tok.text == "true" || tok.text == "True") {
          e->literal = true;
        } else if (tok.text == "false" || tok.text == "False") {
          e->literal = false;
        } else if (tok.text == "none" || tok.text == "None") {
          e->literal = nullptr;
        } else {
          e->kind = Expr::Kind::kName;
          e->name = tok.text;
        }
        return e;
      }
      case K::kString: {
        std::string s;
        while (Cur().kind == K::kString) s += Next().text;  // adjacent literals concatenate
        auto e = MakeExpr(Expr::Kind::kLiteral, tok.line);
        e->literal = s;
        return e;
      }
      case K::kInt: {
        ++i_;
        auto e = MakeExpr(Expr::Kind::kLiteral, tok.line);
        try {
          e->literal = static_cast<int64_t>(std::stoll(tok.text));
        } catch (const std::exception&) {
          throw Error("integer literal out of range: " + tok.text, tok.line);
        }
        return e;
      }
      case K::kFloat: {
        ++i_;
        auto e = MakeExpr(Expr::Kind::kLiteral, tok.line);
        e->literal = std::stod(tok.text);
        return e;
      }
      case K::kOp:
        if (tok.text == "(") {
          ++i_;
          if (IsOp(")")) {
            ++i_;
            return MakeExpr(Expr::Kind::kList, tok.line);
          }
          ExprPtr e = ParseExpr();
          if (IsOp(",")) {
            auto list = MakeExpr(Expr::Kind::kList, tok.line);
            list->args.push_back(std::move(e));
            while (IsOp(",")) {
              ++i_;
              if (IsOp(")")) break;
              list->args.push_back(ParseExpr());
            }
            e = std::move(list);
          }
          ExpectOp(")");
          return e;
        }
        if (tok.text == "[") {
          ++i_;
          auto e = MakeExpr(Expr::Kind::kList, tok.line);
          while (!IsOp("]")) {
            if (!e->args.empty()) ExpectOp(",");
            if (IsOp("]")) break;
            e->args.push_back(ParseExpr());
          }
          ++i_;
          return e;
        }
        if (tok.text == "{") {
          ++i_;
          auto e = MakeExpr(Expr::Kind::kDict, tok.line);
          while (!IsOp("}")) {
            if (!e->keys.empty()) ExpectOp(",");
            if (IsOp("}")) break;
            e->keys.push_back(ParseExpr());
            ExpectOp(":");
            e->args.push_back(ParseExpr());
          }
          ++i_;
          return e;
        }
        break;
      default:
        break;
    }
    Fail("unexpected token in expression");
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        auto a = MakeExpr(Expr::Kind::kGetAttr, line);
        if (Cur().kind == K::kName) {
          a->name = Next().text;
        } else if (Cur().kind == K::kInt) {  // foo.0 is foo[0]
          a->kind = Expr::Kind::kGetItem;
          auto idx = MakeExpr(Expr::Kind::kLiteral, line);
          idx->literal = static_cast<int64_t>(std::stoll(Next().text));
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(idx));
          e = std::move(a);
          continue;
        } else {
          Fail("expected an attribute name");
        }
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (IsOp("[")) {
        e = ParseSubscript(std::move(e));
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr e) {
    const int line = Next().line;  // "["
    ExprPtr parts[3];
    int colons = 0;
    if (!IsOp(":")) parts[0] = ParseExpr();
    while (IsOp(":") && colons < 2) {
      ++i_;
      ++colons;
      if (!IsOp(":") && !IsOp("]")) parts[colons] = ParseExpr();
    }
    ExpectOp("]");
    auto s = MakeExpr(colons == 0 ? Expr::Kind::kGetItem : Expr::Kind::kSlice, line);
    s->args.push_back(std::move(e));
    if (colons == 0) {
      s->args.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) s->args.push_back(std::move(p));
    }
    return s;
  }

  // "(" args ")": positional, then name=value keywords; appended to e->args / kwargs.
  void ParseArgs(Expr* e) {
    ExpectOp("(");
    bool first = true;
    while (!IsOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (IsOp(")")) break;
      if (Cur().kind == K::kName && t_[i_ + 1].kind == K::kOp && t_[i_ + 1].text == "=") {
        std::string key = Next().text;
        ++i_;
        e->kwargs.emplace_back(std::move(key), ParseExpr());
      } else {
        if (!e->kwargs.empty()) Fail("positional argument after a keyword argument");
        e->args.push_back(ParseExpr());
      }
    }
    ++i_;
  }

  ExprPtr ParseCall(ExprPtr callee) {
    auto c = MakeExpr(Expr::Kind::kCall, Cur().line);
    c->args.push_back(std::move(callee));
    ParseArgs(c.get());
    return c;
  }

  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        ++i_;
        const int line = Cur().line;
        auto f = MakeExpr(Expr::Kind::kFilter, line);
        f->name = ExpectName();
        if (!IsFilter(f->name)) throw Error("no filter named '" + f->name + "'", line);
        f->args.push_back(std::move(e));
        if (IsOp("(")) ParseArgs(f.get());
        e = std::move(f);
      } else if (IsName("is")) {
        const int line = Next().line;
        auto t = MakeExpr(Expr::Kind::kTest, line);
        if (IsName("not")) {
          ++i_;
          t->negated = true;
        }
        t->name = ExpectName();
        if (!IsTest(t->name)) throw Error("no test named '" + t->name + "'", line);
        t->args.push_back(std::move(e));
        if (IsOp("(")) {
          ParseArgs(t.get());
        } else if ((Cur().kind == K::kName || Cur().kind == K::kString || Cur().kind == K::kInt ||
                    Cur().kind == K::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if")) {
          t->args.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace kvserve::chat::jinja
