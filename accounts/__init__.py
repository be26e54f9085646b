"""Accounts: tenants, users, memberships, bearer tokens and client secrets (SPEC ACC-1, ACC-2).

``accounts.model`` holds the values, ``accounts.store`` the rules and the in-memory store,
``accounts.postgres_store`` the same contract on PostgreSQL (``accounts/migrations``).
"""
