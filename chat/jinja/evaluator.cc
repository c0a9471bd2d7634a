// Tree-walking evaluator: Template::Render. Scoping follows jinja2: each for
// iteration and each macro call has its own frame (so `set` inside a loop
// does not leak out, which is why templates use namespace()); `if` does not.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "chat/jinja/filters.h"
#include "chat/jinja/globals.h"
#include "chat/jinja/lexer.h"
#include "chat/jinja/parser.h"
#include "chat/jinja/template.h"

namespace kvserve::chat::jinja {
namespace {

constexpr int64_t kMaxSteps = 1'000'000;
constexpr size_t kMaxOutputBytes = size_t{64} << 20;
constexpr int kMaxCallDepth = 256;  // macro recursion; the C++ stack must not overflow

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;

  const Value* Find(const std::string& name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

// An error thrown below without a line gets `line`; the kind is kept.
[[noreturn]] void Rethrow(const Error& e, int line) {
  if (dynamic_cast<const RaisedError*>(&e) != nullptr) throw RaisedError(e.message(), line);
  throw Error(e.message(), line);
}

Value Arith(const std::string& op, const Value& a, const Value& b);

class Evaluator {
 public:
  explicit Evaluator(bool loop_neighbors) : loop_neighbors_(loop_neighbors) {}

  Flow Exec(const Body& body, const FramePtr& frame, std::string* out) {
    for (const StmtPtr& s : body) {
      Flow flow;
      try {
        flow = ExecOne(*s, frame, out);
      } catch (const Error& err) {
        if (err.line() != 0) throw;
        Rethrow(err, s->line);
      }
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Value Eval(const Expr& e, const FramePtr& frame) {
    try {
      return EvalInner(e, frame);
    } catch (const Error& err) {
      if (err.line() != 0) throw;
      Rethrow(err, e.line);
    }
  }

 private:
  Flow ExecOne(const Stmt& s, const FramePtr& frame, std::string* out) {
    // A render is bounded whatever the template does (nested loops over
    // range(), say): hub templates run thousands of statements for a long
    // conversation, never millions, and print kilobytes, not megabytes.
    CountStep(s.line, *out);
    switch (s.kind) {
      case Stmt::Kind::kData:
        *out += s.text;
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        *out += ToStr(Eval(*s.expr, frame));
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (Truthy(Eval(*cond, frame))) return Exec(body, frame, out);
        }
        return Exec(s.else_body, frame, out);
      case Stmt::Kind::kFor:
        ExecFor(s, frame, out);
        return Flow::kNormal;
      case Stmt::Kind::kSet:
        ExecSet(s, frame);
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        std::string text;
        Exec(s.body, frame, &text);
        frame->vars[s.targets[0]] = Value(Json(text));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        frame->vars[s.text] = MakeMacro(s, frame);
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        if (loop_depth_ == 0) throw Error("'break' outside a for loop", s.line);
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        if (loop_depth_ == 0) throw Error("'continue' outside a for loop", s.line);
        return Flow::kContinue;
      case Stmt::Kind::kScope:
        return Exec(s.body, frame, out);
      case Stmt::Kind::kFilter: {
        std::string text;
        const Flow flow = Exec(s.body, frame, &text);
        auto f = std::make_shared<Frame>();
        f->parent = frame;
        f->vars[kFilterBody] = Value(Json(std::move(text)));
        *out += ToStr(Eval(*s.expr, f));
        return flow;
      }
    }
    return Flow::kNormal;
  }

  void Bind(const std::vector<std::string>& targets, const Value& v, Frame* frame, int line) {
    if (targets.size() == 1) {
      frame->vars[targets[0]] = v;
      return;
    }
    std::vector<Value> items;
    try {
      items = Iterate(v);
    } catch (const Error& e) {
      Rethrow(e, line);
    }
    if (items.size() != targets.size()) {
      throw Error("cannot unpack " + std::to_string(items.size()) + " values into " +
                      std::to_string(targets.size()) + " names",
                  line);
    }
    for (size_t i = 0; i < items.size(); ++i) frame->vars[targets[i]] = items[i];
  }

  // A render is bounded whatever the template does (nested loops over
  // range(), say): hub templates run thousands of statements and loop
  // iterations for a long conversation, never millions, and print kilobytes.
  void CountStep(int line, const std::string& out) {
    if (++steps_ > kMaxSteps) {
      throw Error("the template ran more than 1,000,000 statements and loop iterations", line);
    }
    if (out.size() > kMaxOutputBytes) throw Error("the template rendered more than 64 MiB", line);
  }

  void ExecFor(const Stmt& s, const FramePtr& frame, std::string* out) {
    std::vector<Value> items;
    const Value iterable = Eval(*s.expr, frame);
    try {
      items = Iterate(iterable);
    } catch (const Error& e) {
      Rethrow(e, s.line);
    }
    if (s.cond) {  // "for x in y if cond": loop.* counts the kept items only
      std::vector<Value> kept;
      for (const Value& item : items) {
        auto f = std::make_shared<Frame>();
        f->parent = frame;
        Bind(s.targets, item, f.get(), s.line);
        if (Truthy(Eval(*s.cond, f))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    bool completed_one = false;
    ++loop_depth_;
    for (int64_t i = 0; i < n; ++i) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      Json loop = {
          {"index", i + 1},  {"index0", i},        {"revindex", n - i}, {"revindex0", n - i - 1},
          {"first", i == 0}, {"last", i == n - 1}, {"length", n},       {"depth", 1},
          {"depth0", 0}};
      if (loop_neighbors_ && i > 0) loop["previtem"] = ToJson(items[i - 1]);
      if (loop_neighbors_ && i + 1 < n) loop["nextitem"] = ToJson(items[i + 1]);
      f->vars["loop"] = Value(std::move(loop));
      CountStep(s.line, *out);  // an empty body still costs an iteration
      Bind(s.targets, items[i], f.get(), s.line);
      const Flow flow = Exec(s.body, f, out);
      if (flow == Flow::kBreak) break;
      if (flow == Flow::kNormal) completed_one = true;
    }
    --loop_depth_;
    // jinja2 clears its "no iteration" flag at the end of the body, so the
    // else branch also runs when every iteration ended in break or continue.
    if (!completed_one) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      Exec(s.else_body, f, out);
    }
  }

  void ExecSet(const Stmt& s, const FramePtr& frame) {
    Value v = Eval(*s.expr, frame);
    if (s.attr.empty()) {
      Bind(s.targets, v, frame.get(), s.line);
      return;
    }
    const Value* obj = frame->Find(s.targets[0]);
    if (obj == nullptr || obj->kind != Value::Kind::kNamespace) {
      throw Error("cannot assign attribute on non-namespace object '" + s.targets[0] + "'", s.line);
    }
    (*obj->ns)[s.attr] = ToJson(v);
  }

  Value MakeMacro(const Stmt& s, const FramePtr& frame) {
    std::weak_ptr<Frame> def_frame = frame;  // weak: the frame holds the macro
    const Stmt* stmt = &s;
    return Value::Callable([this, stmt, def_frame](const CallArgs& args) -> Value {
      FramePtr parent = def_frame.lock();
      if (!parent) throw Error("macro '" + stmt->text + "' called outside its scope");
      if (++call_depth_ > kMaxCallDepth) {
        --call_depth_;
        throw Error("macro recursion too deep");
      }
      auto f = std::make_shared<Frame>();
      f->parent = parent;
      if (args.positional.size() > stmt->params.size()) {
        --call_depth_;
        throw Error("macro '" + stmt->text + "' takes not more than " +
                    std::to_string(stmt->params.size()) + " argument(s)");
      }
      for (const auto& keyword : args.keyword) {
        const std::string& key = keyword.first;  // a lambda may not capture a structured binding
        const bool known = std::any_of(stmt->params.begin(), stmt->params.end(),
                                       [&](const auto& p) { return p.first == key; });
        if (!known) {
          --call_depth_;
          throw Error("macro '" + stmt->text + "' takes no keyword argument '" + key + "'");
        }
      }
      for (size_t i = 0; i < stmt->params.size(); ++i) {
        const auto& [name, def] = stmt->params[i];
        const Value* given = args.Get(i, name);
        if (given != nullptr) {
          f->vars[name] = *given;
        } else if (def) {
          f->vars[name] = Eval(*def, f);
        } else {
          f->vars[name] = Value::Undefined("'" + name + "' is undefined");
        }
      }
      std::string text;
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;
      Exec(stmt->body, f, &text);
      loop_depth_ = saved_loops;
      --call_depth_;
      return Value(Json(text));
    });
  }

  Value EvalInner(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return Value(e.literal);
      case Expr::Kind::kName: {
        const Value* v = frame->Find(e.name);
        return v != nullptr ? *v : Value::Undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::kGetAttr:
        return GetAttr(Eval(*e.args[0], frame), e.name);
      case Expr::Kind::kGetItem:
        return GetItem(Eval(*e.args[0], frame), Eval(*e.args[1], frame));
      case Expr::Kind::kSlice:
        return EvalSlice(e, frame);
      case Expr::Kind::kCall:
        return EvalCall(e, frame);
      case Expr::Kind::kFilter: {
        const Value input = Eval(*e.args[0], frame);
        return ApplyFilter(e.name, input, EvalArgs(e, frame));
      }
      case Expr::Kind::kTest: {
        const Value input = Eval(*e.args[0], frame);
        return Value(Json(ApplyTest(e.name, input, EvalArgs(e, frame)) != e.negated));
      }
      case Expr::Kind::kUnary: {
        const Value v = Eval(*e.args[0], frame);
        if (e.name == "not") return Value(Json(!Truthy(v)));
        if (!v.is_data() || !(v.data().is_number() || v.data().is_boolean())) {
          throw Error("bad operand type for unary " + e.name + ": '" + TypeName(v) + "'");
        }
        if (e.name == "+") return v;
        return Arith("-", Value(Json(0)), v);
      }
      case Expr::Kind::kBinary: {
        const Value a = Eval(*e.args[0], frame);
        const Value b = Eval(*e.args[1], frame);
        if (e.name == "~") return Value(Json(ToStr(a) + ToStr(b)));
        return Arith(e.name, a, b);
      }
      case Expr::Kind::kCompare:
        return EvalCompare(e, frame);
      case Expr::Kind::kAnd: {
        Value a = Eval(*e.args[0], frame);
        return Truthy(a) ? Eval(*e.args[1], frame) : a;
      }
      case Expr::Kind::kOr: {
        Value a = Eval(*e.args[0], frame);
        return Truthy(a) ? a : Eval(*e.args[1], frame);
      }
      case Expr::Kind::kCond:
        if (Truthy(Eval(*e.args[0], frame))) return Eval(*e.args[1], frame);
        return e.args[2] ? Eval(*e.args[2], frame)
                         : Value::Undefined("the if expression had no else");
      case Expr::Kind::kList: {
        Json list = Json::array();
        for (const ExprPtr& a : e.args) list.push_back(ToJson(Eval(*a, frame)));
        return Value(std::move(list));
      }
      case Expr::Kind::kDict: {
        Json dict = Json::object();
        for (size_t i = 0; i < e.keys.size(); ++i) {
          const Value k = Eval(*e.keys[i], frame);
          dict[k.is_string() ? k.str() : ToStr(k)] = ToJson(Eval(*e.args[i], frame));
        }
        return Value(std::move(dict));
      }
    }
    throw Error("unknown expression");
  }

  CallArgs EvalArgs(const Expr& e, const FramePtr& frame) {
    CallArgs args;
    for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i], frame));
    for (const auto& [name, ex] : e.kwargs) args.keyword.emplace_back(name, Eval(*ex, frame));
    return args;
  }

  static Value GetAttr(const Value& obj, const std::string& name) {
    switch (obj.kind) {
      case Value::Kind::kUndefined:
        throw Error(obj.hint.empty() ? "undefined value has no attribute '" + name + "'"
                                     : obj.hint);
      case Value::Kind::kNamespace: {
        auto it = obj.ns->find(name);
        if (it != obj.ns->end()) return Value(*it);
        break;
      }
      case Value::Kind::kCallable:
        break;
      case Value::Kind::kData:
        if (obj.data().is_object()) {
          auto it = obj.data().find(name);
          if (it != obj.data().end()) return Value::Element(obj, *it);
        }
        break;
    }
    // Appended piecewise: GCC 12's -Wrestrict misfires on "'" + std::string.
    std::string hint = "'";
    hint += TypeName(obj);
    hint += " object' has no attribute '";
    hint += name;
    hint += "'";
    return Value::Undefined(std::move(hint));
  }

  static Value GetItem(const Value& obj, const Value& key) {
    if (key.is_string()) {
      if (obj.is_dict() || obj.kind == Value::Kind::kNamespace || obj.is_undefined()) {
        return GetAttr(obj, key.str());
      }
    }
    if (obj.is_undefined()) {
      throw Error(obj.hint.empty() ? "undefined value is not subscriptable" : obj.hint);
    }
    std::string missing = TypeName(obj);  // built piecewise (see GetAttr)
    missing.insert(0, 1, '\'');
    missing += " object' has no element ";
    missing += ToStr(key);
    if (!key.is_data() || !(key.data().is_number_integer() || key.data().is_boolean())) {
      return Value::Undefined(missing);
    }
    int64_t i = ToInt(key, "index");
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.data().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined(missing);
      return Value::Element(obj, obj.data()[static_cast<size_t>(i)]);
    }
    if (obj.is_string()) {
      const std::u32string s = DecodeUtf8(obj.str());
      const int64_t n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined(missing);
      return Value(Json(EncodeUtf8(s[static_cast<size_t>(i)])));
    }
    return Value::Undefined(missing);
  }

