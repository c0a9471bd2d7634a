// SpModel::Load: finds and dlopens libkvserve_sentencepiece.so once per
// process (see sp_model.h for why it is a separate module).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "engine/tokenizer/sp_model.h"

#ifndef KVSERVE_SENTENCEPIECE_MODULE_PATH
#define KVSERVE_SENTENCEPIECE_MODULE_PATH ""
#endif

namespace kvserve::engine {
namespace {

constexpr const char* kModuleName = "libkvserve_sentencepiece.so";

std::string ExecutableDir() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return "";
  std::string path(buffer, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

int DlopenFlags() {
  int flags = RTLD_NOW | RTLD_LOCAL;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  flags |= RTLD_DEEPBIND;  // the sanitizers' interceptors do not support it
#endif
  return flags;
}

struct Module {
  SpModelFactory factory = nullptr;
  std::string error;
};

const Module& LoadModule() {
  static const Module module = [] {
    Module m;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("KVSERVE_SENTENCEPIECE_MODULE"); env && *env) {
      candidates.push_back(env);
    }
    if (*KVSERVE_SENTENCEPIECE_MODULE_PATH) candidates.push_back(KVSERVE_SENTENCEPIECE_MODULE_PATH);
    candidates.push_back(ExecutableDir() + "/" + kModuleName);
    candidates.push_back(kModuleName);  // the library search path
    std::string tried;
    for (const std::string& path : candidates) {
      void* handle = dlopen(path.c_str(), DlopenFlags());
      if (handle == nullptr) {
        tried += "\n  " + path + ": " + dlerror();
        continue;
      }
      m.factory = reinterpret_cast<SpModelFactory>(dlsym(handle, kSpModelFactorySymbol));
      if (m.factory != nullptr) return m;
      tried += "\n  " + path + ": no symbol " + kSpModelFactorySymbol;
    }
    m.error = "cannot load the SentencePiece module " + std::string(kModuleName) + ":" + tried;
    return m;
  }();
  return module;
}

}  // namespace

std::unique_ptr<SpModel> SpModel::Load(const std::string& path, std::string* error) {
  const Module& module = LoadModule();
  if (module.factory == nullptr) {
    *error = module.error;
    return nullptr;
  }
  return std::unique_ptr<SpModel>(module.factory(path.c_str(), error));
}

}  // namespace kvserve::engine
