// The structured-output fields of the OpenAI / vLLM request body
// (server/http/openai_constraint.h) and the gRPC constraint oneof
// (server/request_convert.h): each maps to the same engine Constraint, and
// what xgrammar refuses or kvserve does not implement is a 400 naming the
// field.
#include "server/http/openai_constraint.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/http/openai_protocol.h"
#include "server/request_convert.h"

namespace kvserve::server {
namespace {

using engine::grammar::Constraint;
using engine::grammar::ConstraintKind;
using http::Json;

absl::StatusOr<std::optional<Constraint>> Parse(const std::string& body) {
  return http::ParseConstraint(Json::parse(body));
}

// The error's parameter as the HTTP error JSON names it, or "<ok>".
std::string Param(const std::string& body) {
  absl::StatusOr<std::optional<Constraint>> r = Parse(body);
  if (r.ok()) return "<ok>";
  const http::ApiError e = http::ToApiError(r.status(), "prompt");
  EXPECT_EQ(e.http_status, 400) << r.status();
  return e.param;
}

Constraint Get(const std::string& body) {
  absl::StatusOr<std::optional<Constraint>> r = Parse(body);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r.ok() && r->has_value()) << body;
  return r.ok() && r->has_value() ? **r : Constraint{};
}

constexpr char kSchema[] = R"({"type": "object", "properties": {"a": {"type": "integer"}}})";

TEST(OpenAiConstraintTest, NoConstraint) {
  EXPECT_FALSE(Parse(R"({"prompt": "x"})")->has_value());
  EXPECT_FALSE(Parse(R"({"response_format": {"type": "text"}})")->has_value());
  EXPECT_FALSE(Parse(R"({"response_format": null, "guided_json": null})")->has_value());
}

TEST(OpenAiConstraintTest, ResponseFormat) {
  EXPECT_EQ(Get(R"({"response_format": {"type": "json_object"}})").kind,
            ConstraintKind::kJsonObject);
  const Constraint c = Get(absl::StrCat(
      R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true,
          "schema": )",
      kSchema, "}}}"));
  EXPECT_EQ(c.kind, ConstraintKind::kJsonSchema);
  EXPECT_EQ(Json::parse(c.text), Json::parse(kSchema));
  EXPECT_TRUE(c.strict);
  const Constraint loose = Get(absl::StrCat(
      R"({"response_format": {"type": "json_schema", "json_schema": {"strict": false,
          "schema": )",
      kSchema, "}}}"));
  EXPECT_FALSE(loose.strict);
}

TEST(OpenAiConstraintTest, StructuredOutputsAndGuidedNamesGiveTheSameConstraints) {
  const std::string schema_text = Json(std::string(kSchema)).dump();  // as a JSON string
  for (const std::string& body :
       {absl::StrCat(R"({"structured_outputs": {"json": )", kSchema, "}}"),
        absl::StrCat(R"({"structured_outputs": {"json": )", schema_text, "}}"),
        absl::StrCat(R"({"guided_json": )", kSchema, "}"),
        absl::StrCat(R"({"guided_json": )", schema_text,
                     R"(, "guided_decoding_backend": "xgrammar"})")}) {
    const Constraint c = Get(body);
    EXPECT_EQ(c.kind, ConstraintKind::kJsonSchema) << body;
    EXPECT_EQ(Json::parse(c.text), Json::parse(kSchema)) << body;
  }
  for (const char* body :
       {R"({"structured_outputs": {"regex": "[a-z]+"}})", R"({"guided_regex": "[a-z]+"})"}) {
    const Constraint c = Get(body);
    EXPECT_EQ(c.kind, ConstraintKind::kRegex);
    EXPECT_EQ(c.text, "[a-z]+");
  }
  for (const char* body : {R"({"structured_outputs": {"choice": ["a", "b c"]}})",
                           R"({"guided_choice": ["a", "b c"]})"}) {
    const Constraint c = Get(body);
    EXPECT_EQ(c.kind, ConstraintKind::kChoice);
    EXPECT_EQ(c.choices, (std::vector<std::string>{"a", "b c"}));
  }
  for (const char* body : {R"({"structured_outputs": {"grammar": "root ::= \"x\" | \"y\""}})",
                           R"({"guided_grammar": "root ::= \"x\" | \"y\""})"}) {
    const Constraint c = Get(body);
    EXPECT_EQ(c.kind, ConstraintKind::kGrammar);
    EXPECT_EQ(c.text, "root ::= \"x\" | \"y\"");
  }
  EXPECT_EQ(Get(R"({"structured_outputs": {"json_object": true}})").kind,
            ConstraintKind::kJsonObject);
  EXPECT_FALSE(Get(absl::StrCat(R"({"structured_outputs": {"disable_additional_properties": false,
                                                  "disable_any_whitespace": true, "json": )",
                                kSchema, "}}"))
                   .strict);
}

