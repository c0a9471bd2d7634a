// Jinja's built-in filters and tests as jinja2 3.x defines them, with
// transformers' tojson (json.dumps with ensure_ascii=False, no HTML escaping).
#include "chat/jinja/filters.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

namespace kvserve::chat::jinja {
namespace {

using FilterFn = Value (*)(const Value&, const CallArgs&);
using TestFn = bool (*)(const Value&, const CallArgs&);

bool BoolArg(const CallArgs& a, size_t i, const char* name, bool def) {
  const Value* v = a.Get(i, name);
  return v != nullptr ? Truthy(*v) : def;
}

// "a.b.0": jinja's attribute getter (item lookup, integer parts index lists);
// `def` replaces an undefined after each part, as map(default=...) does.
Value GetPath(const Value& v, const std::string& path, const Value* def = nullptr) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_dict()) {
      auto it = cur.data().find(part);
      cur = it != cur.data().end() ? Value::Element(cur, *it)
                                   : Value::Undefined("no attribute '" + part + "'");
    } else if (cur.kind == Value::Kind::kNamespace) {
      auto it = cur.ns->find(part);
      cur = it != cur.ns->end() ? Value(*it) : Value::Undefined("no attribute '" + part + "'");
    } else if (cur.is_list() && !part.empty() &&
               part.find_first_not_of("0123456789") == std::string::npos) {
      const size_t i = std::stoul(part);
      cur = i < cur.data().size() ? Value::Element(cur, cur.data()[i])
                                  : Value::Undefined("no item " + part);
    } else if (cur.is_undefined()) {
      throw Error(cur.hint.empty() ? "undefined value has no attribute '" + part + "'" : cur.hint);
    } else {
      cur = Value::Undefined("'" + TypeName(cur) + " object' has no attribute '" + part + "'");
    }
    if (def != nullptr && cur.is_undefined()) cur = *def;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string StrArgOr(const CallArgs& a, size_t i, const char* name, const std::string& def) {
  const Value* v = a.Get(i, name);
  if (v == nullptr) return def;
  return ToStr(*v);
}

Value Length(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value(Json(0));
  if (v.is_string()) return Value(Json(static_cast<int64_t>(CountCodePoints(v.str()))));
  if (v.is_list() || v.is_dict()) return Value(Json(static_cast<int64_t>(v.data().size())));
  if (v.kind == Value::Kind::kNamespace) return Value(Json(static_cast<int64_t>(v.ns->size())));
  throw Error("object of type '" + TypeName(v) + "' has no len()");
}

Value First(const Value& v, const CallArgs&) {
  std::vector<Value> items = Iterate(v);
  return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items.front();
}

Value Last(const Value& v, const CallArgs&) {
  std::vector<Value> items = Iterate(v);
  return items.empty() ? Value::Undefined("No last item, sequence was empty.") : items.back();
}

Value Join(const Value& v, const CallArgs& a) {
  const std::string sep = StrArgOr(a, 0, "d", "");
  const Value* attr = a.Get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : Iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += ToStr(attr != nullptr ? GetPath(item, ToStr(*attr)) : item);
  }
  return Value(Json(out));
}

Value Default(const Value& v, const CallArgs& a) {
  const Value* def = a.Get(0, "default_value");
  const bool boolean = BoolArg(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !Truthy(v))) return def != nullptr ? *def : Value(Json(""));
  return v;
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent,
// separators=separators, sort_keys=sort_keys).
Value ToJsonFilter(const Value& v, const CallArgs& a) {
  if (v.is_undefined()) throw Error("Object of type Undefined is not JSON serializable");
  int indent = -1;
  if (const Value* ind = a.Get(1, "indent"); ind != nullptr && !ind->is_none()) {
    indent = static_cast<int>(ToInt(*ind, "indent"));
  }
  std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
  if (const Value* sep = a.Get(2, "separators"); sep != nullptr && !sep->is_none()) {
    if (!sep->is_list() || sep->data().size() != 2)
      throw Error("separators must be a pair of strings");
    item_sep = sep->data()[0].get<std::string>();
    key_sep = sep->data()[1].get<std::string>();
  }
  const bool sort_keys = BoolArg(a, 3, "sort_keys", false);
  if (const Value* ea = a.Get(0, "ensure_ascii"); ea != nullptr && Truthy(*ea)) {
    throw Error("tojson(ensure_ascii=True) is not supported");
  }
  return Value(Json(PyJsonDumps(ToJson(v), indent, item_sep, key_sep, sort_keys)));
}

