"""--kv_cache_dtype: the pool's capacity follows the format at a fixed
--kv_cache_memory_mb, GetModelInfo / the startup log / /metrics say the format
and the capacity in tokens, and requests are served from the quantized cache."""

from __future__ import annotations

import kvserve_fixtures as kf
from kvserve_fixtures import ids_request, stream

MEMORY = "--kv_cache_memory_mb=16"


def _info_and_metrics(daemon):
    info = daemon.model_info()
    samples = daemon.metrics()
    return info, samples


def test_int8_holds_about_four_times_the_fp32_tokens(kvserve_factory):
    # builtin:small: head dim 64, the common size (builtin:tiny's 16 would let
    # the per-row scale dominate).
    # 256 MiB: ~360 fp32 blocks, so whole blocks move the ratio by < 0.3%.
    fp32 = kvserve_factory("--kv_cache_memory_mb=256", model="builtin:small")
    int8 = kvserve_factory("--kv_cache_memory_mb=256", "--kv_cache_dtype=int8",
                           model="builtin:small")
    fp32_info, fp32_metrics = _info_and_metrics(fp32)
    int8_info, int8_metrics = _info_and_metrics(int8)

    assert fp32_info.kv_cache_dtype == "auto"
    assert int8_info.kv_cache_dtype == "int8"
    for info in (fp32_info, int8_info):
        assert info.kv_cache_capacity_tokens == (info.num_kv_blocks - 1) * info.block_size
    # int8 rows are head_dim bytes plus a 4-byte fp32 scale against 4 * head_dim
    # bytes: 4 * 64 / (64 + 4) = 3.76 times the tokens.
    ratio = int8_info.kv_cache_capacity_tokens / fp32_info.kv_cache_capacity_tokens
    assert 3.74 <= ratio <= 3.79, (ratio, fp32_info, int8_info)

    for daemon, info, samples in ((fp32, fp32_info, fp32_metrics),
                                  (int8, int8_info, int8_metrics)):
        assert kf.metric(samples, "kvserve_kv_cache_capacity_tokens") == \
            info.kv_cache_capacity_tokens
        assert kf.metric(samples, "kvserve_server_info",
                         kv_cache_dtype=info.kv_cache_dtype, model=info.model_name,
                         backend="cpu", block_size=str(info.block_size),
                         eos_token_ids=",".join(map(str, info.eos_token_ids)),
                         version=info.version) == 1
        log = daemon.stderr_text() + daemon.stdout_text()
        assert (f"kv_cache_dtype={info.kv_cache_dtype} "
                f"kv_cache_capacity_tokens={info.kv_cache_capacity_tokens}") in log

    # A request longer than a block (so later tokens attend to quantized
    # blocks written by earlier steps) runs to its length.
    stub = int8.stub
    prompt = list(range(1, 40))
    result = stream(stub, ids_request(prompt, 24, ignore_eos=True)).check_ok()
    assert len(result.token_ids) == 24
    assert result.final.usage.completion_tokens == 24
    # Greedy decoding from the same cache contents is deterministic.
    again = stream(stub, ids_request(prompt, 24, ignore_eos=True)).check_ok()
    assert again.token_ids == result.token_ids


def test_every_format_serves(kvserve_factory):
    capacities = {}
    for dtype in ("bfloat16", "float16", "fp8_e4m3", "int4", "fp4_e2m1"):
        d = kvserve_factory(MEMORY, f"--kv_cache_dtype={dtype}")
        info = d.model_info()
        assert info.kv_cache_dtype == dtype
        capacities[dtype] = info.kv_cache_capacity_tokens
        result = stream(d.stub, ids_request(list(range(3, 40)), 12, ignore_eos=True)).check_ok()
        assert len(result.token_ids) == 12
        d.stop()
    assert capacities["bfloat16"] == capacities["float16"]
    assert capacities["int4"] == capacities["fp4_e2m1"] > capacities["fp8_e4m3"] > \
        capacities["bfloat16"]
