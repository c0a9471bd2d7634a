"""Request validation: every bad request gets INVALID_ARGUMENT naming the field.

One daemon serves the whole matrix; afterwards it still serves a normal request
and its rejected counter agrees with the number of rejected requests.
"""

from __future__ import annotations

import grpc
import pytest

import kvserve_fixtures as kf
from kvserve_fixtures import stream

pb2, pb2_grpc = kf.pb()


def req(text: str | None = "Hello", *, ids=None, max_tokens: int | None = 8, **fields):
    """A GenerateRequest; sampling/stopping sub-fields as s_<name>= / st_<name>=."""
    sampling = {k[2:]: v for k, v in fields.items() if k.startswith("s_")}
    stopping = {k[3:]: v for k, v in fields.items() if k.startswith("st_")}
    top = {k: v for k, v in fields.items() if not k.startswith(("s_", "st_"))}
    r = pb2.GenerateRequest(**top)
    if ids is not None:
        r.token_ids.ids.extend(ids)
    elif text is not None:
        r.text = text
    r.sampling.CopyFrom(pb2.SamplingParams(**sampling))
    if max_tokens is not None:
        stopping.setdefault("max_tokens", max_tokens)
    r.stopping.CopyFrom(pb2.StoppingParams(**stopping))
    return r


# (id, build(info) -> GenerateRequest, field names of which the message must name one)
CASES = [
    ("empty-text-prompt", lambda i: req(""), ["prompt", "text"]),
    ("no-prompt", lambda i: req(None), ["prompt"]),
    ("token-id-258", lambda i: req(ids=[256, 72, 258]), ["token_ids"]),
    ("token-id-minus-1", lambda i: req(ids=[256, -1, 72]), ["token_ids"]),
    ("empty-token-ids", lambda i: req(ids=[]), ["prompt", "token_ids"]),
    ("max-tokens-negative", lambda i: req(max_tokens=-1), ["max_tokens"]),
    ("max-tokens-negative", lambda i: req(max_tokens=-5), ["max_tokens"]),
    ("max-tokens-beyond-max-model-len", lambda i: req(max_tokens=i.max_model_len + 1),
     ["max_tokens"]),
    ("max-tokens-plus-prompt-beyond-max-model-len",
     lambda i: req(ids=[65] * 10, max_tokens=i.max_model_len - 9), ["max_tokens"]),
    ("token-prompt-too-long", lambda i: req(ids=[65] * (i.max_model_len + 1), max_tokens=1),
     ["prompt", "token_ids"]),
    ("text-prompt-too-long", lambda i: req("a" * (i.max_model_len + 1), max_tokens=1),
     ["prompt", "text"]),
    ("temperature-minus-1", lambda i: req(s_temperature=-1.0), ["temperature"]),
    ("temperature-nan", lambda i: req(s_temperature=float("nan")), ["temperature"]),
    ("temperature-inf", lambda i: req(s_temperature=float("inf")), ["temperature"]),
    ("temperature-101", lambda i: req(s_temperature=101.0), ["temperature"]),
    ("top-p-0", lambda i: req(s_top_p=0.0), ["top_p"]),
    ("top-p-1.5", lambda i: req(s_top_p=1.5), ["top_p"]),
    ("top-p-nan", lambda i: req(s_top_p=float("nan")), ["top_p"]),
    ("top-k-minus-2", lambda i: req(s_top_k=-2), ["top_k"]),
    ("min-p-2", lambda i: req(s_min_p=2.0), ["min_p"]),
    ("min-p-negative", lambda i: req(s_min_p=-0.5), ["min_p"]),
    ("repetition-penalty-0", lambda i: req(s_repetition_penalty=0.0), ["repetition_penalty"]),
    ("repetition-penalty-3", lambda i: req(s_repetition_penalty=3.0), ["repetition_penalty"]),
    ("presence-penalty-3", lambda i: req(s_presence_penalty=3.0), ["presence_penalty"]),
    ("frequency-penalty-minus-3", lambda i: req(s_frequency_penalty=-3.0),
     ["frequency_penalty"]),
    ("logprobs-21", lambda i: req(logprobs=21), ["logprobs"]),
    ("logprobs-minus-1", lambda i: req(logprobs=-1), ["logprobs"]),
    ("17-stop-strings", lambda i: req(st_stop=[f"s{k}" for k in range(17)]), ["stop"]),
    ("empty-stop-string", lambda i: req(st_stop=["ok", ""]), ["stop"]),
    ("stop-string-257-bytes", lambda i: req(st_stop=["x" * 257]), ["stop"]),
    ("min-tokens-gt-max-tokens", lambda i: req(max_tokens=4, st_min_tokens=5), ["min_tokens"]),
    ("min-tokens-negative", lambda i: req(st_min_tokens=-1), ["min_tokens"]),
    ("stop-token-id-out-of-vocab", lambda i: req(st_stop_token_ids=[10, 258]),
     ["stop_token_ids"]),
    ("stop-token-id-negative", lambda i: req(st_stop_token_ids=[-1]), ["stop_token_ids"]),
    ("65-stop-token-ids", lambda i: req(st_stop_token_ids=[10] * 65), ["stop_token_ids"]),
    ("request-id-200-bytes", lambda i: req(request_id="r" * 200), ["request_id"]),
    ("cache-salt-257-bytes", lambda i: req(cache_salt="s" * 257), ["cache_salt"]),
]