std::optional<double> ParseFloat(const std::string& raw) {
  const std::string s = Strip(raw, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  size_t used = 0;
  try {
    const double d = std::stod(s, &used);
    if (used == s.size()) return d;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// int(), float(), abs() and round() of an undefined value fail in jinja2
// (Undefined defines __int__ and __float__ to raise).
void FailIfUndefined(const Value& v) {
  if (v.is_undefined()) throw Error(v.hint.empty() ? "undefined value used as a number" : v.hint);
}

Value Int(const Value& v, const CallArgs& a) {
  FailIfUndefined(v);
  const Value* def = a.Get(0, "default");
  const Value fallback = def != nullptr ? *def : Value(Json(0));
  if (v.is_data() && (v.data().is_number_integer() || v.data().is_boolean()))
    return Value(Json(ToInt(v, "")));
  if (v.is_data() && v.data().is_number_float()) {
    const double d = v.data().get<double>();
    return std::isfinite(d) ? Value(Json(static_cast<int64_t>(std::trunc(d)))) : fallback;
  }
  if (v.is_string()) {
    const std::string s = Strip(v.str(), std::nullopt, true, true);
    size_t used = 0;
    try {
      const int64_t i = std::stoll(s, &used, 10);
      if (used == s.size() && !s.empty()) return Value(Json(i));
    } catch (const std::exception&) {
    }
    if (auto d = ParseFloat(s); d && std::isfinite(*d))
      return Value(Json(static_cast<int64_t>(std::trunc(*d))));
  }
  return fallback;
}

Value Float(const Value& v, const CallArgs& a) {
  FailIfUndefined(v);
  const Value* def = a.Get(0, "default");
  const Value fallback = def != nullptr ? *def : Value(Json(0.0));
  if (v.is_data() && (v.data().is_number() || v.data().is_boolean())) {
    return Value(
        Json(v.data().is_boolean() ? (v.data().get<bool>() ? 1.0 : 0.0) : v.data().get<double>()));
  }
  if (v.is_string()) {
    if (auto d = ParseFloat(v.str())) return Value(Json(*d));
  }
  return fallback;
}

Value List(const Value& v, const CallArgs&) {
  Json out = Json::array();
  for (const Value& item : Iterate(v)) out.push_back(ToJson(item));
  return Value(std::move(out));
}

Value DictView(const Value& v, int which) {  // 0 items, 1 keys, 2 values
  Json out = Json::array();
  if (v.is_undefined()) return Value(std::move(out));
  const Json* d = v.is_dict()                         ? &v.data()
                  : v.kind == Value::Kind::kNamespace ? v.ns.get()
                                                      : nullptr;
  if (d == nullptr) throw Error("can only get item pairs from a mapping, not " + TypeName(v));
  for (auto it = d->begin(); it != d->end(); ++it) {
    if (which == 0) out.push_back(Json::array({it.key(), it.value()}));
    if (which == 1) out.push_back(it.key());
    if (which == 2) out.push_back(it.value());
  }
  return Value(std::move(out));
}

Value Replace(const Value& v, const CallArgs& a) {
  CallArgs m;
  m.positional = a.positional;
  m.keyword = a.keyword;
  return *CallMethod(Value(Json(ToStr(v))), "replace", m);
}

// The test named by args[first] (default "truthy") with the rest as its arguments.
bool RunTest(const Value& item, const CallArgs& a, size_t first) {
  if (a.positional.size() <= first) return Truthy(item);
  const Value& name = a.positional[first];
  if (!name.is_string() || !IsTest(name.str())) throw Error("no test named '" + ToStr(name) + "'");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + static_cast<long>(first) + 1, a.positional.end());
  return ApplyTest(name.str(), item, rest);
}

Value SelectImpl(const Value& v, const CallArgs& a, bool attr, bool keep) {
  Json out = Json::array();
  if (!Truthy(v)) return Value(std::move(out));  // jinja2: `if value: for item in value`
  std::string path;
  if (attr) {
    if (a.positional.empty()) throw Error("missing parameter for attribute name");
    path = ToStr(a.positional[0]);
  }
  for (const Value& item : Iterate(v)) {
    const Value subject = attr ? GetPath(item, path) : item;
    if (RunTest(subject, a, attr ? 1 : 0) == keep) out.push_back(ToJson(item));
  }
  return Value(std::move(out));
}

Value Map(const Value& v, const CallArgs& a) {
  Json out = Json::array();
  if (!Truthy(v)) return Value(std::move(out));  // jinja2: `if value: for item in value`
  if (const Value* attr = a.Keyword("attribute")) {
    const Value* def = a.Keyword("default");
    for (const Value& item : Iterate(v)) {
      out.push_back(ToJson(GetPath(item, ToStr(*attr), def)));
    }
    return Value(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string())
    throw Error("map() needs a filter name or attribute=");
  const std::string name = a.positional[0].str();
  if (!IsFilter(name)) throw Error("no filter named '" + name + "'");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : Iterate(v)) out.push_back(ToJson(ApplyFilter(name, item, rest)));
  return Value(std::move(out));
}

// The sort / unique key: the attribute, lowercased when not case sensitive.
Value SortKey(const Value& item, const Value* attr, bool case_sensitive) {
  Value k = attr != nullptr ? GetPath(item, ToStr(*attr)) : item;
  if (!case_sensitive && k.is_string()) return Value(Json(ToLower(k.str())));
  return k;
}

Value Unique(const Value& v, const CallArgs& a) {
  const bool cs = BoolArg(a, 0, "case_sensitive", false);
  const Value* attr = a.Get(1, "attribute");
  Json out = Json::array();
  std::vector<Value> seen;
  for (const Value& item : Iterate(v)) {
    const Value k = SortKey(item, attr, cs);
    if (k.is_list() || k.is_dict()) throw Error("unhashable type: '" + TypeName(k) + "'");
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, k); })) {
      seen.push_back(k);
      out.push_back(ToJson(item));
    }
  }
  return Value(std::move(out));
}

