#include "chat/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvserve::chat::jinja {

const Value* CallArgs::Keyword(const std::string& name) const {
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

const Value* CallArgs::Get(size_t i, const std::string& name) const {
  if (i < positional.size()) return &positional[i];
  return Keyword(name);
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
    case Value::Kind::kData:
      break;
  }
  const Json& j = v.data();
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_number_unsigned()) return j.get<uint64_t>() != 0;
  if (j.is_number_float()) return j.get<double>() != 0.0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  return !j.empty();  // array, object
}

namespace {

// Client data may nest arbitrarily deep; recursion over it stops here rather
// than overflowing the stack (Python's json and repr stop near 1000 too).
constexpr int kMaxDepth = 512;

void CheckDepth(int depth) {
  if (depth > kMaxDepth) throw Error("data nested too deeply");
}

// Python treats bool as an int subclass.
bool IsNumeric(const Json& j) { return j.is_number() || j.is_boolean(); }
bool IsIntegral(const Json& j) { return j.is_number_integer() || j.is_boolean(); }
int64_t AsInt(const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<int64_t>(); }
double AsDouble(const Json& j) {
  return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>();
}

bool JsonEqual(const Json& a, const Json& b, int depth = 0) {
  CheckDepth(depth);
  if (IsNumeric(a) && IsNumeric(b)) {
    if (IsIntegral(a) && IsIntegral(b)) return AsInt(a) == AsInt(b);
    return AsDouble(a) == AsDouble(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!JsonEqual(a[i], b[i], depth + 1)) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto other = b.find(it.key());
      if (other == b.end() || !JsonEqual(it.value(), *other, depth + 1)) return false;
    }
    return true;
  }
  return a == b;
}

std::string JsonTypeName(const Json& j) {
  if (j.is_null()) return "NoneType";
  if (j.is_boolean()) return "bool";
  if (j.is_number_integer()) return "int";
  if (j.is_number_float()) return "float";
  if (j.is_string()) return "str";
  if (j.is_array()) return "list";
  return "dict";
}

int JsonCompare(const Json& a, const Json& b, int depth = 0) {
  CheckDepth(depth);
  if (IsNumeric(a) && IsNumeric(b)) {
    if (IsIntegral(a) && IsIntegral(b)) {
      const int64_t x = AsInt(a), y = AsInt(b);
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = AsDouble(a), y = AsDouble(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of valid UTF-8 is code point order, as Python compares.
    const int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!JsonEqual(a[i], b[i], depth + 1)) return JsonCompare(a[i], b[i], depth + 1);
    }
    return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
  }
  throw Error("'<' not supported between instances of '" + JsonTypeName(a) + "' and '" +
              JsonTypeName(b) + "'");
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  return Json(d).dump();  // shortest round-trip, "1.0" for integral values, like Python
}

std::string StrRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (const unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (const unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

void Dumps(const Json& j, int indent, int depth, const std::string& item_sep,
           const std::string& key_sep, bool sort_keys, std::string* out) {
  CheckDepth(depth);
  const auto newline = [&](int level) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent) * level, ' ');
  };
  if (j.is_array()) {
    if (j.empty()) {
      *out += "[]";
      return;
    }
    *out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i > 0) *out += item_sep;
      newline(depth + 1);
      Dumps(j[i], indent, depth + 1, item_sep, key_sep, sort_keys, out);
    }
    newline(depth);
    *out += ']';
  } else if (j.is_object()) {
    if (j.empty()) {
      *out += "{}";
      return;
    }
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    if (sort_keys) std::sort(keys.begin(), keys.end());
    *out += '{';
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i > 0) *out += item_sep;
      newline(depth + 1);
      JsonString(keys[i], out);
      *out += key_sep;
      Dumps(j.at(keys[i]), indent, depth + 1, item_sep, key_sep, sort_keys, out);
    }
    newline(depth);
    *out += '}';
  } else if (j.is_string()) {
    JsonString(j.get_ref<const std::string&>(), out);
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    if (std::isnan(d)) {
      *out += "NaN";
    } else if (std::isinf(d)) {
      *out += d > 0 ? "Infinity" : "-Infinity";
    } else {
      *out += FloatRepr(d);
    }
  } else {
    *out += j.dump();  // null, true, false, integers
  }
}

}  // namespace

