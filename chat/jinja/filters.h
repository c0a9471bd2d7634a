// Jinja filters and tests, and the Python methods templates call on str,
// dict and list values (message.content.strip(), message.get("x"), ...).
#ifndef KVSERVE_CHAT_JINJA_FILTERS_H_
#define KVSERVE_CHAT_JINJA_FILTERS_H_

#include <optional>
#include <string>

#include "chat/jinja/value.h"

namespace kvserve::chat::jinja {

bool IsFilter(const std::string& name);
bool IsTest(const std::string& name);

// Throw jinja::Error (line 0: the caller names the line) on bad arguments.
Value ApplyFilter(const std::string& name, const Value& input, const CallArgs& args);
bool ApplyTest(const std::string& name, const Value& input, const CallArgs& args);

// obj.name(args) for a Python method of str / dict / list; nullopt when obj
// has no such method (the caller then looks the attribute up).
std::optional<Value> CallMethod(const Value& obj, const std::string& name, const CallArgs& args);

// Helpers shared by filters and methods.
int64_t ToInt(const Value& v, const char* what);
std::string ToLower(const std::string& s);
std::string ToUpper(const std::string& s);
// Python's str.strip / lstrip / rstrip; chars empty: whitespace.
std::string Strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                  bool right);

}  // namespace kvserve::chat::jinja

#endif  // KVSERVE_CHAT_JINJA_FILTERS_H_