Value Sort(const Value& v, const CallArgs& a) {
  const bool reverse = BoolArg(a, 0, "reverse", false);
  const bool cs = BoolArg(a, 1, "case_sensitive", false);
  const Value* attr = a.Get(2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : Iterate(v)) keyed.emplace_back(SortKey(item, attr, cs), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? Compare(y.first, x.first) < 0 : Compare(x.first, y.first) < 0;
  });
  Json out = Json::array();
  for (const auto& [k, item] : keyed) out.push_back(ToJson(item));
  return Value(std::move(out));
}

Value Round(const Value& v, const CallArgs& a) {
  const int64_t precision = a.Get(0, "precision") ? ToInt(*a.Get(0, "precision"), "precision") : 0;
  const std::string method = StrArgOr(a, 1, "method", "common");
  if (!v.is_data() || !(v.data().is_number() || v.data().is_boolean())) {
    throw Error("round() needs a number, not " + TypeName(v));
  }
  const double x = v.data().is_boolean() ? (v.data().get<bool>() ? 1 : 0) : v.data().get<double>();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  double r;
  if (method == "common") {
    r = std::nearbyint(x * scale) / scale;  // Python's round(): ties to even
  } else if (method == "ceil") {
    r = std::ceil(x * scale) / scale;
  } else if (method == "floor") {
    r = std::floor(x * scale) / scale;
  } else {
    throw Error("method must be 'common', 'ceil' or 'floor'");
  }
  if (method == "common" && (v.data().is_number_integer() || v.data().is_boolean())) {
    return Value(Json(ToInt(v, "value")));  // round(int, n) is an int (bool is an int)
  }
  return Value(Json(r));
}

