"""Finding and running Polymesh's command-line tools."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Sequence


class ToolError(RuntimeError):
    """A Polymesh tool is missing, or failed on the exported IR."""

    def __init__(self, message: str, stdout: str = "", stderr: str = ""):
        super().__init__(message)
        self.stdout = stdout
        self.stderr = stderr


def _repo_root() -> Path:
    # python/polymesh_jax/_tools.py -> the repository root.
    return Path(__file__).resolve().parents[2]


def bin_dir() -> Path:
    """$POLYMESH_BIN_DIR, else build/bin of the repository this package
    lives in."""
    configured = os.environ.get("POLYMESH_BIN_DIR")
    if configured:
        return Path(configured)
    return _repo_root() / "build" / "bin"


def tool_path(name: str) -> Path:
    candidate = bin_dir() / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    on_path = shutil.which(name)
    if on_path and not os.environ.get("POLYMESH_BIN_DIR"):
        return Path(on_path)
    raise ToolError(
        f"{name} not found in {bin_dir()} (set POLYMESH_BIN_DIR, or build Polymesh with utils/build.sh)")


def run_tool(name: str, ir_text: str, options: Sequence[str], timeout: float = 300.0,
             check: bool = True) -> subprocess.CompletedProcess:
    """Runs `name FILE options...` on `ir_text` written to a temporary file."""
    tool = tool_path(name)
    with tempfile.TemporaryDirectory(prefix="polymesh_jax_") as tmp:
        path = Path(tmp) / "exported.mlir"
        path.write_text(ir_text)
        process = subprocess.run([str(tool), str(path), *options], capture_output=True, text=True,
                                 timeout=timeout)
    if check and process.returncode != 0:
        raise ToolError(
            f"{name} {' '.join(options)} failed with exit code {process.returncode}:\n"
            f"{process.stderr.strip() or process.stdout.strip()}", process.stdout, process.stderr)
    return process


def propagate(ir_text: str, extra: Optional[Sequence[str]] = None, allow_unregistered: bool = False) -> str:
    """`polymesh-opt --polymesh-propagate` on `ir_text`: the propagated
    module, printed without attribute aliases. `allow_unregistered` is for
    exports with opaque ops."""
    options = ["--polymesh-propagate", "--mlir-print-local-scope", *(extra or [])]
    if allow_unregistered:
        options.append("--allow-unregistered-dialect")
    return run_tool("polymesh-opt", ir_text, options).stdout


def leaf_table(ir_text: str, allow_unregistered: bool = False) -> str:
    """The `--polymesh-print-leaves` table after propagation."""
    options = ["--polymesh-propagate", "--polymesh-print-leaves=output=-", "-o", "/dev/null"]
    if allow_unregistered:
        options.append("--allow-unregistered-dialect")
    return run_tool("polymesh-opt", ir_text, options).stdout
