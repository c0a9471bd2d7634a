// SpModel::Load: finds and dlopens libkvserve_sentencepiece.so once per
// process (see sp_model.h for why it is a separate module).
#include <string>

#include "engine/module/module_loader.h"
#include "engine/tokenizer/sp_model.h"

#ifndef KVSERVE_SENTENCEPIECE_MODULE_PATH
#define KVSERVE_SENTENCEPIECE_MODULE_PATH ""
#endif

namespace kvserve::engine {
namespace {

constexpr const char* kModuleName = "libkvserve_sentencepiece.so";

struct Module {
  SpModelFactory factory = nullptr;
  std::string error;
};

const Module& GetModule() {
  static const Module module = [] {
    Module m;
    void* factory = nullptr;
    if (LoadModule(kModuleName, "KVSERVE_SENTENCEPIECE_MODULE", KVSERVE_SENTENCEPIECE_MODULE_PATH,
                   kSpModelFactorySymbol, /*deepbind=*/true, &factory, &m.error) != nullptr) {
      m.factory = reinterpret_cast<SpModelFactory>(factory);
    }
    return m;
  }();
  return module;
}

}  // namespace

std::unique_ptr<SpModel> SpModel::Load(const std::string& path, std::string* error) {
  const Module& module = GetModule();
  if (module.factory == nullptr) {
    *error = module.error;
    return nullptr;
  }
  return std::unique_ptr<SpModel>(module.factory(path.c_str(), error));
}

}  // namespace kvserve::engine
