// Python methods of str and dict that chat templates call, and the string
// helpers they share with the filters. Case mapping is per code point
// (utf8proc), which matches Python except for special casings such as ß -> SS.
#include <utf8proc.h>

#include "chat/jinja/filters.h"

namespace kvserve::chat::jinja {
namespace {

bool IsPySpace(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85) return true;
  if (c < 0x80) return false;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool IsCased(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

char32_t Lower(char32_t c) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t Upper(char32_t c) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t Title(char32_t c) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

const std::string& StrArg(const CallArgs& args, size_t i, const char* name, const char* method) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || !v->is_string()) {
    throw Error(std::string(method) + "() argument '" + name + "' must be a string");
  }
  return v->str();
}

std::optional<std::string> OptStrArg(const CallArgs& args, size_t i, const char* name) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || v->is_none()) return std::nullopt;
  if (!v->is_string()) throw Error(std::string("argument '") + name + "' must be a string or None");
  return v->str();
}

// Python's str.split(sep=None, maxsplit=-1).
Json Split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  Json out = Json::array();
  if (sep) {
    if (sep->empty()) throw Error("empty separator");
    size_t start = 0;
    while (maxsplit != 0) {
      const size_t at = s.find(*sep, start);
      if (at == std::string::npos) break;
      out.push_back(s.substr(start, at - start));
      start = at + sep->size();
      --maxsplit;
    }
    out.push_back(s.substr(start));
    return out;
  }
  const std::u32string u = DecodeUtf8(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && IsPySpace(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit == 0) {
      size_t end = u.size();
      while (end > i && IsPySpace(u[end - 1])) --end;
      out.push_back(EncodeUtf8(u.substr(i, end - i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !IsPySpace(u[j])) ++j;
    out.push_back(EncodeUtf8(u.substr(i, j - i)));
    i = j;
    --maxsplit;
  }
  return out;
}

std::string Replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts repl between every character
    const std::u32string u = DecodeUtf8(s);
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += repl;
      if (i < u.size()) out += EncodeUtf8(u[i]);
    }
    return out;
  }
  size_t start = 0;
  while (count != 0) {
    const size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    out += s.substr(start, at - start) + repl;
    start = at + old.size();
    --count;
  }
  return out + s.substr(start);
}

bool AffixMatch(const Value& affix, const std::string& s, bool prefix, const char* method) {
  const auto one = [&](const Json& a) {
    if (!a.is_string()) throw Error(std::string(method) + " arg must be str or a tuple of str");
    const std::string& x = a.get_ref<const std::string&>();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    for (const Json& a : affix.data()) {
      if (one(a)) return true;
    }
    return false;
  }
  if (!affix.is_data()) throw Error(std::string(method) + " arg must be str or a tuple of str");
  return one(affix.data());
}

// Python's str.format with {} / {0} / {name} fields (no format specs).
std::string Format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw Error("Single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      throw Error("str.format() field '" + field + "' is not supported");
    }
    const Value* v;
    if (field.empty()) {
      v = auto_index < args.positional.size() ? &args.positional[auto_index++] : nullptr;
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      const size_t k = std::stoul(field);
      v = k < args.positional.size() ? &args.positional[k] : nullptr;
    } else {
      v = args.Keyword(field);
    }
    if (v == nullptr) throw Error("str.format() has no argument for '{" + field + "}'");
    out += ToStr(*v);
    i = close;
  }
  return out;
}

std::string PyTitle(const std::string& s) {
  std::u32string u = DecodeUtf8(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    c = prev_cased ? Lower(c) : Title(c);
    prev_cased = IsCased(c);
  }
  return EncodeUtf8(u);
}

std::optional<Value> StrMethod(const std::string& s, const std::string& name,
                               const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value(Json(Strip(s, OptStrArg(args, 0, "chars"), name != "rstrip", name != "lstrip")));
  }
  if (name == "split") {
    const Value* max = args.Get(1, "maxsplit");
    return Value(Split(s, OptStrArg(args, 0, "sep"), max ? ToInt(*max, "maxsplit") : -1));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* affix = args.Get(0, "prefix");
    if (affix == nullptr) throw Error(name + "() takes at least 1 argument");
    return Value(Json(AffixMatch(*affix, s, name == "startswith", name.c_str())));
  }
  if (name == "upper") return Value(Json(ToUpper(s)));
  if (name == "lower") return Value(Json(ToLower(s)));
  if (name == "title") return Value(Json(PyTitle(s)));
  if (name == "capitalize") {
    std::u32string u = DecodeUtf8(s);
    for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? Title(u[i]) : Lower(u[i]);
    return Value(Json(EncodeUtf8(u)));
  }
  if (name == "replace") {
    const Value* count = args.Get(2, "count");
    return Value(
        Json(Replace(s, StrArg(args, 0, "old", "replace"), StrArg(args, 1, "new", "replace"),
                     count ? ToInt(*count, "count") : -1)));
  }
  if (name == "find") {
    const size_t at = s.find(StrArg(args, 0, "sub", "find"));
    if (at == std::string::npos) return Value(Json(-1));
    return Value(Json(static_cast<int64_t>(DecodeUtf8(s.substr(0, at)).size())));
  }
  if (name == "count") {
    const std::string& sub = StrArg(args, 0, "sub", "count");
    if (sub.empty()) return Value(Json(static_cast<int64_t>(DecodeUtf8(s).size() + 1)));
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(Json(n));
  }
  if (name == "join") {
    const Value* items = args.Get(0, "iterable");
    if (items == nullptr) throw Error("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& v : Iterate(*items)) {
      if (!v.is_string())
        throw Error("sequence item: expected str instance, " + TypeName(v) + " found");
      if (!first) out += s;
      first = false;
      out += v.str();
    }
    return Value(Json(out));
  }
  if (name == "format") return Value(Json(Format(s, args)));
  if (name == "splitlines") {
    Json out = Json::array();
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        out.push_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) out.push_back(s.substr(start));
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isupper" ||
      name == "islower") {
    const std::u32string u = DecodeUtf8(s);
    if (u.empty()) return Value(Json(false));
    bool any_cased = false;
    for (const char32_t c : u) {
      const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      if (name == "isdigit" && cat != UTF8PROC_CATEGORY_ND) return Value(Json(false));
      if (name == "isspace" && !IsPySpace(c)) return Value(Json(false));
      if (name == "isalpha" && !(cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO)) {
        return Value(Json(false));
      }
      if (name == "isupper" && IsCased(c) && Upper(c) != c) return Value(Json(false));
      if (name == "islower" && IsCased(c) && Lower(c) != c) return Value(Json(false));
      any_cased = any_cased || IsCased(c);
    }
    return Value(Json(name == "isupper" || name == "islower" ? any_cased : true));
  }
  return std::nullopt;
}

