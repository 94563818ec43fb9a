"""Finding and running Polymesh's command-line tools."""

from __future__ import annotations

import os
import re
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
            f"{errors_first(process.stderr.strip() or process.stdout.strip())}", process.stdout, process.stderr)
    return process


_DIAGNOSTIC = re.compile(r"^(?:\S.*?:\d+:\d+: |)(error|warning|note|remark): ")


def errors_first(text: str) -> str:
    """A tool's diagnostics with the errors (and their notes) first, then
    the warnings, so that the reason for a failure is not buried under
    warnings printed before it."""
    diagnostics: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _DIAGNOSTIC.match(line)
        if match or not diagnostics:
            kind = match.group(1) if match else "other"
            # A note belongs to the diagnostic before it.
            if kind == "note" and diagnostics:
                diagnostics[-1][1].append(line)
                continue
            diagnostics.append((kind, [line]))
        else:
            diagnostics[-1][1].append(line)
    errors = [lines for kind, lines in diagnostics if kind == "error"]
    others = [lines for kind, lines in diagnostics if kind != "error"]
    if not errors or not others:
        return text
    warnings = sum(1 for kind, _ in diagnostics if kind == "warning")
    parts = ["\n".join(lines) for lines in errors]
    parts.append(f"({warnings} warning{'s' if warnings != 1 else ''} before the error:)")
    parts.extend("\n".join(lines) for lines in others)
    return "\n".join(parts)


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
