"""lm-evaluation-harness against the daemon, scored the same as lm-eval's own `hf` backend.

SmolLM2-135M-Instruct (the real model real_models.fetch converts; bf16 weights, computed in
fp32 by both sides) is served on the cpu backend. Two tasks on local data files this test
writes:
  * a multiple-choice (loglikelihood) task through `local-completions`, which scores every
    choice with echo + logprobs and max_tokens 1 on token-id prompts: accuracy identical to
    the `hf` backend's and every per-choice loglikelihood within 1e-3;
  * a generate_until task through `local-completions` (greedy, stop at a newline): the same
    exact_match and the same generated text as the `hf` backend.
Plus vLLM's prompt_logprobs on /v1/chat/completions with the model's own chat template,
against transformers' log_softmax of the rendered prompt.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvserve_fixtures as kf  # noqa: E402
from fetch_real_models import cache_dir  # noqa: E402

os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL_DIR = cache_dir() / "smollm2-135m-instruct"
SERVED = "smollm2"
LOGLIKELIHOOD_TOL = 1e-3

# Questions a 135M model gets partly right, so accuracy is neither 0 nor 1 by accident.
MC_DOCS = [
    {"question": "The capital of France is", "choices": ["Paris", "Berlin", "Madrid", "Rome"],
     "answer": 0},
    {"question": "Two plus two equals", "choices": ["three", "four", "five", "six"], "answer": 1},
    {"question": "Water freezes at a temperature of", "choices": ["100 degrees Celsius",
     "0 degrees Celsius", "50 degrees Celsius", "-40 degrees Celsius"], "answer": 1},
    {"question": "The largest planet in the solar system is",
     "choices": ["Mars", "Venus", "Jupiter", "Mercury"], "answer": 2},
    {"question": "A baby cat is called a", "choices": ["puppy", "kitten", "calf", "foal"],
     "answer": 1},
    {"question": "The opposite of hot is", "choices": ["warm", "cold", "bright", "loud"],
     "answer": 1},
    {"question": "Bees make", "choices": ["milk", "silk", "honey", "wool"], "answer": 2},
    {"question": "The sun rises in the", "choices": ["north", "south", "west", "east"],
     "answer": 3},
]
GEN_DOCS = [
    {"question": "Q: What is the capital of Italy?\nA:", "answer": " Rome"},
    {"question": "Q: What color is the sky on a clear day?\nA:", "answer": " Blue"},
    {"question": "Q: How many legs does a spider have?\nA:", "answer": " Eight"},
    {"question": "Q: What do cows drink?\nA:", "answer": " Water"},
]


def write_tasks(root: Path) -> Path:
    (root / "mc.jsonl").write_text("".join(json.dumps(d) + "\n" for d in MC_DOCS))
    (root / "gen.jsonl").write_text("".join(json.dumps(d) + "\n" for d in GEN_DOCS))
    (root / "kvserve_mc.yaml").write_text(f"""task: kvserve_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {root / 'mc.jsonl'}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: " "
metric_list:
  - metric: acc
""")
    (root / "kvserve_gen.yaml").write_text(f"""task: kvserve_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {root / 'gen.jsonl'}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 12
  do_sample: false
  temperature: 0
metric_list:
  - metric: exact_match
    ignore_case: true
    ignore_punctuation: true
