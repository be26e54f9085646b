"""Plugins stand on their own floor: nothing under ``plugins/`` imports the pipeline (the audio
vocabulary lives in ``plugins/audio.py``) or a domain package (the text analysis and the
embedder the knowledge base and the brain share live in ``plugins/text.py`` and
``plugins/embedding.py``), so a plugin can be built and tested alone."""

from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
ABOVE = ("pipeline", "runtime", "journal", "knowledge", "memory", "tools", "accounts", "storage")
"""The packages built on plugins."""


def test_no_plugin_module_imports_the_pipeline_or_a_domain_package() -> None:
    offenders = []
    for path in sorted(PLUGINS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            offenders += [f"{path.relative_to(PLUGINS)}: {n}" for n in names
                          if n.split(".")[0] in ABOVE]  # fmt: skip
    assert not offenders, offenders
