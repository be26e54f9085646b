"""Tool permissions (SPEC TOOL-1…TOOL-3): which tools a role has, and whether a call may run.

- ``tools.capability``: what a call asks for (action, target, exact arguments).
- ``tools.registry``: built-in, HTTP and client tool declarations; a call becomes a capability.
- ``tools.schema``: the JSON-schema subset tool parameters use, checked as a schema.
- ``tools.http_tool``: the executor of HTTP tools (allowlisted hosts, secrets, bounds).
- ``tools.grants`` / ``tools.postgres_grants``: stored decisions and the grant policy.
- ``tools.rules`` / ``tools.postgres_rules``: natural-language rules and cached judgements.
- ``tools.judge``: the rules judge (a language model or a decision model), quotes checked in code.
- ``tools.decide``: grants first, then a cached judgement, then the judge.
"""
