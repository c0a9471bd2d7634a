#include "chat/jinja/globals.h"

#include <ctime>

#include "chat/jinja/filters.h"

namespace kvserve::chat::jinja {
namespace {

// Python's range(): a list (templates only iterate it or take its length).
Value Range(const CallArgs& args) {
  if (!args.keyword.empty()) throw Error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) throw Error("range expected 1 to 3 arguments");
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = ToInt(p[0], "range() argument");
  } else {
    start = ToInt(p[0], "range() argument");
    stop = ToInt(p[1], "range() argument");
    if (p.size() == 3) step = ToInt(p[2], "range() argument");
  }
  if (step == 0) throw Error("range() arg 3 must not be zero");
  constexpr int64_t kMaxItems = 100000;  // jinja2's sandbox MAX_RANGE
  Json out = Json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxItems)
      throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.push_back(i);
  }
  return Value(std::move(out));
}

Json KeywordObject(const CallArgs& args, const char* fn) {
  Json obj = Json::object();
  for (const Value& v : args.positional) {
    if (!v.is_dict()) throw Error(std::string(fn) + "() positional argument must be a dict");
    for (auto it = v.data().begin(); it != v.data().end(); ++it) obj[it.key()] = it.value();
  }
  for (const auto& [k, v] : args.keyword) obj[k] = ToJson(v);
  return obj;
}

Value RaiseException(const CallArgs& args) {
  const Value* msg = args.Get(0, "message");
  throw RaisedError(msg != nullptr ? ToStr(*msg) : "");
}

// transformers: datetime.now().strftime(format), the local time.
Value StrftimeNow(const CallArgs& args) {
  const Value* fmt = args.Get(0, "format");
  if (fmt == nullptr || !fmt->is_string()) throw Error("strftime_now() needs a format string");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof(buf), fmt->str().c_str(), &tm);
  return Value(Json(std::string(buf, n)));
}

}  // namespace

const std::vector<std::pair<std::string, Value>>& Globals() {
  static const auto* globals = new std::vector<std::pair<std::string, Value>>{
      {"range", Value::Callable(Range)},
      {"namespace", Value::Callable([](const CallArgs& a) {
         return Value::Namespace(KeywordObject(a, "namespace"));
       })},
      {"dict", Value::Callable([](const CallArgs& a) { return Value(KeywordObject(a, "dict")); })},
      {"raise_exception", Value::Callable(RaiseException)},
      {"strftime_now", Value::Callable(StrftimeNow)},
  };
  return *globals;
}

}  // namespace kvserve::chat::jinja
