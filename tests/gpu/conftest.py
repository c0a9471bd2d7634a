"""GPU pytest files exit 77 (CTest: skipped) where no CUDA device is usable."""
import pytest


def pytest_sessionstart(session):
    try:
        import torch
    except ImportError:
        pytest.exit("SKIPPED: no torch", returncode=77)
    if not torch.cuda.is_available():
        pytest.exit("SKIPPED: torch sees no CUDA device", returncode=77)
