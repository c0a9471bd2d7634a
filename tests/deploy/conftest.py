"""pytest configuration of tests/deploy (see deploy_helpers.py)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# The daemon harness is shared with the integration tests.
sys.path.insert(0, str(HERE.parent / "integration"))
