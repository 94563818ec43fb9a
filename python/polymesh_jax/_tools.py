"""Finding and running Polymesh's command-line tools."""

from __future__ import annotations

import atexit
import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
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


class _Server:
    """One `polymesh-opt --serve OPTIONS` process, kept for every input with
    those options: a process start costs about 23 ms (the dynamic loader
    binding libMLIR.so), resolving a jitted function about 5 ms. Requests
    are "<n>\\n" and n bytes of IR; responses "<exit code> <output bytes>
    <diagnostic bytes>\\n" and those bytes (polymesh-opt.cpp)."""

    def __init__(self, tool: Path, options: Sequence[str]):
        self.process = subprocess.Popen([str(tool), "--serve", *options], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lock = threading.Lock()
        self.pending = b""

    def _read(self, size: int, deadline: float, line: bool = False) -> bytes:
        """`size` bytes of the response (or through the newline with
        `line`); raises TimeoutError past `deadline`, EOFError when the
        server is gone."""
        fd = self.process.stdout.fileno()
        while (b"\n" not in self.pending) if line else (len(self.pending) < size):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError
            self.pending += chunk
        if line:
            size = self.pending.index(b"\n") + 1
        data, self.pending = self.pending[:size], self.pending[size:]
        return data

    def run(self, args: list[str], ir_text: str, timeout: float) -> subprocess.CompletedProcess:
        data = ir_text.encode()
        deadline = time.monotonic() + timeout
        with self.lock:
            self.process.stdin.write(b"%d\n" % len(data) + data)
            self.process.stdin.flush()
            code, out, err = (int(v) for v in self._read(0, deadline, line=True).split())
            stdout = self._read(out, deadline).decode(errors="replace")
            stderr = self._read(err, deadline).decode(errors="replace")
        return subprocess.CompletedProcess(args, code, stdout, stderr)

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a dead server is gone either way
            self.process.kill()


_SERVERS: dict[tuple[str, tuple[str, ...]], _Server] = {}
_SERVERS_LOCK = threading.Lock()


def _close_servers() -> None:
    with _SERVERS_LOCK:
        for server in _SERVERS.values():
            server.close()
        _SERVERS.clear()


atexit.register(_close_servers)


def _serve(tool: Path, ir_text: str, options: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    key = (str(tool), tuple(options))
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None or server.process.poll() is not None:
            server = _SERVERS[key] = _Server(tool, options)
    args = [str(tool), "exported.mlir", *options]
    try:
        return server.run(args, ir_text, timeout)
    except TimeoutError:
        with _SERVERS_LOCK:
            _SERVERS.pop(key, None)
        server.process.kill()
        raise subprocess.TimeoutExpired(args, timeout) from None
    except (EOFError, BrokenPipeError, ValueError):
        # The server died (a crash on this input): say so as a process would.
        with _SERVERS_LOCK:
            _SERVERS.pop(key, None)
        code = server.process.wait()
        stderr = server.process.stderr.read().decode(errors="replace")
        return subprocess.CompletedProcess(args, code if code != 0 else 1, "", stderr)


def run_tool(name: str, ir_text: str, options: Sequence[str], timeout: float = 300.0,
             check: bool = True) -> subprocess.CompletedProcess:
    """Runs `name FILE options...` on `ir_text`: polymesh-opt through a
    kept `--serve` process (POLYMESH_JAX_SERVE=0 starts one per call),
    other tools on the text written to a temporary file."""
    tool = tool_path(name)
    if name == "polymesh-opt" and os.environ.get("POLYMESH_JAX_SERVE", "1") != "0":
        process = _serve(tool, ir_text, options, timeout)
    else:
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
