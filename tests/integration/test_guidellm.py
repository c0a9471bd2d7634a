"""A real LLM load tester (GuideLLM, from PyPI) against the daemon's OpenAI
HTTP API: every request succeeds, and the requests and tokens it counts are
the ones the server counted (kvserve_api_requests_total{api="http"},
kvserve_prompt_tokens_total, kvserve_generation_tokens_total).
Latencies are not asserted (bench/http_vs_grpc/load_testers.py reports them
beside kvserve-loadgen's)."""
from __future__ import annotations

import guidellm_runner as gl
import kvserve_fixtures as kf

CONCURRENCY, REQUESTS, PROMPT, OUTPUT = 4, 24, 64, 32


def test_guidellm_counts_equal_the_servers(kvserve_factory, tmp_path):
    ckpt = gl.make_checkpoint(tmp_path / "ckpt")
    d = kvserve_factory("--http_port=-1", model=str(ckpt))
    before = d.metrics()
    report = gl.summary(gl.run_guidellm(
        d.http_url, ckpt, tmp_path / "guidellm.json", concurrency=CONCURRENCY,
        num_requests=REQUESTS, prompt_tokens=PROMPT, output_tokens=OUTPUT))
    after = d.metrics()

    def delta(name, **labels):
        return kf.metric(after, name, 0, **labels) - kf.metric(before, name, 0, **labels)

    assert (report["successful"], report["errored"], report["incomplete"]) == (REQUESTS, 0, 0)
    assert delta("kvserve_api_requests_total", api="http") == REQUESTS
    assert delta("kvserve_prompt_tokens_total") == report["prompt_tokens"] == REQUESTS * PROMPT
    assert delta("kvserve_generation_tokens_total") == report["output_tokens"] == REQUESTS * OUTPUT
    assert kf.metric(after, "kvserve_kv_cache_blocks", state="in_use") == 0