Value Abs(const Value& v, const CallArgs&) {
  FailIfUndefined(v);
  if (v.is_data() && v.data().is_number_integer())
    return Value(Json(std::llabs(v.data().get<int64_t>())));
  if (v.is_data() && v.data().is_boolean()) return Value(Json(v.data().get<bool>() ? 1 : 0));
  if (v.is_data() && v.data().is_number()) return Value(Json(std::fabs(v.data().get<double>())));
  throw Error("bad operand type for abs(): '" + TypeName(v) + "'");
}

// jinja2 3.x indent(width=4, first=False, blank=False).
Value Indent(const Value& v, const CallArgs& a) {
  std::string pad;
  const Value* width = a.Get(0, "width");
  if (width == nullptr) {
    pad = "    ";
  } else if (width->is_string()) {
    pad = width->str();
  } else {
    pad.assign(static_cast<size_t>(std::max<int64_t>(0, ToInt(*width, "width"))), ' ');
  }
  const bool first = BoolArg(a, 1, "first", false);
  const bool blank = BoolArg(a, 2, "blank", false);
  if (!v.is_string()) {  // jinja2 appends "\n" to the value: only strings can take it
    FailIfUndefined(v);
    throw Error("indent() needs a string, not " + TypeName(v));
  }
  const std::string s = v.str() + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += "\n";
    if (blank || !lines[i].empty()) out += pad;
    out += lines[i];
  }
  if (first) out = pad + out;
  return Value(Json(out));
}

Value Capitalize(const Value& v, const CallArgs& a) {
  return *CallMethod(Value(Json(ToStr(v))), "capitalize", a);
}

// jinja's title: words start after '-', whitespace or an opening bracket.
Value Title(const Value& v, const CallArgs&) {
  const std::u32string u = DecodeUtf8(ToStr(v));
  std::u32string out;
  bool word_start = true;
  for (const char32_t c : u) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                     (c < 0x80 && std::isspace(static_cast<int>(c)));
    const std::string one = EncodeUtf8(c);
    const std::string mapped = sep ? one : (word_start ? ToUpper(one) : ToLower(one));
    out += DecodeUtf8(mapped);
    word_start = sep;
  }
  return Value(Json(EncodeUtf8(out)));
}

Value Sum(const Value& v, const CallArgs& a) {
  const Value* attr = a.Get(0, "attribute");
  const Value* start = a.Get(1, "start");
  Value total = start != nullptr ? *start : Value(Json(0));
  for (const Value& item : Iterate(v)) {
    const Value x = attr != nullptr ? GetPath(item, ToStr(*attr)) : item;
    if (!x.is_number() || !total.is_number()) throw Error("sum() of non-numbers");
    if (x.data().is_number_integer() && total.data().is_number_integer()) {
      total = Value(Json(total.data().get<int64_t>() + x.data().get<int64_t>()));
    } else {
      total = Value(Json(total.data().get<double>() + x.data().get<double>()));
    }
  }
  return total;
}

Value MinMax(const Value& v, const CallArgs& a, bool max) {
  const bool cs = BoolArg(a, 0, "case_sensitive", false);
  const Value* attr = a.Get(1, "attribute");
  std::optional<Value> best, best_key;
  for (const Value& item : Iterate(v)) {
    const Value k = SortKey(item, attr, cs);
    if (!best || (max ? Compare(k, *best_key) > 0 : Compare(k, *best_key) < 0)) {
      best = item;
      best_key = k;
    }
  }
  return best ? *best : Value::Undefined("No aggregated item, sequence was empty.");
}

// dictsort(case_sensitive=false, by='key', reverse=false): [key, value] pairs.
Value DictSort(const Value& v, const CallArgs& a) {
  const bool cs = BoolArg(a, 0, "case_sensitive", false);
  const std::string by = StrArgOr(a, 1, "by", "key");
  const bool reverse = BoolArg(a, 2, "reverse", false);
  if (by != "key" && by != "value") throw Error("You can only sort by either 'key' or 'value'");
  if (!v.is_dict()) throw Error("dictsort needs a mapping, not " + TypeName(v));
  std::vector<std::pair<Value, Json>> keyed;
  for (auto it = v.data().begin(); it != v.data().end(); ++it) {
    Value k = by == "key" ? Value(Json(it.key())) : Value(it.value());
    if (!cs && k.is_string()) k = Value(Json(ToLower(k.str())));
    keyed.emplace_back(std::move(k), Json::array({it.key(), it.value()}));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? Compare(y.first, x.first) < 0 : Compare(x.first, y.first) < 0;
  });
  Json out = Json::array();
  for (auto& [k, pair] : keyed) out.push_back(std::move(pair));
  return Value(std::move(out));
}

