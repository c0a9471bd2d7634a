#include "engine/module/module_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace kvserve::engine {
namespace {

std::string ExecutableDir() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return "";
  std::string path(buffer, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerRuntime = true;
#elif defined(__has_feature)
constexpr bool kSanitizerRuntime =
    __has_feature(address_sanitizer) || __has_feature(thread_sanitizer);
#else
constexpr bool kSanitizerRuntime = false;
#endif

}  // namespace

void* LoadModule(const char* module_name, const char* env_var, const char* build_path,
                 const char* symbol, bool deepbind, void** symbol_address, std::string* error) {
  int flags = RTLD_NOW | RTLD_LOCAL;
  // The sanitizer runtimes cannot intercept calls from a library loaded with
  // RTLD_DEEPBIND (gcc says so with __SANITIZE_*__, clang with __has_feature).
  if (deepbind && !kSanitizerRuntime) flags |= RTLD_DEEPBIND;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv(env_var); env && *env) candidates.push_back(env);
  if (build_path != nullptr && *build_path) candidates.push_back(build_path);
  candidates.push_back(ExecutableDir() + "/" + module_name);
  candidates.push_back(module_name);  // the library search path
  std::string tried;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), flags);
    if (handle == nullptr) {
      tried += "\n  " + path + ": " + dlerror();
      continue;
    }
    *symbol_address = dlsym(handle, symbol);
    if (*symbol_address != nullptr) return handle;
    tried += "\n  " + path + ": no symbol " + symbol;
  }
  *error = "cannot load " + std::string(module_name) + ":" + tried;
  return nullptr;
}

}  // namespace kvserve::engine