  // Python slice semantics (negative bounds, negative steps, clamping).
  Value EvalSlice(const Expr& e, const FramePtr& frame) {
    const Value obj = Eval(*e.args[0], frame);
    std::optional<int64_t> bound[3];
    for (int k = 0; k < 3; ++k) {
      if (!e.args[k + 1]) continue;
      const Value v = Eval(*e.args[k + 1], frame);
      if (!v.is_none()) bound[k] = ToInt(v, "slice index");
    }
    const int64_t step = bound[2].value_or(1);
    if (step == 0) throw Error("slice step cannot be zero");
    std::u32string chars;
    int64_t n;
    if (obj.is_list()) {
      n = static_cast<int64_t>(obj.data().size());
    } else if (obj.is_string()) {
      chars = DecodeUtf8(obj.str());
      n = static_cast<int64_t>(chars.size());
    } else if (obj.is_undefined()) {
      throw Error(obj.hint.empty() ? "undefined value is not subscriptable" : obj.hint);
    } else {  // slices bypass jinja2's getitem: Python's TypeError propagates
      throw Error("'" + TypeName(obj) + "' object is not subscriptable");
    }
    const auto clamp = [&](std::optional<int64_t> b, int64_t def) {
      if (!b) return def;
      int64_t x = *b;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t start = clamp(bound[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(bound[1], step > 0 ? n : -1);
    Json list = Json::array();
    std::u32string sub;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (obj.is_list()) {
        list.push_back(obj.data()[static_cast<size_t>(i)]);
      } else {
        sub += chars[static_cast<size_t>(i)];
      }
    }
    if (obj.is_list()) return Value(std::move(list));
    return Value(Json(EncodeUtf8(sub)));
  }

  Value EvalCall(const Expr& e, const FramePtr& frame) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::kGetAttr) {
      const Value obj = Eval(*callee.args[0], frame);
      CallArgs args = EvalArgs(e, frame);
      if (obj.is_data()) {
        std::optional<Value> result = CallMethod(obj, callee.name, args);
        if (result) return *result;
      }
      return CallValue(GetAttr(obj, callee.name), args, callee.name);
    }
    const Value fn = Eval(callee, frame);
    return CallValue(fn, EvalArgs(e, frame), callee.kind == Expr::Kind::kName ? callee.name : "");
  }