Value Reverse(const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::u32string u = DecodeUtf8(v.str());
    std::reverse(u.begin(), u.end());
    return Value(Json(EncodeUtf8(u)));
  }
  std::vector<Value> items = Iterate(v);
  Json out = Json::array();
  for (auto it = items.rbegin(); it != items.rend(); ++it) out.push_back(ToJson(*it));
  return Value(std::move(out));
}

const std::unordered_map<std::string, FilterFn>& Filters() {
  static const auto* filters = new std::unordered_map<std::string, FilterFn>{
      {"trim",
       [](const Value& v, const CallArgs& a) {
         const Value* chars = a.Get(0, "chars");
         std::optional<std::string> set;
         if (chars != nullptr && !chars->is_none()) set = ToStr(*chars);
         return Value(Json(Strip(ToStr(v), set, true, true)));
       }},
      {"upper", [](const Value& v, const CallArgs&) { return Value(Json(ToUpper(ToStr(v)))); }},
      {"lower", [](const Value& v, const CallArgs&) { return Value(Json(ToLower(ToStr(v)))); }},
      {"capitalize", Capitalize},
      {"title", Title},
      {"length", Length},
      {"count", Length},
      {"first", First},
      {"last", Last},
      {"join", Join},
      {"default", Default},
      {"d", Default},
      {"tojson", ToJsonFilter},
      {"string", [](const Value& v, const CallArgs&) { return Value(Json(ToStr(v))); }},
      {"int", Int},
      {"float", Float},
      {"list", List},
      {"items", [](const Value& v, const CallArgs&) { return DictView(v, 0); }},
      {"keys", [](const Value& v, const CallArgs&) { return DictView(v, 1); }},
      {"values", [](const Value& v, const CallArgs&) { return DictView(v, 2); }},
      {"replace", Replace},
      {"selectattr",
       [](const Value& v, const CallArgs& a) { return SelectImpl(v, a, true, true); }},
      {"rejectattr",
       [](const Value& v, const CallArgs& a) { return SelectImpl(v, a, true, false); }},
      {"select", [](const Value& v, const CallArgs& a) { return SelectImpl(v, a, false, true); }},
      {"reject", [](const Value& v, const CallArgs& a) { return SelectImpl(v, a, false, false); }},
      {"map", Map},
      {"unique", Unique},
      {"sort", Sort},
      {"round", Round},
      {"abs", Abs},
      {"indent", Indent},
      {"safe", [](const Value& v, const CallArgs&) { return v; }},
      {"sum", Sum},
      {"min", [](const Value& v, const CallArgs& a) { return MinMax(v, a, false); }},
      {"max", [](const Value& v, const CallArgs& a) { return MinMax(v, a, true); }},
      {"reverse", Reverse},
      {"dictsort", DictSort},
  };
  return *filters;
}

// Python's a % b for numbers (the sign of b), as a double for the tests.
double PyMod(const Value& a, const Value& b) {
  const auto num = [](const Value& v) {
    if (!v.is_data() || !(v.data().is_number() || v.data().is_boolean())) {
      throw Error("unsupported operand type(s) for %: '" + TypeName(v) + "'");
    }
    return v.data().is_boolean() ? (v.data().get<bool>() ? 1.0 : 0.0) : v.data().get<double>();
  };
  const double x = num(a), y = num(b);
  if (y == 0) throw Error("integer division or modulo by zero");
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}

bool IsNumber(const Value& v) {
  return v.is_data() && (v.data().is_number() || v.data().is_boolean());
}

const Value& Arg0(const CallArgs& a, const char* test) {
  if (a.positional.empty()) throw Error(std::string("test '") + test + "' needs an argument");
  return a.positional[0];
}