bool Equal(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.kind == Value::Kind::kNamespace || b.kind == Value::Kind::kNamespace) {
    return a.kind == b.kind && a.ns == b.ns;
  }
  if (a.kind == Value::Kind::kCallable || b.kind == Value::Kind::kCallable) {
    return a.kind == b.kind && a.fn == b.fn;
  }
  return JsonEqual(a.data(), b.data());
}

int Compare(const Value& a, const Value& b) {
  if (!a.is_data() || !b.is_data()) {
    throw Error("'<' not supported between instances of '" + TypeName(a) + "' and '" + TypeName(b) +
                "'");
  }
  return JsonCompare(a.data(), b.data());
}

namespace {

std::string ReprAt(const Json& j, int depth) {
  CheckDepth(depth);
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_float()) return FloatRepr(j.get<double>());
  if (j.is_number()) return j.dump();
  if (j.is_string()) return StrRepr(j.get_ref<const std::string&>());
  std::string out;
  if (j.is_array()) {
    out = "[";
    for (size_t i = 0; i < j.size(); ++i) {
      if (i > 0) out += ", ";
      out += ReprAt(j[i], depth + 1);
    }
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ", ";
    first = false;
    out += StrRepr(it.key()) + ": " + ReprAt(it.value(), depth + 1);
  }
  return out + "}";
}

}  // namespace

std::string Repr(const Json& j) { return ReprAt(j, 0); }

std::string ToStr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNamespace:
      return "<Namespace " + Repr(*v.ns) + ">";
    case Value::Kind::kCallable:
      return "<function>";
    case Value::Kind::kData:
      break;
  }
  if (v.data().is_string()) return v.str();
  return Repr(v.data());
}

std::string TypeName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
    case Value::Kind::kData:
      break;
  }
  return JsonTypeName(v.data());
}

Json ToJson(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kData:
      return v.data();
    case Value::Kind::kNamespace:
      return *v.ns;
    case Value::Kind::kUndefined:
      return nullptr;
    case Value::Kind::kCallable:
      break;
  }
  throw Error("a function cannot be stored in a list or dict");
}

std::vector<Value> Iterate(const Value& v) {
  std::vector<Value> out;
  if (v.is_undefined()) return out;
  if (v.is_data()) {
    const Json& j = v.data();
    if (j.is_array()) {
      out.reserve(j.size());
      for (const Json& e : j) out.push_back(Value::Element(v, e));
      return out;
    }
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) out.emplace_back(Json(it.key()));
      return out;
    }
    if (j.is_string()) {
      for (const char32_t c : DecodeUtf8(v.str())) out.emplace_back(Json(EncodeUtf8(c)));
      return out;
    }
  }
  throw Error("'" + TypeName(v) + "' object is not iterable");
}

std::string PyJsonDumps(const Json& j, int indent, const std::string& item_sep,
                        const std::string& key_sep, bool sort_keys) {
  std::string out;
  Dumps(j, indent, 0, item_sep, key_sep, sort_keys, &out);
  return out;
}

char32_t DecodeUtf8At(const std::string& s, size_t i, size_t* len) {
  const unsigned char c = s[i];
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  *len = 1;
  if (n == 0 || i + n > s.size()) return U'\uFFFD';
  char32_t cp = n == 1 ? c : (c & (0x7f >> n));
  for (size_t k = 1; k < n; ++k) {
    const unsigned char cc = s[i + k];
    if ((cc >> 6) != 2) return U'\uFFFD';
    cp = (cp << 6) | (cc & 0x3f);
  }
  *len = n;
  return cp;
}

size_t CountCodePoints(const std::string& s) {
  size_t n = 0, len;
  for (size_t i = 0; i < s.size(); i += len) {
    DecodeUtf8At(s, i, &len);
    ++n;
  }
  return n;
}

std::u32string DecodeUtf8(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t len;
  for (size_t i = 0; i < s.size(); i += len) out += DecodeUtf8At(s, i, &len);
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    *out += static_cast<char>(c);
  } else if (c < 0x800) {
    *out += static_cast<char>(0xc0 | (c >> 6));
    *out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    *out += static_cast<char>(0xe0 | (c >> 12));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (c >> 18));
    *out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

std::string EncodeUtf8(char32_t c) {
  std::string out;
  AppendUtf8(c, &out);
  return out;
}

std::string EncodeUtf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char32_t c : s) AppendUtf8(c, &out);
  return out;
}

}  // namespace kvserve::chat::jinja
