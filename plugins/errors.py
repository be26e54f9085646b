"""Errors raised by plugins.

```
PluginError                      base; ``retryable`` says whether trying again may succeed
├── PluginTimeout                a call took longer than its deadline (retryable)
├── ProviderError                a remote provider answered with an error (status, retryable)
└── PluginUnavailable            a model or library could not be loaded (not retryable)
```

Third-party exceptions are mapped to these at the plugin boundary (``raise … from e``).
"""

from __future__ import annotations


class PluginError(Exception):
    """Base of all plugin errors."""

    code = "plugin_error"

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class PluginTimeout(PluginError):
    code = "plugin_timeout"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


class ProviderError(PluginError):
    code = "provider_error"

    def __init__(self, message: str, *, status: int | None = None, retryable: bool) -> None:
        super().__init__(message, retryable=retryable)
        self.status = status


class PluginUnavailable(PluginError):
    code = "plugin_unavailable"
