// The chat-template engine: a template source (as a checkpoint supplies it)
// rendered over a conversation (as a client sends it). Input:
//   Byte()  bit 0: add_generation_prompt, bit 1: pass a tools list
//   Piece() the template source
//   Rest()  the messages, JSON (not an array: a fixed two-turn conversation)
// Properties: a template either fails to load or renders / fails with a
// message; rendering is bounded (chat/jinja/evaluator.cc) and deterministic.
#include <cstdint>
#include <string>

#include "chat/chat_template.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::ordered_json;
  kvserve::fuzz::FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const std::string source(in.Piece());
  const std::string_view messages_text = in.Rest();

  auto compiled = kvserve::chat::ChatTemplate::FromSource(
      source, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  if (!compiled.ok()) {
    KVSERVE_FUZZ_CHECK(!compiled.status().message().empty(), "load errors explain themselves");
    return 0;
  }
  kvserve::chat::OrderedChatTemplateInputs inputs;
  inputs.messages = ordered_json::parse(messages_text, nullptr, /*allow_exceptions=*/false);
  if (!inputs.messages.is_array()) {
    inputs.messages = ordered_json::parse(
        R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  }
  inputs.add_generation_prompt = flags & 1;
  if (flags & 2) {
    inputs.tools = ordered_json::parse(
        R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])");
  }
  const auto first = compiled->Render(inputs);
  const auto second = compiled->Render(inputs);
  KVSERVE_FUZZ_CHECK(first.ok() == second.ok(), "deterministic");
  if (first.ok()) KVSERVE_FUZZ_CHECK(*first == *second, "deterministic");
  return 0;
}
