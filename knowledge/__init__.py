"""The knowledge base (SPEC KB-1..KB-5): documents per (tenant, user), role bindings, hybrid
lexical + semantic retrieval, and the ``knowledge_search`` tool.

- ``knowledge.store``: the store contract, ``InMemoryKnowledgeStore``;
  ``knowledge.postgres_store``: ``PostgresKnowledgeStore``.
- ``knowledge.base``: ``KnowledgeBase`` — validation, chunking, embedding at ingest, cached
  search indexes.
- ``knowledge.retrieval``: the index and ranking, over ``plugins.text`` (chunking and lexical
  terms) and ``plugins.embedding`` (the offline embedder), which the brain uses too.
- ``knowledge.tool``: ``make_knowledge_tool``.
"""
