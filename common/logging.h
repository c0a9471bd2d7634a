// kvserve's logger: spdlog to stderr (stdout belongs to the programs' own
// output, e.g. generated text or JSON). One named logger per process, shared
// by every library.
#pragma once

#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace kvserve {

inline spdlog::logger& Log() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto existing = spdlog::get("kvserve");
    return existing != nullptr ? existing : spdlog::stderr_color_mt("kvserve");
  }();
  return *logger;
}

}  // namespace kvserve
