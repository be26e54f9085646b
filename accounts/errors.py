"""Errors of the accounts package.

::

    AccountError
    ├── InvalidAccount     (remote: a bad user id, name, role, scope or expiry, or a client
    │                       secret that may not be minted; 422)
    ├── UserExists         (the user already belongs to the tenant; 409)
    ├── UserNotFound       (no such user in the tenant; 404)
    ├── TokenNotFound      (no such token for this caller; 404)
    ├── LastOwner          (the tenant would be left without an enabled owner; 409)
    └── AccountsUnavailable (local/infrastructure: the store cannot be reached; retryable)

Every error carries a stable ``code`` (the HTTP API's and the CLI's).
"""

from __future__ import annotations


class AccountError(Exception):
    code = "account_error"
    retryable = False


class InvalidAccount(AccountError):
    code = "invalid_account"


class UserExists(AccountError):
    code = "user_exists"


class UserNotFound(AccountError):
    code = "user_not_found"


class TokenNotFound(AccountError):
    code = "token_not_found"


class LastOwner(AccountError):
    code = "last_owner"


class AccountsUnavailable(AccountError):
    code = "accounts_unavailable"
    retryable = True