TEST(OpenAiConstraintTest, ErrorsNameTheField) {
  // What xgrammar refuses.
  EXPECT_EQ(Param(R"({"guided_regex": "(unclosed"})"), "guided_regex");
  EXPECT_EQ(Param(R"({"structured_outputs": {"grammar": "root ::= nowhere"}})"),
            "structured_outputs.grammar");
  EXPECT_EQ(Param(R"({"response_format": {"type": "json_schema",
                      "json_schema": {"schema": "{broken"}}})"),
            "response_format.json_schema.schema");
  EXPECT_EQ(
      Param(R"({"guided_json": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}})"),
      "guided_json");
  // Malformed fields.
  EXPECT_EQ(Param(R"({"response_format": {"type": "json_schema"}})"),
            "response_format.json_schema");
  EXPECT_EQ(Param(R"({"response_format": "json"})"), "response_format");
  EXPECT_EQ(Param(R"({"response_format": {"type": "xml"}})"), "response_format.type");
  EXPECT_EQ(Param(R"({"guided_choice": []})"), "guided_choice");
  EXPECT_EQ(Param(R"({"guided_choice": ["a", ""]})"), "guided_choice[1]");
  EXPECT_EQ(Param(R"({"guided_choice": ["a", 3]})"), "guided_choice[1]");
  EXPECT_EQ(Param(R"({"guided_regex": 5})"), "guided_regex");
  EXPECT_EQ(Param(R"({"guided_regex": ""})"), "guided_regex");
  EXPECT_EQ(Param(R"({"structured_outputs": {}})"), "structured_outputs");
  EXPECT_EQ(Param(R"({"structured_outputs": {"regex": "a", "choice": ["a"]}})"),
            "structured_outputs");
  EXPECT_EQ(Param(R"({"structured_outputs": {"regex": "a", "disable_any_whitespace": false}})"),
            "structured_outputs.disable_any_whitespace");
  EXPECT_EQ(Param(R"({"guided_regex": "a", "guided_choice": ["a"]})"), "guided_json");
  EXPECT_EQ(Param(R"({"guided_regex": "a", "guided_decoding_backend": "outlines"})"),
            "guided_decoding_backend");
  // One constraint per request.
  EXPECT_EQ(Param(R"({"response_format": {"type": "json_object"}, "guided_regex": "a"})"),
            "guided_regex");
  EXPECT_EQ(Param(R"({"response_format": {"type": "json_object"},
                      "structured_outputs": {"regex": "a"}})"),
            "structured_outputs");
  // Limits.
  EXPECT_EQ(Param(absl::StrCat(R"({"guided_regex": ")", std::string(kMaxConstraintBytes + 1, 'a'),
                               "\"}")),
            "guided_regex");
  std::string many = R"({"guided_choice": [)";
  for (int i = 0; i <= kMaxConstraintChoices; ++i) absl::StrAppend(&many, i ? "," : "", "\"c\"");
  EXPECT_EQ(Param(many + "]}"), "guided_choice");
}

v1::GenerateRequest Grpc() {
  v1::GenerateRequest r;
  r.set_text("hi");
  return r;
}

TEST(GrpcConstraintTest, TheOneofMapsToTheSameConstraints) {
  std::unique_ptr<engine::Tokenizer> tok = engine::MakeByteTokenizer();
  v1::GenerateRequest r = Grpc();
  absl::StatusOr<scheduler::RequestParams> p = ToRequestParams(r, tok.get(), 258);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->constraint.has_value());

  r.mutable_json_schema()->set_schema(kSchema);
  p = ToRequestParams(r, tok.get(), 258);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->constraint.has_value());
  EXPECT_EQ(
      p->constraint->CacheKey(),
      Get(absl::StrCat(R"({"guided_json": )", Json(std::string(kSchema)).dump(), "}")).CacheKey());

  r.set_regex("[0-9]+");
  p = ToRequestParams(r, tok.get(), 258);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->constraint->CacheKey(), Get(R"({"guided_regex": "[0-9]+"})").CacheKey());

  r.mutable_choice()->add_choices("x");
  r.mutable_choice()->add_choices("y");
  p = ToRequestParams(r, tok.get(), 258);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->constraint->CacheKey(),
            Get(R"({"structured_outputs": {"choice": ["x", "y"]}})").CacheKey());

  r.set_grammar("root ::= \"a\"");
  p = ToRequestParams(r, tok.get(), 258);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->constraint->kind, ConstraintKind::kGrammar);

  r.set_json_object(true);
  p = ToRequestParams(r, tok.get(), 258);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->constraint->CacheKey(),
            Get(R"({"response_format": {"type": "json_object"}})").CacheKey());
}

TEST(GrpcConstraintTest, ErrorsNameTheProtoField) {
  std::unique_ptr<engine::Tokenizer> tok = engine::MakeByteTokenizer();
  const auto error = [&](const v1::GenerateRequest& r) {
    absl::StatusOr<scheduler::RequestParams> p = ToRequestParams(r, tok.get(), 258);
    EXPECT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(p.status().message());
  };
  v1::GenerateRequest r = Grpc();
  r.set_json_object(false);
  EXPECT_EQ(error(r).rfind("json_object:", 0), 0u) << error(r);
  r.mutable_json_schema();
  EXPECT_EQ(error(r).rfind("json_schema.schema:", 0), 0u) << error(r);
  r.mutable_json_schema()->set_schema("{");
  EXPECT_EQ(error(r).rfind("json_schema.schema:", 0), 0u) << error(r);
  r.set_regex("(");
  EXPECT_EQ(error(r).rfind("regex:", 0), 0u) << error(r);
  r.mutable_choice();
  EXPECT_EQ(error(r).rfind("choice.choices:", 0), 0u) << error(r);
  r.set_grammar("not ebnf");
  EXPECT_EQ(error(r).rfind("grammar:", 0), 0u) << error(r);
  r.set_regex("\xff");
  EXPECT_EQ(error(r).rfind("regex:", 0), 0u) << error(r);
}

}  // namespace
}  // namespace kvserve::server
