"""Streaming Generate, GetModelInfo, Tokenize and Detokenize from a Python grpcio client.

Greedy outputs are compared with `kvserve-generate --json` (the single-request
reference generator built from the same engine) with `==`: the daemon's output
must not depend on batching, chunking, prefix caching or preemption.
"""

from __future__ import annotations

import math
import time

import grpc
import pytest

import kvserve_fixtures as kf
from kvserve_fixtures import ids_request, reference_generate, stream, text_request

pb2, pb2_grpc = kf.pb()

# Prompts whose greedy continuation (builtin:tiny) might end with EOS; the first
# one that does (per kvserve-generate) is used by the EOS test.
EOS_CANDIDATES = ["bH", "bl"] + [a + b for a in "bcdexyz" for b in "HIJKLMNOPlmnop"]


def assert_matches_reference(result: kf.StreamResult, ref: dict, finish_reason) -> None:
    result.check_ok()
    final = result.final
    assert result.token_ids == ref["token_ids"], result
    assert result.text == ref["text"], result
    assert final.finish_reason == finish_reason, result
    assert final.usage.prompt_tokens == len(ref["prompt_token_ids"]), result
    assert final.usage.completion_tokens == len(ref["token_ids"]), result


def find_eos_prompt(max_tokens: int = 64) -> tuple[str, dict]:
    for prompt in EOS_CANDIDATES:
        ref = reference_generate(prompt, max_tokens)
        if ref["token_ids"] and ref["token_ids"][-1] == kf.TINY_EOS:
            return prompt, ref
    pytest.fail(f"none of {EOS_CANDIDATES} ends with EOS within {max_tokens} tokens "
                "under kvserve-generate; update EOS_CANDIDATES")


# ---------------------------------------------------------------------------


def test_model_info(kvserve_daemon, model_info):
    info = model_info
    assert info.model_name, info
    assert "tiny" in info.model_name, info
    assert info.architecture, info
    assert info.vocab_size == kf.TINY_VOCAB, info
    assert info.block_size == 16, info
    assert info.max_model_len > 16, info
    assert info.num_kv_blocks > 1, info
    assert info.backend in ("cpu", "cuda"), info
    if kf.TEST_BACKEND in ("cpu", "cuda"):
        assert info.backend == kf.TEST_BACKEND, info
    assert info.version, info
    assert info.max_num_seqs >= 1, info
    assert info.max_num_batched_tokens >= 1, info
    assert list(info.eos_token_ids) == [kf.TINY_EOS], info


@pytest.mark.parametrize(
    "prompt,max_tokens",
    [("Hello, kvserve!", 64), ("The quick brown fox", 100), ("a", 300)],
    ids=["hello-64", "fox-100", "a-300"],
)
def test_greedy_text_prompt_matches_reference(kvserve_daemon, prompt, max_tokens):
    ref = reference_generate(prompt, max_tokens, ignore_eos=True)
    assert len(ref["token_ids"]) == max_tokens
    res = stream(kvserve_daemon.stub, text_request(prompt, max_tokens, ignore_eos=True))
    assert_matches_reference(res, ref, pb2.FINISH_REASON_LENGTH)
    assert res.final.usage.prompt_tokens == len(ref["prompt_token_ids"])


def test_greedy_token_ids_prompt_matches_reference(kvserve_daemon):
    ref = reference_generate("The quick brown fox", 80, ignore_eos=True)
    ids = ref["prompt_token_ids"]
    assert ids[0] == kf.TINY_BOS
    res = stream(kvserve_daemon.stub, ids_request(ids, 80, ignore_eos=True))
    assert_matches_reference(res, ref, pb2.FINISH_REASON_LENGTH)


def test_text_prompt_without_special_tokens_equals_token_ids_prompt(kvserve_daemon):
    # add_special_tokens=false: no BOS, so the prompt is exactly the UTF-8 bytes.
    text = "no BOS here"
    a = stream(kvserve_daemon.stub,
               text_request(text, 32, ignore_eos=True, add_special_tokens=False)).check_ok()
    b = stream(kvserve_daemon.stub,
               ids_request(list(text.encode()), 32, ignore_eos=True)).check_ok()
    assert a.final.usage.prompt_tokens == len(text.encode()), a
    assert a.token_ids == b.token_ids
    assert a.text == b.text


