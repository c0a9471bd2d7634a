// Finds and dlopens one of kvserve's own modules (shared libraries loaded at
// run time rather than linked): the SentencePiece tokenizer module and the
// CUDA backend. Looks, in order, at the path in environment variable
// `env_var`, the path the build put it at, the executable's directory, and
// the library search path. Returns the handle of the first that loads and
// exports `symbol` (its address in *symbol_address), or nullptr with every
// attempt described in *error.
#pragma once

#include <string>

namespace kvserve::engine {

// deepbind: RTLD_DEEPBIND (the module's own symbols first; skipped under the
// sanitizers, whose interceptors do not support it).
void* LoadModule(const char* module_name, const char* env_var, const char* build_path,
                 const char* symbol, bool deepbind, void** symbol_address, std::string* error);

}  // namespace kvserve::engine
