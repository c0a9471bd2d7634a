"""A checkpoint's generation_config.json, through the daemon, against transformers.

An instruct checkpoint lists its end-of-turn tokens in generation_config.json
(`"eos_token_id": [2, X]` beside config.json's `2`) and its default sampling
values. The checkpoint here is a random-weight Llama saved with
`save_pretrained`; X is the token transformers' greedy decoding produces at a
middle step, so `generate()` stops there. Checked:
  * Generate (greedy, token-id prompt) returns exactly transformers'
    `generate()` tokens, ending at X with FINISH_REASON_STOP and stop_token X;
  * GetModelInfo lists every EOS id and the sampling defaults; /metrics'
    kvserve_server_info carries the EOS ids;
  * a seeded request that leaves sampling unset draws the same tokens as one
    that sets the checkpoint's values, and --generation_config=none turns the
    defaults off (the EOS ids stay).
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

import kvserve_fixtures as kf
from kvserve_fixtures import ids_request, stream

pb2, _ = kf.pb()

VOCAB = 320
PROMPT = [5, 17, 99, 140, 23, 7, 250, 64, 31, 12, 200, 3]
MAX_NEW = 24
STOP_STEP = 6  # X is the greedy token at this output position (or the first new one after)
DEFAULTS = dict(temperature=0.7, top_p=0.9, top_k=20, repetition_penalty=1.05)


@pytest.fixture(scope="module")
def instruct_checkpoint(tmp_path_factory):
    """(directory, transformers' generate() output ids, X)."""
    path = tmp_path_factory.mktemp("instruct")
    torch.manual_seed(11)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        initializer_range=0.2, bos_token_id=1, eos_token_id=2)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model = model.to(torch.float32).eval()
    model.save_pretrained(path, safe_serialization=True)

    # Greedy continuation without any EOS, by hand (full recompute each step).
    seq = list(PROMPT)
    with torch.no_grad():
        for _ in range(MAX_NEW):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    greedy = seq[len(PROMPT):]
    assert 2 not in greedy[:STOP_STEP + 1], "re-seed: config.json's EOS comes first"
    step = next(i for i in range(STOP_STEP, MAX_NEW) if greedy[i] not in greedy[:i])
    end_of_turn = greedy[step]

    generation = dict(eos_token_id=[2, end_of_turn], bos_token_id=1, do_sample=True, **DEFAULTS)
    (path / "generation_config.json").write_text(json.dumps(generation))

    # transformers' own generate() with that generation_config, greedy.
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager").eval()
    assert list(reloaded.generation_config.eos_token_id) == [2, end_of_turn]
    with torch.no_grad():
        out = reloaded.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=MAX_NEW,
                                pad_token_id=0)
    hf_tokens = [int(t) for t in out[0, len(PROMPT):]]
    assert hf_tokens == greedy[:step + 1], (hf_tokens, greedy)
    return path, hf_tokens, end_of_turn


@pytest.fixture(scope="module")
def daemon(kvserve_module_factory, instruct_checkpoint):
    path, _, _ = instruct_checkpoint
    return kvserve_module_factory(model=str(path))


def test_stops_at_the_end_of_turn_token_like_generate(daemon, instruct_checkpoint):
    _, hf_tokens, end_of_turn = instruct_checkpoint
    result = stream(daemon.stub, ids_request(PROMPT, MAX_NEW, temperature=0.0)).check_ok()
    assert result.token_ids == hf_tokens, result
    assert result.final.finish_reason == pb2.FINISH_REASON_STOP, result
    assert result.final.stop_token == end_of_turn, result
    # ignore_eos runs past it, to max_tokens.
    longer = stream(daemon.stub, ids_request(PROMPT, MAX_NEW, temperature=0.0,
                                             ignore_eos=True)).check_ok()
    assert len(longer.token_ids) == MAX_NEW
    assert longer.token_ids[:len(hf_tokens)] == hf_tokens
    assert longer.final.finish_reason == pb2.FINISH_REASON_LENGTH


def test_model_info_and_metrics_list_every_eos_and_the_defaults(daemon, instruct_checkpoint):
    _, _, end_of_turn = instruct_checkpoint
    info = daemon.model_info()
    assert list(info.eos_token_ids) == [2, end_of_turn], info
    d = info.default_sampling
    assert d.HasField("temperature") and d.temperature == pytest.approx(0.7), info
    assert d.top_p == pytest.approx(0.9) and d.top_k == 20, info
    assert d.repetition_penalty == pytest.approx(1.05), info
    assert not d.HasField("min_p"), info
    samples = daemon.metrics()
    series = kf.metric_series(samples, "kvserve_server_info")
    assert len(series) == 1
    labels = dict(next(iter(series)))
    assert labels["eos_token_ids"] == f"2,{end_of_turn}", labels


def seeded(seed: int, **sampling):
    req = ids_request(PROMPT, 12, temperature=None, ignore_eos=True)
    req.sampling.seed = seed
    for key, value in sampling.items():
        setattr(req.sampling, key, value)
    return req


def test_unset_sampling_fields_take_the_checkpoint_defaults(daemon):
    for seed in (1, 2, 3):
        implicit = stream(daemon.stub, seeded(seed)).check_ok().token_ids
        explicit = stream(daemon.stub, seeded(seed, **DEFAULTS)).check_ok().token_ids
        assert implicit == explicit, seed
    # A field the request sets wins over the default.
    greedy = stream(daemon.stub, seeded(1, temperature=0.0)).check_ok().token_ids
    reference = stream(daemon.stub, ids_request(PROMPT, 12, temperature=0.0,
                                                ignore_eos=True)).check_ok().token_ids
    assert greedy == reference


def test_generation_config_none_ignores_the_sampling_defaults(kvserve_factory,
                                                              instruct_checkpoint):
    path, hf_tokens, end_of_turn = instruct_checkpoint
    d = kvserve_factory("--generation_config=none", model=str(path))
    info = d.model_info()
    assert list(info.eos_token_ids) == [2, end_of_turn], info
    assert not info.HasField("default_sampling"), info
    plain = dict(temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0)
    for seed in (1, 2):
        implicit = stream(d.stub, seeded(seed)).check_ok().token_ids
        explicit = stream(d.stub, seeded(seed, **plain)).check_ok().token_ids
        assert implicit == explicit, seed
    greedy = stream(d.stub, ids_request(PROMPT, MAX_NEW, temperature=0.0)).check_ok()
    assert greedy.token_ids == hf_tokens


def test_bad_generation_config_is_a_clear_startup_error(tmp_path, instruct_checkpoint):
    path, _, _ = instruct_checkpoint
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in path.iterdir():
        (bad / f.name).symlink_to(f)
    (bad / "generation_config.json").unlink()
    (bad / "generation_config.json").write_text(json.dumps({"eos_token_id": [2], "top_p": 3.0}))
    res = kf.subprocess.run([str(kf.require_binary(kf.daemon_path())), f"--model={bad}",
                             "--backend=cpu", "--port=0", "--metrics_port=0",
                             "--host=127.0.0.1", "--metrics_host=127.0.0.1"],
                            capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    err = res.stdout + res.stderr
    assert "generation_config.json" in err and "top_p" in err, err
