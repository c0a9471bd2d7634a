"""Bad flag values make the daemon exit non-zero at once, saying why."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

import kvserve_fixtures as kf

BASE = ["--host=127.0.0.1", "--port=0", "--metrics_host=127.0.0.1", "--metrics_port=0"]

CASES = [
    ("block-size-0", ["--model=builtin:tiny", "--block_size=0"], ["block_size"]),
    ("model-nonexistent", ["--model=/nonexistent"], ["/nonexistent"]),
    ("backend-bogus", ["--model=builtin:tiny", "--backend=bogus"], ["backend"]),
    ("max-num-seqs-0", ["--model=builtin:tiny", "--max_num_seqs=0"], ["max_num_seqs"]),
    ("dtype-bogus", ["--model=builtin:tiny", "--dtype=int3"], ["dtype"]),
    ("quantization-bogus", ["--model=builtin:tiny", "--quantization=int3"],
     ["quantization", "none or int8"]),
    ("kv-cache-dtype-bogus", ["--model=builtin:tiny", "--kv_cache_dtype=int3"],
     ["kv_cache_dtype", "auto, bfloat16, float16, fp8_e4m3, int8, int4, fp4_e2m1"]),
    # Validated before any backend starts, on CUDA as on the CPU.
    ("kv-cache-dtype-bogus-on-cuda",
     ["--model=builtin:tiny", "--backend=cuda", "--kv_cache_dtype=int3"],
     ["kv_cache_dtype", "auto, bfloat16, float16, fp8_e4m3, int8, int4, fp4_e2m1"]),
    ("gpu-memory-fraction-0", ["--model=builtin:tiny", "--gpu_memory_fraction=0"],
     ["gpu_memory_fraction"]),
    ("gpu-memory-fraction-nan", ["--model=builtin:tiny", "--gpu_memory_fraction=nan"],
     ["gpu_memory_fraction"]),
    ("cuda-block-size-128", ["--model=builtin:tiny", "--backend=cuda", "--block_size=128"],
     ["block_size"]),
    # GPU-only builtin on the CPU backend: refused, naming the model and the way out.
    ("llama3-8b-on-cpu", ["--model=builtin:llama3-8b", "--backend=cpu"], ["--backend=cuda"]),
    ("auth-token-file-missing",
     ["--model=builtin:tiny", "--auth_token_file=/nonexistent/kvserve-token"],
     ["auth_token_file", "/nonexistent/kvserve-token"]),
    ("http-port-bogus", ["--model=builtin:tiny", "--http_port=-5"], ["http_port"]),
    ("served-model-name-empty-entry", ["--model=builtin:tiny", "--served_model_name=a,,b"],
     ["served_model_name", "empty name"]),
    ("served-model-name-twice",
     ["--model=builtin:tiny", "--served_model_name=a,b", "--served_model_name=b"],
     ["served_model_name", '"b" given twice']),
    ("chat-template-missing",
     ["--model=builtin:tiny", "--http_port=-1", "--chat_template=/nonexistent/t.jinja"],
     ["chat_template", "/nonexistent/t.jinja"]),
    ("tool-call-parser-bogus", ["--model=builtin:tiny", "--tool_call_parser=xml"],
     ["tool_call_parser", '"xml"']),
    ("tls-cert-file-missing",
     ["--model=builtin:tiny", "--tls_cert_file=/nonexistent/cert.pem",
      "--tls_key_file=/nonexistent/key.pem"],
     ["tls_cert_file", "/nonexistent/cert.pem"]),
    ("kv-events-endpoint-scheme", ["--model=builtin:tiny", "--kv_events_endpoint=http://x:1"],
     ["kv_events_endpoint", "tcp://HOST:PORT"]),
    ("kv-events-endpoint-port", ["--model=builtin:tiny", "--kv_events_endpoint=tcp://127.0.0.1:70000"],
     ["kv_events_endpoint", "[0, 65535]"]),
    ("kv-events-replay-alone",
     ["--model=builtin:tiny", "--kv_events_replay_endpoint=tcp://127.0.0.1:0"],
     ["kv_events_replay_endpoint", "needs --kv_events_endpoint"]),
    ("kv-events-encoding", ["--model=builtin:tiny", "--kv_events_encoding=json"],
     ["kv_events_encoding", "map or array"]),
    ("kv-events-queue", ["--model=builtin:tiny", "--kv_events_queue_batches=0"],
     ["kv_events_queue_batches"]),
    ("kv-events-endpoint-unbindable",
     ["--model=builtin:tiny", "--kv_events_endpoint=tcp://192.0.2.1:5557"],
     ["kv_events_endpoint", "cannot bind"]),
]


@pytest.mark.parametrize("flags,mentions", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_flag_exits_nonzero(flags, mentions, tmp_path):
    binary = kf.require_binary(kf.daemon_path())
    cmd = [str(binary), *BASE, *flags]
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60  # safety net; expected well under a second
    try:
        while proc.poll() is None:
            if "kvserve ready" in out_path.read_text(errors="replace"):
                pytest.fail(f"{cmd} started serving\nstderr: {err_path.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{cmd} still running after 60 s\nstderr: {err_path.read_text()}")
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    stderr = err_path.read_text(errors="replace")
    assert proc.returncode != 0, f"{cmd} exited 0\nstderr: {stderr}"
    assert "kvserve ready" not in out_path.read_text(errors="replace")
    assert any(m in stderr for m in mentions), (
        f"stderr must mention {' or '.join(mentions)}:\n{stderr}")


def test_backend_cuda_without_a_gpu_says_why(tmp_path):
    """--backend=cuda where no GPU is usable (or the build has no CUDA) exits
    non-zero naming the flag and the reason; it never serves on the CPU."""
    if kf.TEST_BACKEND == "cuda" or os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has an NVIDIA GPU")
    binary = kf.require_binary(kf.daemon_path())
    proc = subprocess.run([str(binary), *BASE, "--model=builtin:tiny", "--backend=cuda"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if proc.returncode == 0 or "kvserve ready" in proc.stdout:
        pytest.skip("this machine has a usable CUDA device")
    assert "--backend=cuda" in proc.stderr, proc.stderr
    assert ("no usable CUDA device" in proc.stderr
            or "built without CUDA" in proc.stderr), proc.stderr
