"""The knowledge base (SPEC KB-1..KB-5): documents per (tenant, user), role bindings, hybrid
lexical + semantic retrieval, and the ``knowledge_search`` tool.

- ``knowledge.store``: the store contract, ``InMemoryKnowledgeStore``;
  ``knowledge.postgres_store``: ``PostgresKnowledgeStore``.
- ``knowledge.base``: ``KnowledgeBase`` — validation, chunking, embedding at ingest, cached
  search indexes.
- ``knowledge.text``: chunking and lexical terms; ``knowledge.retrieval``: the index and ranking;
  ``knowledge.embedding``: the offline embedder.
- ``knowledge.tool``: ``make_knowledge_tool``.
"""
