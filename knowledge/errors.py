"""Knowledge base errors.

::

    KnowledgeError                 code, retryable
    ├── InvalidDocument            remote: bad input (empty name/text, wrong file type)
    ├── LimitExceeded              remote: a documented limit (size, name length, count, query)
    ├── DocumentNotFound           remote: no such document for this user
    └── KnowledgeUnavailable       local: the store cannot be reached (retryable)
"""

from __future__ import annotations


class KnowledgeError(Exception):
    code = "knowledge_error"
    retryable = False

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidDocument(KnowledgeError):
    code = "invalid_document"


class LimitExceeded(KnowledgeError):
    code = "limit_exceeded"


class DocumentNotFound(KnowledgeError):
    code = "document_not_found"


class KnowledgeUnavailable(KnowledgeError):
    code = "knowledge_unavailable"
    retryable = True
