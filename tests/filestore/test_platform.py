"""Issue 15.21: the package imports where ``fcntl`` does not exist (Windows); FileStore says why."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
sys.modules["fcntl"] = None  # as on Windows: import fcntl raises ImportError
import durable_agent, durable_agent.stores
from durable_agent.stores import MemoryStore
MemoryStore()
try:
    durable_agent.stores.FileStore(sys.argv[1])
except NotImplementedError as exc:
    print("refused:", exc)
"""


def test_imports_without_fcntl_and_filestore_refuses_clearly(tmp_path: object) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "refused: FileStore needs POSIX file locks (fcntl)" in done.stdout
