// A parsed Jinja template (immutable; Render may run on many threads at once).
#ifndef KVSERVE_CHAT_JINJA_TEMPLATE_H_
#define KVSERVE_CHAT_JINJA_TEMPLATE_H_

#include <memory>
#include <string>

#include "chat/jinja/ast.h"
#include "chat/jinja/value.h"

namespace kvserve::chat::jinja {

class Template {
 public:
  // Throws jinja::Error naming the line of a syntax error, unknown tag,
  // filter or test.
  explicit Template(const std::string& source);

  // Renders with `context` (an object: the template's top-level variables)
  // over the globals range(), namespace(), dict(), raise_exception() and
  // strftime_now(). Throws jinja::Error (RaisedError for raise_exception)
  // with the template line.
  std::string Render(Json context) const;

 private:
  Body body_;
  // Whether the source names loop.previtem / loop.nextitem: only then does
  // each iteration's loop object carry copies of the neighbouring items.
  bool loop_neighbors_ = false;
};

}  // namespace kvserve::chat::jinja

#endif  // KVSERVE_CHAT_JINJA_TEMPLATE_H_