std::optional<Value> DictMethod(const Value& dict, const std::string& name, const CallArgs& args) {
  const Json& d = dict.data();
  if (name == "get") {
    const Value* key = args.Get(0, "key");
    if (key == nullptr) throw Error("get expected at least 1 argument");
    const Value* def = args.Get(1, "default");
    if (key->is_string()) {
      auto it = d.find(key->str());
      if (it != d.end()) return Value::Element(dict, *it);
    }
    return def != nullptr ? *def : Value(Json(nullptr));
  }
  if (name == "items" || name == "keys" || name == "values") {
    Json out = Json::array();
    for (auto it = d.begin(); it != d.end(); ++it) {
      if (name == "items") {
        out.push_back(Json::array({it.key(), it.value()}));
      } else if (name == "keys") {
        out.push_back(it.key());
      } else {
        out.push_back(it.value());
      }
    }
    return Value(std::move(out));
  }
  // loop.cycle(a, b, ...): the loop object is a dict with index0.
  if (name == "cycle" && d.contains("index0") && d.contains("revindex0")) {
    if (args.positional.empty()) throw Error("no items for cycling given");
    const int64_t i = d.at("index0").get<int64_t>();
    return args.positional[static_cast<size_t>(i % static_cast<int64_t>(args.positional.size()))];
  }
  return std::nullopt;
}

std::optional<Value> ListMethod(const Json& l, const std::string& name, const CallArgs& args) {
  if (name != "count" && name != "index") return std::nullopt;
  const Value* x = args.Get(0, "value");
  if (x == nullptr) throw Error(name + "() takes exactly one argument");
  int64_t n = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (!Equal(Value(l[i]), *x)) continue;
    if (name == "index") return Value(Json(static_cast<int64_t>(i)));
    ++n;
  }
  if (name == "index") throw Error(ToStr(*x) + " is not in list");
  return Value(Json(n));
}

}  // namespace

std::string ToLower(const std::string& s) {
  std::u32string u = DecodeUtf8(s);
  for (char32_t& c : u) c = Lower(c);
  return EncodeUtf8(u);
}

std::string ToUpper(const std::string& s) {
  std::u32string u = DecodeUtf8(s);
  for (char32_t& c : u) c = Upper(c);
  return EncodeUtf8(u);
}

std::string Strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  // Walks code points in from each end; the middle is never decoded.
  const std::u32string set = chars ? DecodeUtf8(*chars) : std::u32string();
  const auto strip = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : IsPySpace(c);
  };
  size_t begin = 0, end = s.size(), len;
  while (left && begin < end && strip(DecodeUtf8At(s, begin, &len))) begin += len;
  while (right && end > begin) {
    size_t k = end - 1;
    while (k > begin && (static_cast<unsigned char>(s[k]) & 0xc0) == 0x80) --k;
    if (!strip(DecodeUtf8At(s, k, &len)) || k + len != end) break;
    end = k;
  }
  return s.substr(begin, end - begin);
}

int64_t ToInt(const Value& v, const char* what) {
  if (v.is_data() && v.data().is_boolean()) return v.data().get<bool>() ? 1 : 0;
  if (v.is_data() && v.data().is_number_integer()) return v.data().get<int64_t>();
  throw Error(std::string(what) + " must be an integer, not " + TypeName(v));
}

std::optional<Value> CallMethod(const Value& obj, const std::string& name, const CallArgs& args) {
  if (obj.is_string()) return StrMethod(obj.str(), name, args);
  if (obj.is_dict()) return DictMethod(obj, name, args);
  if (obj.is_list()) return ListMethod(obj.data(), name, args);
  return std::nullopt;
}

}  // namespace kvserve::chat::jinja
