"""Speculative decoding by prompt lookup (--speculative_method=ngram) through the daemon.

Two daemons on builtin:tiny, one speculating, one not, take the same requests over gRPC:
greedy and seeded sampled ones (temperature, top-k/top-p, penalties, logit_bias), copy-heavy
prompts whose text recurs (so drafts are proposed and kept) and others, several at once. Every
output must be the same token for token (the CPU path is batch invariant, and a kept draft is
the token the request's own sampler draws at that position), and the speculating daemon's
/metrics must show drafts proposed and accepted, per position.
"""

from __future__ import annotations

import pytest

import kvserve_fixtures as kf

pb2, _ = kf.pb()

REPEATED = "the cat sat on the mat. the cat sat on the mat. the cat sat on"


@pytest.fixture(scope="module")
def daemons(kvserve_module_factory):
    plain = kvserve_module_factory()
    spec = kvserve_module_factory("--speculative_method=ngram", "--num_speculative_tokens=4",
                                  "--prompt_lookup_min=1", "--prompt_lookup_max=3")
    return plain, spec


def requests():
    out = []
    for i, prompt in enumerate([REPEATED, "abcabcabcabcab", "hello world", "x y z " * 6]):
        out.append(kf.text_request(prompt, 48, ignore_eos=True))
        sampled = kf.text_request(prompt, 48, ignore_eos=True, temperature=0.8)
        sampled.sampling.seed = 11 + i
        sampled.sampling.top_k = 20
        sampled.sampling.top_p = 0.9
        sampled.sampling.repetition_penalty = 1.1
        sampled.sampling.logit_bias[ord("q")] = 5.0
        out.append(sampled)
    return out


def test_outputs_equal_with_and_without_speculation(daemons):
    plain, spec = daemons
    reqs = requests()
    want = [kf.stream(plain.stub, r).check_ok().token_ids for r in reqs]
    got = [kf.stream(spec.stub, r).check_ok().token_ids for r in reqs]
    assert got == want
    # Concurrently (mixed batches, up to --speculative_max_batch decoding together).
    together = kf.run_concurrently([lambda r=r: kf.stream(spec.stub, r).check_ok().token_ids
                                    for r in reqs[:4]])
    assert together == want[:4]
    m = spec.metrics()
    drafts = kf.metric(m, "kvserve_spec_decode_num_drafts_total")
    proposed = kf.metric(m, "kvserve_spec_decode_num_draft_tokens_total")
    accepted = kf.metric(m, "kvserve_spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and proposed >= drafts and 0 < accepted <= proposed, (drafts, proposed,
                                                                            accepted)
    first = kf.metric(m, "kvserve_spec_decode_num_accepted_tokens_per_pos_total", position="0")
    assert first > 0
    assert kf.metric(plain.metrics(), "kvserve_spec_decode_num_drafts_total") == 0


def test_bad_speculative_flags_are_named(kvserve_factory, tmp_path):
    import subprocess
    for flag, name in [("--speculative_method=eagle", "speculative_method"),
                       ("--num_speculative_tokens=0", "num_speculative_tokens"),
                       ("--prompt_lookup_min=5", "prompt_lookup_min")]:
        res = subprocess.run([str(kf.daemon_path()), "--model=builtin:tiny", "--port=0",
                              "--metrics_port=0", "--speculative_method=ngram", flag],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode != 0 and name in res.stderr, (flag, res.stderr[-500:])