def test_stops_at_eos(kvserve_daemon):
    prompt, ref = find_eos_prompt()
    res = stream(kvserve_daemon.stub, text_request(prompt, 64))
    assert_matches_reference(res, ref, pb2.FINISH_REASON_STOP)
    assert res.token_ids[-1] == kf.TINY_EOS  # the EOS id is returned ...
    assert res.final.HasField("stop_token"), res
    assert res.final.stop_token == kf.TINY_EOS, res
    # ... and with ignore_eos the same prompt runs to max_tokens.
    ref_full = reference_generate(prompt, 64, ignore_eos=True)
    full = stream(kvserve_daemon.stub, text_request(prompt, 64, ignore_eos=True))
    assert_matches_reference(full, ref_full, pb2.FINISH_REASON_LENGTH)
    assert len(full.token_ids) == 64


def test_min_tokens_masks_eos(kvserve_daemon):
    prompt, ref = find_eos_prompt()
    n = len(ref["token_ids"]) + 3
    res = stream(kvserve_daemon.stub,
                 text_request(prompt, n + 10, stopping=pb2.StoppingParams(min_tokens=n)))
    res.check_ok()
    assert len(res.token_ids) >= n, res
    assert kf.TINY_EOS not in res.token_ids[:n], res.token_ids
    # Before the position where EOS was masked, greedy output is unchanged.
    k = len(ref["token_ids"]) - 1
    assert res.token_ids[:k] == ref["token_ids"][:k]


def test_stop_token_ids(kvserve_daemon):
    ref = reference_generate("Hello", 40, ignore_eos=True)
    toks = ref["token_ids"]
    # The first token that differs from the first one: stop there.
    stop_at = next(i for i, t in enumerate(toks) if t != toks[0])
    stop_id = toks[stop_at]
    req = text_request("Hello", 40, ignore_eos=True)
    req.stopping.stop_token_ids.append(stop_id)
    res = stream(kvserve_daemon.stub, req).check_ok()
    assert res.token_ids == toks[: stop_at + 1], res  # the stop id is returned ...
    assert res.final.finish_reason == pb2.FINISH_REASON_STOP, res
    assert res.final.stop_token == stop_id, res
    assert res.text == bytes(toks[:stop_at]).decode("utf-8", "replace"), res  # ... its text not


def test_stop_string(kvserve_daemon):
    ref = reference_generate("Hello", 40, ignore_eos=True)
    text = ref["text"]
    assert text.isascii(), text
    # A two-character stop string at the first change of character in the output.
    pos = next(i for i in range(1, len(text)) if text[i] != text[0])
    stop = text[pos: pos + 2]
    start = text.find(stop)
    req = text_request("Hello", 40, ignore_eos=True)
    req.stopping.stop.append(stop)
    res = stream(kvserve_daemon.stub, req).check_ok()
    assert res.final.finish_reason == pb2.FINISH_REASON_STOP, res
    assert res.final.stop_string == stop, res
    assert res.text == text[:start], res
    # Generation ends with the token that completes the stop string.
    assert res.token_ids == ref["token_ids"][: start + len(stop)], res
    assert res.final.usage.completion_tokens == len(res.token_ids), res


def test_final_message_usage_timings_and_request_id(kvserve_daemon):
    ref = reference_generate("Hello, kvserve!", 20, ignore_eos=True)
    res = stream(kvserve_daemon.stub,
                 text_request("Hello, kvserve!", 20, ignore_eos=True, request_id="py-echo-1"))
    assert_matches_reference(res, ref, pb2.FINISH_REASON_LENGTH)
    final = res.final
    assert final.request_id == "py-echo-1", final
    assert final.usage.cached_prompt_tokens <= final.usage.prompt_tokens
    t = final.timings
    assert 0 <= t.queue_s <= t.time_to_first_token_s <= t.e2e_s, t
    # Non-final messages carry no finish data.
    for r in res.responses[:-1]:
        assert not r.finished and r.finish_reason == pb2.FINISH_REASON_UNSPECIFIED, r
    # Without a request_id the server assigns one.
    res2 = stream(kvserve_daemon.stub, text_request("Hello", 3)).check_ok()
    assert res2.final.request_id, res2
    assert res2.final.request_id != "py-echo-1"
    # One log line per finished request, with the id.
    deadline = time.monotonic() + 5
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = [ln for ln in kvserve_daemon.stderr_text().splitlines() if "request id=" in ln]
        if any("py-echo-1" in ln for ln in lines):
            break
        time.sleep(0.05)
    assert any("py-echo-1" in ln for ln in lines), lines[-10:]