  static Value CallValue(const Value& fn, const CallArgs& args, const std::string& name) {
    if (fn.kind == Value::Kind::kCallable) return (*fn.fn)(args);
    if (fn.is_undefined() && !fn.hint.empty()) throw Error(fn.hint);
    throw Error("'" + TypeName(fn) + "' object" + (name.empty() ? "" : " '" + name + "'") +
                " is not callable");
  }

  static bool Contains(const Value& container, const Value& item) {
    if (container.is_undefined()) return false;
    if (container.is_string()) {
      if (!item.is_string()) {
        throw Error("'in <string>' requires string as left operand, not " + TypeName(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    }
    if (container.is_dict() || container.kind == Value::Kind::kNamespace) {
      if (item.is_list() || item.is_dict())
        throw Error("unhashable type: '" + TypeName(item) + "'");
    }
    if (container.is_dict()) return item.is_string() && container.data().contains(item.str());
    if (container.kind == Value::Kind::kNamespace) {
      return item.is_string() && container.ns->contains(item.str());
    }
    if (container.is_list()) {
      for (const Json& j : container.data()) {
        if (Equal(Value(j), item)) return true;
      }
      return false;
    }
    throw Error("argument of type '" + TypeName(container) + "' is not iterable");
  }

  Value EvalCompare(const Expr& e, const FramePtr& frame) {
    Value left = Eval(*e.args[0], frame);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = Eval(*e.args[i + 1], frame);
      const std::string& op = e.ops[i];
      bool ok;
      if (op == "==") {
        ok = Equal(left, right);
      } else if (op == "!=") {
        ok = !Equal(left, right);
      } else if (op == "in") {
        ok = Contains(right, left);
      } else if (op == "not in") {
        ok = !Contains(right, left);
      } else {
        const int c = Compare(left, right);
        ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
      }
      if (!ok) return Value(Json(false));
      left = std::move(right);
    }
    return Value(Json(true));
  }

  const bool loop_neighbors_;
  int loop_depth_ = 0;
  int64_t steps_ = 0;  // statements and loop iterations so far in this render
  int call_depth_ = 0;
};

bool IsNum(const Value& v) {
  return v.is_data() && (v.data().is_number() || v.data().is_boolean());
}
bool IsIntLike(const Value& v) {
  return v.is_data() && (v.data().is_number_integer() || v.data().is_boolean());
}
double AsDouble(const Value& v) {
  return v.data().is_boolean() ? (v.data().get<bool>() ? 1.0 : 0.0) : v.data().get<double>();
}

// Results larger than this are refused: a template (or a client value it
// multiplies by) must not exhaust the daemon's memory.
constexpr size_t kMaxRepeatBytes = size_t{1} << 26;

Value Repeat(const Value& seq, int64_t times) {
  const size_t unit = seq.is_string() ? seq.str().size() : seq.data().size() * 8;
  if (times > 0 && unit > 0 && static_cast<size_t>(times) > kMaxRepeatBytes / unit) {
    throw Error("repetition result too large");
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value(Json(out));
  }
  Json out = Json::array();
  for (int64_t i = 0; i < times; ++i) {
    for (const Json& j : seq.data()) out.push_back(j);
  }
  return Value(std::move(out));
}

Value Arith(const std::string& op, const Value& a, const Value& b) {
  if (op == "+" && a.is_string() && b.is_string()) return Value(Json(a.str() + b.str()));
  if (op == "+" && a.is_list() && b.is_list()) {
    Json out = a.data();
    for (const Json& j : b.data()) out.push_back(j);
    return Value(std::move(out));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && IsIntLike(b))
    return Repeat(a, ToInt(b, "count"));
  if (op == "*" && (b.is_string() || b.is_list()) && IsIntLike(a))
    return Repeat(b, ToInt(a, "count"));
  if (!IsNum(a) || !IsNum(b)) {
    throw Error("unsupported operand type(s) for " + op + ": '" + TypeName(a) + "' and '" +
                TypeName(b) + "'");
  }
  if (IsIntLike(a) && IsIntLike(b) && op != "/") {
    const int64_t x = ToInt(a, "operand"), y = ToInt(b, "operand");
    if (op == "+") return Value(Json(x + y));
    if (op == "-") return Value(Json(x - y));
    if (op == "*") return Value(Json(x * y));
    if (op == "**") {
      if (y < 0) return Value(Json(std::pow(static_cast<double>(x), static_cast<double>(y))));
      // Squaring; past int64 the result is a float (Python's would be a big int).
      int64_t r = 1, base = x;
      bool overflow = false;
      for (int64_t e = y; e > 0 && !overflow; e >>= 1) {
        if ((e & 1) != 0) overflow = __builtin_mul_overflow(r, base, &r);
        if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
      }
      if (overflow) return Value(Json(std::pow(static_cast<double>(x), static_cast<double>(y))));
      return Value(Json(r));
    }
    if (y == 0) throw Error("integer division or modulo by zero");
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors
      --q;
      r += y;
    }
    return Value(op == "//" ? Json(q) : Json(r));
  }
  const double x = AsDouble(a), y = AsDouble(b);
  if (op == "+") return Value(Json(x + y));
  if (op == "-") return Value(Json(x - y));
  if (op == "*") return Value(Json(x * y));
  if (op == "**") return Value(Json(std::pow(x, y)));
  if (y == 0) throw Error("division by zero");
  if (op == "/") return Value(Json(x / y));
  if (op == "//") return Value(Json(std::floor(x / y)));
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return Value(Json(r));
}

}  // namespace

Template::Template(const std::string& source)
    : body_(Parse(Lex(source))),
      loop_neighbors_(source.find("previtem") != std::string::npos ||
                      source.find("nextitem") != std::string::npos) {}

std::string Template::Render(Json context) const {
  auto globals = std::make_shared<Frame>();
  for (auto& [name, fn] : Globals()) globals->vars[name] = fn;
  auto root = std::make_shared<Frame>();
  root->parent = globals;
  if (context.is_object()) {
    const Value all(std::move(context));  // the variables are views into it
    for (auto it = all.data().begin(); it != all.data().end(); ++it) {
      root->vars[it.key()] = Value::Element(all, it.value());
    }
  }
  Evaluator evaluator(loop_neighbors_);
  std::string out;
  evaluator.Exec(body_, root, &out);
  return out;
}

}  // namespace kvserve::chat::jinja
