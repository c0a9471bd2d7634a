// kvserve_tokenize_driver: lets tests/oracle/test_tokenizers.py run kvserve's
// tokenizers on many inputs in one process.
//
// stdin, one JSON object:
//   {"path": "<model dir | tokenizer.json | tokenizer.model | file.gguf | \"byte\">",
//    "texts":  ["...", ...],          // to Encode, with and without specials
//    "decode": [[id, ...], ...]}      // to Decode and stream-decode
// stdout, one JSON object:
//   {"vocab_size": n, "bos": id|null, "eos": id|null,
//    "encode": [{"ids": [...], "ids_special": [...]} | {"error": "..."}, ...],
//    "decode": [{"text": s, "text_skip": s,          // Decode(ids, false / true)
//                "stream": s, "stream_skip": s,      // Push()... + Flush()
//                "stream_invalid_chunks": k}, ...]}  // chunks not valid UTF-8
// A tokenizer that fails to load prints {"error": "<status>"} and exits 2.
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "engine/gguf_model.h"
#include "engine/loader/gguf_file.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

using kvserve::engine::IncrementalDetokenizer;
using kvserve::engine::Tokenizer;
using nlohmann::json;

bool IsValidUtf8(const std::string& s) { return kvserve::engine::ToValidUtf8(s) == s; }

// A GGUF's tokenizer.ggml.* vocabulary (the file needs no tensors).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGguf(const std::string& path) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<kvserve::engine::GgufFile> file,
                           kvserve::engine::GgufFile::Open(path));
  KVSERVE_ASSIGN_OR_RETURN(kvserve::engine::GgufVocab vocab, kvserve::engine::ReadGgufVocab(*file));
  return kvserve::engine::MakeGgufTokenizer(vocab);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path) {
  if (path == "byte") return kvserve::engine::MakeByteTokenizer();
  if (path.ends_with(".gguf")) return LoadGguf(path);
  if (path.ends_with(".json")) return kvserve::engine::LoadHfTokenizerJson(path);
  if (path.ends_with(".model")) return kvserve::engine::LoadSentencePiece(path);
  return kvserve::engine::LoadTokenizer(path);
}

json ToJson(const std::optional<int32_t>& id) { return id.has_value() ? json(*id) : json(); }

void Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special,
            std::string* text, int* invalid_chunks) {
  IncrementalDetokenizer detok(tokenizer, skip_special);
  for (const int32_t id : ids) {
    const std::string chunk = detok.Push(id);
    if (!IsValidUtf8(chunk)) ++*invalid_chunks;
    *text += chunk;
  }
  const std::string tail = detok.Flush();
  if (!IsValidUtf8(tail)) ++*invalid_chunks;
  *text += tail;
}

int Run() {
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  const json request = json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.contains("path") || !request.at("path").is_string()) {
    std::cout << json{{"error", "request must be a JSON object with a \"path\""}}.dump() << "\n";
    return 2;
  }
  auto loaded = Load(request.at("path").get<std::string>());
  if (!loaded.ok()) {
    std::cout << json{{"error", loaded.status().ToString()}}.dump() << "\n";
    return 2;
  }
  const Tokenizer& tokenizer = **loaded;
  json response = {{"vocab_size", tokenizer.vocab_size()},
                   {"bos", ToJson(tokenizer.bos_token_id())},
                   {"eos", ToJson(tokenizer.eos_token_id())},
                   {"encode", json::array()},
                   {"decode", json::array()}};
  for (const json& t : request.value("texts", json::array())) {
    const std::string text = t.get<std::string>();
    auto plain = tokenizer.Encode(text, /*add_special_tokens=*/false);
    auto special = tokenizer.Encode(text, /*add_special_tokens=*/true);
    if (!plain.ok() || !special.ok()) {
      const absl::Status& s = plain.ok() ? special.status() : plain.status();
      response["encode"].push_back({{"error", s.ToString()}});
    } else {
      response["encode"].push_back({{"ids", *plain}, {"ids_special", *special}});
    }
  }
  for (const json& d : request.value("decode", json::array())) {
    const std::vector<int32_t> ids = d.get<std::vector<int32_t>>();
    json out = {{"text", tokenizer.Decode(ids, /*skip_special=*/false)},
                {"text_skip", tokenizer.Decode(ids, /*skip_special=*/true)}};
    std::string stream, stream_skip;
    int invalid = 0;
    Stream(tokenizer, ids, false, &stream, &invalid);
    Stream(tokenizer, ids, true, &stream_skip, &invalid);
    out["stream"] = stream;
    out["stream_skip"] = stream_skip;
    out["stream_invalid_chunks"] = invalid;
    response["decode"].push_back(std::move(out));
  }
  std::cout << response.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

}  // namespace

int main() {
  try {
    return Run();
  } catch (const std::exception& e) {  // malformed request
    std::cout << json{{"error", e.what()}}.dump() << "\n";
    return 2;
  }
}