def test_logprobs(kvserve_daemon):
    ref = reference_generate("Hello, kvserve!", 24, ignore_eos=True)
    res = stream(kvserve_daemon.stub,
                 text_request("Hello, kvserve!", 24, ignore_eos=True, logprobs=3))
    assert_matches_reference(res, ref, pb2.FINISH_REASON_LENGTH)
    for r in res.responses:
        assert len(r.logprobs) == len(r.token_ids), r
    lps = res.logprobs
    assert len(lps) == len(res.token_ids) == 24
    for tok, lp in zip(res.token_ids, lps):
        assert lp.token_id == tok, lp
        assert len(lp.top) == 3, lp
        assert math.isfinite(lp.logprob) and lp.logprob <= 1e-5, lp
        assert lp.top[0].token_id == tok, f"greedy: top[0] must be the chosen token\n{lp}"
        assert lp.logprob == pytest.approx(lp.top[0].logprob, abs=1e-4), lp
        vals = [t.logprob for t in lp.top]
        assert vals == sorted(vals, reverse=True), lp
        assert len({t.token_id for t in lp.top}) == 3, lp
        assert all(0 <= t.token_id < kf.TINY_VOCAB for t in lp.top), lp
        assert sum(math.exp(v) for v in vals) <= 1 + 1e-4, lp


def test_logprobs_zero_and_unset(kvserve_daemon):
    res = stream(kvserve_daemon.stub,
                 text_request("Hello", 8, ignore_eos=True, logprobs=0)).check_ok()
    assert len(res.logprobs) == 8, res
    for tok, lp in zip(res.token_ids, res.logprobs):
        assert lp.token_id == tok and len(lp.top) == 0 and lp.logprob <= 1e-5, lp
    res = stream(kvserve_daemon.stub, text_request("Hello", 8, ignore_eos=True)).check_ok()
    assert res.logprobs == [], res


def test_seeded_sampling_is_reproducible(kvserve_daemon):
    def run():
        req = text_request("Once upon a time", 48, ignore_eos=True, temperature=0.8)
        req.sampling.seed = 7
        return stream(kvserve_daemon.stub, req).check_ok()

    a, b = run(), run()
    assert len(a.token_ids) == 48
    assert a.token_ids == b.token_ids
    assert a.text == b.text


def test_seeded_sampling_matches_reference(kvserve_daemon):
    # The draw is keyed by (seed, output position): the daemon and the
    # single-request reference generator sample the same tokens.
    ref = reference_generate("Once upon a time", 48, ignore_eos=True,
                             extra=("--temperature=0.8", "--seed=7"))
    req = text_request("Once upon a time", 48, ignore_eos=True, temperature=0.8)
    req.sampling.seed = 7
    res = stream(kvserve_daemon.stub, req)
    assert_matches_reference(res, ref, pb2.FINISH_REASON_LENGTH)


def test_concurrent_greedy_requests_match_reference(kvserve_daemon):
    cases = [("Hello, kvserve!", 120), ("a", 200), ("The quick brown fox", 60),
             ("Batching must not change outputs.", 150), ("x" * 100, 90)]
    refs = [reference_generate(p, n, ignore_eos=True) for p, n in cases]
    results = kf.run_concurrently([
        (lambda p=p, n=n: stream(kvserve_daemon.stub, text_request(p, n, ignore_eos=True)))
        for p, n in cases])
    for res, ref in zip(results, refs):
        assert_matches_reference(res, ref, pb2.FINISH_REASON_LENGTH)


def test_prefix_cache_hit_keeps_output(kvserve_daemon, model_info):
    prompt = "Prefix caching test prompt: " + "0123456789" * 5  # 79 tokens with BOS
    ref = reference_generate(prompt, 30, ignore_eos=True)
    n_prompt = len(ref["prompt_token_ids"])
    first = stream(kvserve_daemon.stub, text_request(prompt, 30, ignore_eos=True))
    assert_matches_reference(first, ref, pb2.FINISH_REASON_LENGTH)
    assert first.final.usage.cached_prompt_tokens == 0, first
    second = stream(kvserve_daemon.stub, text_request(prompt, 30, ignore_eos=True))
    assert_matches_reference(second, ref, pb2.FINISH_REASON_LENGTH)
    cached = second.final.usage.cached_prompt_tokens
    bs = model_info.block_size
    assert cached > 0, second
    assert cached < n_prompt, second  # the last prompt token is always computed
    assert cached % bs == 0, second
    assert cached >= (n_prompt - 1) // bs * bs, second
    # Another cache salt shares nothing with the unsalted requests.
    salted = stream(kvserve_daemon.stub,
                    text_request(prompt, 30, ignore_eos=True, cache_salt="tenant-b"))
    assert_matches_reference(salted, ref, pb2.FINISH_REASON_LENGTH)
    assert salted.final.usage.cached_prompt_tokens == 0, salted


