// The template globals transformers provides: range(), namespace(), dict(),
// raise_exception(msg) and strftime_now(format).
#ifndef KVSERVE_CHAT_JINJA_GLOBALS_H_
#define KVSERVE_CHAT_JINJA_GLOBALS_H_

#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace kvserve::chat::jinja {

const std::vector<std::pair<std::string, Value>>& Globals();

}  // namespace kvserve::chat::jinja

#endif  // KVSERVE_CHAT_JINJA_GLOBALS_H_