const std::unordered_map<std::string, TestFn>& Tests() {
  static const auto* tests = new std::unordered_map<std::string, TestFn>{
      {"defined", [](const Value& v, const CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const CallArgs&) { return v.is_undefined(); }},
      {"none", [](const Value& v, const CallArgs&) { return v.is_none(); }},
      {"string", [](const Value& v, const CallArgs&) { return v.is_string(); }},
      {"mapping", [](const Value& v, const CallArgs&) { return v.is_dict(); }},
      // Undefined is iterable (and a sequence) in jinja2: it has __iter__ and __len__.
      {"iterable",
       [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"sequence",
       [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"number", [](const Value& v, const CallArgs&) { return IsNumber(v); }},
      {"integer",
       [](const Value& v, const CallArgs&) { return v.is_data() && v.data().is_number_integer(); }},
      {"float",
       [](const Value& v, const CallArgs&) { return v.is_data() && v.data().is_number_float(); }},
      {"boolean",
       [](const Value& v, const CallArgs&) { return v.is_data() && v.data().is_boolean(); }},
      {"true",
       [](const Value& v, const CallArgs&) {
         return v.is_data() && v.data().is_boolean() && v.data().get<bool>();
       }},
      {"false",
       [](const Value& v, const CallArgs&) {
         return v.is_data() && v.data().is_boolean() && !v.data().get<bool>();
       }},
      {"callable",
       [](const Value& v, const CallArgs&) { return v.kind == Value::Kind::kCallable; }},
      {"odd", [](const Value& v, const CallArgs&) { return PyMod(v, Value(Json(2))) == 1; }},
      {"even", [](const Value& v, const CallArgs&) { return PyMod(v, Value(Json(2))) == 0; }},
      {"divisibleby",
       [](const Value& v, const CallArgs& a) { return PyMod(v, Arg0(a, "divisibleby")) == 0; }},
      {"eq", [](const Value& v, const CallArgs& a) { return Equal(v, Arg0(a, "eq")); }},
      {"equalto", [](const Value& v, const CallArgs& a) { return Equal(v, Arg0(a, "equalto")); }},
      {"sameas", [](const Value& v, const CallArgs& a) { return Equal(v, Arg0(a, "sameas")); }},
      {"ne", [](const Value& v, const CallArgs& a) { return !Equal(v, Arg0(a, "ne")); }},
      {"lt", [](const Value& v, const CallArgs& a) { return Compare(v, Arg0(a, "lt")) < 0; }},
      {"le", [](const Value& v, const CallArgs& a) { return Compare(v, Arg0(a, "le")) <= 0; }},
      {"gt", [](const Value& v, const CallArgs& a) { return Compare(v, Arg0(a, "gt")) > 0; }},
      {"ge", [](const Value& v, const CallArgs& a) { return Compare(v, Arg0(a, "ge")) >= 0; }},
      {"in",
       [](const Value& v, const CallArgs& a) {
         for (const Value& x : Iterate(Arg0(a, "in"))) {
           if (Equal(x, v)) return true;
         }
         if (Arg0(a, "in").is_string() && v.is_string()) {
           return Arg0(a, "in").str().find(v.str()) != std::string::npos;
         }
         return false;
       }},
      // str(value).islower() / .isupper()
      {"lower",
       [](const Value& v, const CallArgs& a) {
         return Truthy(*CallMethod(Value(Json(ToStr(v))), "islower", a));
       }},
      {"upper",
       [](const Value& v, const CallArgs& a) {
         return Truthy(*CallMethod(Value(Json(ToStr(v))), "isupper", a));
       }},
  };
  return *tests;
}

}  // namespace

bool IsFilter(const std::string& name) { return Filters().count(name) > 0; }
bool IsTest(const std::string& name) { return Tests().count(name) > 0; }

Value ApplyFilter(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = Filters().find(name);
  if (it == Filters().end()) throw Error("no filter named '" + name + "'");
  return it->second(input, args);
}

bool ApplyTest(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = Tests().find(name);
  if (it == Tests().end()) throw Error("no test named '" + name + "'");
  return it->second(input, args);
}

}  // namespace kvserve::chat::jinja