def test_tokenize_detokenize(kvserve_daemon):
    stub = kvserve_daemon.stub
    ids = list(stub.Tokenize(pb2.TokenizeRequest(text="Hello"), timeout=30).token_ids)
    assert ids == [kf.TINY_BOS] + list(b"Hello")
    ids = list(stub.Tokenize(pb2.TokenizeRequest(text="Hello", add_special_tokens=False),
                             timeout=30).token_ids)
    assert ids == list(b"Hello")
    text = "héllo wörld ✓ 日本語 🙂"
    ids = list(stub.Tokenize(pb2.TokenizeRequest(text=text), timeout=30).token_ids)
    assert ids == [kf.TINY_BOS] + list(text.encode())
    back = stub.Detokenize(pb2.DetokenizeRequest(token_ids=ids), timeout=30).text
    assert back == text  # BOS skipped by default
    back = stub.Detokenize(pb2.DetokenizeRequest(token_ids=list(text.encode())), timeout=30)
    assert back.text == text
    with_special = stub.Detokenize(
        pb2.DetokenizeRequest(token_ids=ids, skip_special_tokens=False), timeout=30).text
    assert with_special.endswith(text) and len(with_special) > len(text), with_special
    # The reference generator tokenizes the same way.
    ref = reference_generate("Hello, kvserve!", 1)
    ids = list(stub.Tokenize(pb2.TokenizeRequest(text="Hello, kvserve!"), timeout=30).token_ids)
    assert ids == ref["prompt_token_ids"]


def test_block_size_and_max_model_len_flags(kvserve_factory):
    d = kvserve_factory("--block_size=8", "--max_model_len=256")
    info = d.model_info()
    assert info.block_size == 8, info
    assert info.max_model_len == 256, info
    prompt = "Block size eight"
    ref = reference_generate(prompt, 100, ignore_eos=True, extra=("--block_size=8",))
    n_prompt = len(ref["prompt_token_ids"])
    res = stream(d.stub, text_request(prompt, 100, ignore_eos=True))
    assert_matches_reference(res, ref, pb2.FINISH_REASON_LENGTH)
    # Exactly max_model_len in total is accepted; one more is not.
    res = stream(d.stub, text_request(prompt, 256 - n_prompt, ignore_eos=True)).check_ok()
    assert len(res.token_ids) == 256 - n_prompt
    res = stream(d.stub, text_request(prompt, 256 - n_prompt + 1, ignore_eos=True))
    assert res.code == grpc.StatusCode.INVALID_ARGUMENT, res
    assert "max_tokens" in res.details, res
    samples = d.metrics()
    info_series = kf.metric_series(samples, "kvserve_server_info")
    assert any(dict(ls).get("block_size") == "8" for ls in info_series), info_series


def test_small_kv_pool_preemption_keeps_outputs_exact(kvserve_factory):
    # 23 usable blocks of 16 tokens; four requests of ~220 tokens (14 blocks)
    # each cannot all run at once: the scheduler must wait or preempt, and
    # outputs stay identical to the reference either way.
    d = kvserve_factory("--num_kv_blocks=24", "--block_size=16")
    cases = [("Preempt me %d" % i, 200) for i in range(4)]
    refs = [reference_generate(p, n, ignore_eos=True) for p, n in cases]
    results = kf.run_concurrently([
        (lambda p=p, n=n: stream(d.stub, text_request(p, n, ignore_eos=True))) for p, n in cases])
    for res, ref in zip(results, refs):
        assert_matches_reference(res, ref, pb2.FINISH_REASON_LENGTH)
    samples = d.wait_metrics(
        lambda s: kf.metric(s, "kvserve_kv_cache_blocks", state="in_use") == 0)
    assert kf.metric(samples, "kvserve_kv_cache_blocks", state="in_use") == 0
    assert kf.metric(samples, "kvserve_kv_cache_accounting_consistent") == 1
    print("preemptions:", kf.metric(samples, "kvserve_num_preemptions_total"))