""")
    return root


@pytest.fixture(scope="module")
def model_dir():
    if not (MODEL_DIR / ".complete").exists():
        pytest.skip(f"{MODEL_DIR} is not there (the real_models.fetch test fetches it; it skips "
                    "where PyPI cannot be reached)")
    return MODEL_DIR


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, model_dir):
    d = kf.start_daemon(tmp_path_factory.mktemp("daemon"), "--http_port=-1",
                        f"--served_model_name={SERVED}", model=str(model_dir))
    assert d.http_url, d.stdout_text()
    yield d
    d.stop()


def evaluate(model: str, model_args: str, tasks_dir: Path) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager
    return lm_eval.simple_evaluate(
        model=model, model_args=model_args, tasks=["kvserve_mc", "kvserve_gen"],
        task_manager=TaskManager(include_path=str(tasks_dir)), log_samples=True,
        batch_size=1, random_seed=0, numpy_random_seed=0, torch_random_seed=0,
        fewshot_random_seed=0)


def per_doc(results: dict, task: str) -> list:
    return sorted(results["samples"][task], key=lambda s: s["doc_id"])


def test_lm_eval_scores_kvserve_as_its_hf_backend(daemon, model_dir, tmp_path):
    tasks_dir = write_tasks(tmp_path)
    served = evaluate(
        "local-completions",
        f"model={SERVED},base_url={daemon.http_url}/v1/completions,tokenizer={model_dir},"
        "tokenized_requests=True,num_concurrent=1,max_retries=1,timeout=120",
        tasks_dir)
    reference = evaluate("hf", f"pretrained={model_dir},dtype=float32,device=cpu", tasks_dir)

    mc_served, mc_ref = per_doc(served, "kvserve_mc"), per_doc(reference, "kvserve_mc")
    assert len(mc_served) == len(mc_ref) == len(MC_DOCS)
    worst = 0.0
    for a, b in zip(mc_served, mc_ref):
        # resps: one [(loglikelihood, is_greedy)] per choice.
        lls_a = [r[0][0] for r in a["resps"]]
        lls_b = [r[0][0] for r in b["resps"]]
        assert len(lls_a) == len(lls_b) == 4
        worst = max(worst, max(abs(x - y) for x, y in zip(lls_a, lls_b)))
        assert a["acc"] == b["acc"], (a["doc"], lls_a, lls_b)
        assert [r[0][1] for r in a["resps"]] == [r[0][1] for r in b["resps"]]  # is_greedy
    print(f"lm-eval kvserve_mc: acc {served['results']['kvserve_mc']['acc,none']} "
          f"(hf {reference['results']['kvserve_mc']['acc,none']}), "
          f"max |loglikelihood diff| {worst:.2e}")
    assert worst <= LOGLIKELIHOOD_TOL
    assert served["results"]["kvserve_mc"]["acc,none"] == \
        reference["results"]["kvserve_mc"]["acc,none"]

    gen_served, gen_ref = per_doc(served, "kvserve_gen"), per_doc(reference, "kvserve_gen")
    print(f"lm-eval kvserve_gen: exact_match {served['results']['kvserve_gen']['exact_match,none']} "
          f"(hf {reference['results']['kvserve_gen']['exact_match,none']}), "
          f"answers {[s['resps'][0][0] for s in gen_served]}")
    assert [s["resps"] for s in gen_served] == [s["resps"] for s in gen_ref]
    assert served["results"]["kvserve_gen"]["exact_match,none"] == \
        reference["results"]["kvserve_gen"]["exact_match,none"]


def test_chat_prompt_logprobs_match_transformers(daemon, model_dir):
    import numpy as np
    import openai
    import torch
    import transformers

    client = openai.OpenAI(base_url=daemon.http_url + "/v1", api_key="unused", max_retries=0,
                           timeout=120)
    messages = [{"role": "user", "content": "Name three colours."}]
    chat = client.chat.completions.create(model=SERVED, messages=messages, max_tokens=1,
                                          temperature=0, extra_body={"prompt_logprobs": 1})
    scored = chat.model_dump()["prompt_logprobs"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    assert scored[0] is None and len(scored) == len(ids) == chat.usage.prompt_tokens
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        hf = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1).numpy()
    got = [scored[i][str(ids[i])]["logprob"] for i in range(1, len(ids))]
    want = [hf[i - 1, ids[i]] for i in range(1, len(ids))]
    np.testing.assert_allclose(got, want, rtol=0, atol=LOGLIKELIHOOD_TOL)
    for i in range(1, len(ids)):
        top = [e for e in scored[i].values() if e["rank"] == 1]
        assert len(top) == 1 and abs(top[0]["logprob"] - hf[i - 1].max()) < LOGLIKELIHOOD_TOL
