// Shared helpers of the Jinja engine's unit tests.
#ifndef KVSERVE_TESTS_UNIT_CHAT_JINJA_TEST_UTIL_H_
#define KVSERVE_TESTS_UNIT_CHAT_JINJA_TEST_UTIL_H_

#include <string>

#include "chat/jinja/template.h"

namespace kvserve::chat::jinja {

// Renders `source` with the context given as JSON text; an error renders as
// "ERROR line N: message" (or "RAISED: message" for raise_exception).
inline std::string R(const std::string& source, const std::string& context = "{}") {
  try {
    return Template(source).Render(Json::parse(context));
  } catch (const RaisedError& e) {
    return "RAISED: " + e.message();
  } catch (const Error& e) {
    return "ERROR line " + std::to_string(e.line()) + ": " + e.message();
  }
}

}  // namespace kvserve::chat::jinja

#endif  // KVSERVE_TESTS_UNIT_CHAT_JINJA_TEST_UTIL_H_
