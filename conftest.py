"""Root pytest configuration: nbval kernels run this checkout's package.

nbval opens the sanitize file relative to the working directory (trap 10 in the
design notes), so the path is made absolute here; kernels inherit the
environment of tools/literate.py's executor so outputs compare equal.
"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))

from literate import kernel_env  # noqa: E402

os.environ.update(kernel_env())


def pytest_configure(config):
    path = config.option.nbval_sanitize_with
    if path and not os.path.isabs(path):
        config.option.nbval_sanitize_with = str(ROOT / path)
