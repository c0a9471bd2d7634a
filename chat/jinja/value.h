// Values of the Jinja engine: JSON data (Python's str / int / float / bool /
// None / list / dict, key order kept), plus what JSON cannot hold: undefined,
// namespace() objects (mutable, shared by reference as in Python) and
// callables (macros and globals).
#ifndef KVSERVE_CHAT_JINJA_VALUE_H_
#define KVSERVE_CHAT_JINJA_VALUE_H_

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvserve::chat::jinja {

using Json = nlohmann::ordered_json;

// A template error; line 0 when no template line is known yet (the evaluator
// fills it in with the line of the node being evaluated).
class Error : public std::runtime_error {
 public:
  Error(std::string message, int line = 0)
      : std::runtime_error(message), message_(std::move(message)), line_(line) {}
  const std::string& message() const { return message_; }
  int line() const { return line_; }

 private:
  std::string message_;
  int line_;
};

// raise_exception(msg) from the template: reported as the message alone.
class RaisedError : public Error {
 public:
  using Error::Error;
};

struct Value;
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, or nullptr.
  const Value* Keyword(const std::string& name) const;
  // Positional argument i, else keyword `name`, else nullptr.
  const Value* Get(size_t i, const std::string& name) const;
};
using Function = std::function<Value(const CallArgs&)>;

struct Value {
  enum class Kind { kUndefined, kData, kNamespace, kCallable };
  Kind kind = Kind::kUndefined;
  // kData: *ptr, kept alive by owner. Element access (a message of
  // messages, a key of a dict) makes a view sharing the owner instead of a
  // copy, so templates that index messages in loops stay linear. Data is
  // never modified once in a Value.
  std::shared_ptr<const Json> owner;
  const Json* ptr = nullptr;
  std::shared_ptr<Json> ns;            // kNamespace: an object, shared by copies
  std::shared_ptr<const Function> fn;  // kCallable
  std::string hint;                    // kUndefined: what was missing, for errors

  Value() = default;
  Value(Json j)  // NOLINT: implicit by design
      : kind(Kind::kData), owner(std::make_shared<const Json>(std::move(j))), ptr(owner.get()) {}
  // `elem` lies inside `parent`'s data (or parent is not data: then a copy).
  static Value Element(const Value& parent, const Json& elem) {
    if (!parent.owner) return Value(elem);
    Value v;
    v.kind = Kind::kData;
    v.owner = parent.owner;
    v.ptr = &elem;
    return v;
  }
  static Value Undefined(std::string hint = "") {
    Value v;
    v.hint = std::move(hint);
    return v;
  }
  static Value Callable(Function f) {
    Value v;
    v.kind = Kind::kCallable;
    v.fn = std::make_shared<const Function>(std::move(f));
    return v;
  }
  static Value Namespace(Json attrs) {
    Value v;
    v.kind = Kind::kNamespace;
    v.ns = std::make_shared<Json>(std::move(attrs));
    return v;
  }

  const Json& data() const { return *ptr; }
  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_data() const { return kind == Kind::kData; }
  bool is_string() const { return is_data() && ptr->is_string(); }
  bool is_number() const { return is_data() && ptr->is_number(); }
  bool is_none() const { return is_data() && ptr->is_null(); }
  bool is_list() const { return is_data() && ptr->is_array(); }
  bool is_dict() const { return is_data() && ptr->is_object(); }
  const std::string& str() const { return ptr->get_ref<const std::string&>(); }
};

// Python semantics over Values.
bool Truthy(const Value& v);
bool Equal(const Value& a, const Value& b);
// <0, 0, >0 like Python's ordering of numbers, strings and lists; throws
// Error for anything else (Python's TypeError).
int Compare(const Value& a, const Value& b);
// str(v) (undefined renders empty) and repr(v).
std::string ToStr(const Value& v);
std::string Repr(const Json& j);
// What a Value is, in Python's words ("str", "dict", ...), for errors.
std::string TypeName(const Value& v);
// A Value stored inside a list or dict: undefined becomes None, a namespace
// its attributes (JSON cannot hold either).
Json ToJson(const Value& v);
// Elements of an iterable as Python iterates it: list items, dict keys,
// string characters; undefined is empty. Throws Error otherwise.
std::vector<Value> Iterate(const Value& v);

// Python's json.dumps(x, ensure_ascii=False, indent, separators, sort_keys).
// indent < 0 means None.
std::string PyJsonDumps(const Json& j, int indent, const std::string& item_sep,
                        const std::string& key_sep, bool sort_keys);

// UTF-8 <-> code points (Python strings index code points). Invalid bytes
// decode to U+FFFD.
std::u32string DecodeUtf8(const std::string& s);
// len() of a Python string: the number of code points.
size_t CountCodePoints(const std::string& s);
// The code point starting at byte i of s; *len receives its byte length.
char32_t DecodeUtf8At(const std::string& s, size_t i, size_t* len);
std::string EncodeUtf8(const std::u32string& s);
std::string EncodeUtf8(char32_t c);
void AppendUtf8(char32_t c, std::string* out);

}  // namespace kvserve::chat::jinja

#endif  // KVSERVE_CHAT_JINJA_VALUE_H_