# Outcomes of the Generate calls this module made, for the metrics check.
OUTCOMES: list[grpc.StatusCode] = []


def _generate(daemon, request):
    res = stream(daemon.stub, request, timeout=60)
    OUTCOMES.append(res.code)
    return res


@pytest.mark.parametrize("build,fields", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_generate_request(kvserve_daemon, model_info, build, fields):
    request = build(model_info)
    res = _generate(kvserve_daemon, request)
    assert res.code == grpc.StatusCode.INVALID_ARGUMENT, (
        f"expected INVALID_ARGUMENT for {request!r}; got {res}")
    assert res.responses == [], f"no message may be streamed for a rejected request: {res}"
    assert any(f in res.details for f in fields), (
        f"the message must name the field ({' or '.join(fields)}); got {res.details!r}")


def _raw_call(daemon, method: str, payload: bytes, streaming: bool, response_type):
    ch = daemon.channel()
    path = f"/{kf.SERVICE}/{method}"
    if streaming:
        call = ch.unary_stream(path, request_serializer=None,
                               response_deserializer=response_type.FromString)
        try:
            out = list(call(payload, timeout=30))
        except grpc.RpcError as e:
            OUTCOMES.append(e.code())
            raise
        OUTCOMES.append(grpc.StatusCode.OK)
        return out
    call = ch.unary_unary(path, request_serializer=None,
                          response_deserializer=response_type.FromString)
    return call(payload, timeout=30)


def _string_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field, encoded by hand (payload < 128 bytes)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


INVALID_UTF8 = b"ab\xff\xfe\xc3"


def test_invalid_utf8_text_prompt(kvserve_daemon):
    # The Python protobuf runtime refuses to serialize invalid UTF-8 in a
    # string field, so GenerateRequest{text: "ab\xff\xfe\xc3", stopping: {max_tokens: 4}}
    # is encoded by hand and sent as raw bytes.
    payload = _string_field(1, INVALID_UTF8) + _string_field(5, bytes([1 << 3, 4]))
    with pytest.raises(grpc.RpcError) as exc:
        _raw_call(kvserve_daemon, "Generate", payload, True, pb2.GenerateResponse)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (
        exc.value.code(), exc.value.details())
    assert any(f in (exc.value.details() or "") for f in ("prompt", "text", "UTF-8", "utf-8")), (
        exc.value.details())


def test_invalid_utf8_stop_string(kvserve_daemon):
    stopping = _string_field(5, INVALID_UTF8) + bytes([1 << 3, 4])
    payload = _string_field(1, b"Hello") + _string_field(5, stopping)
    with pytest.raises(grpc.RpcError) as exc:
        _raw_call(kvserve_daemon, "Generate", payload, True, pb2.GenerateResponse)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (
        exc.value.code(), exc.value.details())


def test_server_still_serves_after_bad_requests(kvserve_daemon):
    ref = kf.reference_generate("Hello, kvserve!", 16, ignore_eos=True)
    res = _generate(kvserve_daemon, kf.text_request("Hello, kvserve!", 16, ignore_eos=True))
    res.check_ok()
    assert res.token_ids == ref["token_ids"]
    assert res.final.finish_reason == pb2.FINISH_REASON_LENGTH
    # Every Generate rejected with INVALID_ARGUMENT above (the matrix and the
    # invalid UTF-8 requests) is counted as rejected, not as finished; every
    # accepted one (this one, and any bad one the daemon wrongly accepted) as
    # finished; nothing is left in the pool.
    n_rejected = OUTCOMES.count(grpc.StatusCode.INVALID_ARGUMENT)
    n_accepted = OUTCOMES.count(grpc.StatusCode.OK)
    samples = kvserve_daemon.wait_metrics(
        lambda s: kf.metric(s, "kvserve_requests_rejected_total", 0,
                            reason="invalid_argument") >= n_rejected
        and kf.metric_sum(s, "kvserve_requests_finished_total") >= n_accepted)
    rejected = kf.metric(samples, "kvserve_requests_rejected_total", 0, reason="invalid_argument")
    assert rejected == n_rejected, (
        OUTCOMES, kf.metric_series(samples, "kvserve_requests_rejected_total"))
    assert kf.metric_sum(samples, "kvserve_requests_finished_total") == n_accepted, (
        OUTCOMES, kf.metric_series(samples, "kvserve_requests_finished_total"))
    assert kf.metric(samples, "kvserve_kv_cache_blocks", state="in_use") == 0
    assert kf.metric(samples, "kvserve_kv_cache_accounting_consistent") == 1


def test_tokenize_invalid_utf8(kvserve_daemon):
    payload = _string_field(1, INVALID_UTF8)
    with pytest.raises(grpc.RpcError) as exc:
        _raw_call(kvserve_daemon, "Tokenize", payload, False, pb2.TokenizeResponse)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (
        exc.value.code(), exc.value.details())


@pytest.mark.parametrize("ids", [[72, 999], [-1], [258]], ids=["999", "minus-1", "258"])
def test_detokenize_out_of_vocab(kvserve_daemon, ids):
    e = kf.unary_error(kvserve_daemon.stub.Detokenize,
                       pb2.DetokenizeRequest(token_ids=ids), timeout=30)
    assert e is not None, f"Detokenize({ids}) succeeded"
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
    assert "token_ids" in (e.details() or ""), e.details()
