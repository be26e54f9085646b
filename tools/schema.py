"""Tool parameters: the JSON-schema subset function calls use, checked as a schema.

Theory of operation
-------------------
1. A tool's ``parameters`` is a JSON schema of ``type: object``. Only the keywords function
   calling needs are accepted: ``type`` (object, array, string, number, integer, boolean,
   null), ``description``, ``title``, ``properties``, ``required``, ``items``, ``enum``,
   ``additionalProperties`` (a boolean), ``minimum``/``maximum``, ``minLength``/``maxLength``,
   ``minItems``/``maxItems``, ``default``. Anything else (``$ref``, ``oneOf``, a format we do
   not check) is refused, so what a person reads is all the model and the executor obey.
2. A schema is bounded: at most ``MAX_SCHEMA_CHARS`` as JSON, ``MAX_DEPTH`` levels, and every
   ``required`` name must be a property.
3. ``check_arguments`` validates a call against such a schema: types, required properties,
   unknown properties when ``additionalProperties`` is false, enums, numeric and length
   bounds. The first problem is reported by its path (``$.order.id``), never with the value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tools.errors import InvalidArguments, InvalidTool

MAX_SCHEMA_CHARS = 16_384
MAX_DEPTH = 6
TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
KEYWORDS = frozenset({
    "type", "description", "title", "properties", "required", "items", "enum",
    "additionalProperties", "minimum", "maximum", "minLength", "maxLength", "minItems",
    "maxItems", "default",
})  # fmt: skip


def check_parameters_schema(schema: Any) -> dict[str, Any]:
    """``schema`` when it is an object schema of the subset (rules 1–2), else ``InvalidTool``."""
    if not isinstance(schema, Mapping):
        raise InvalidTool("parameters must be a JSON object schema")
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError) as e:
        raise InvalidTool("parameters must be JSON") from e
    if size > MAX_SCHEMA_CHARS:
        raise InvalidTool(f"parameters must be at most {MAX_SCHEMA_CHARS} characters as JSON")
    if schema.get("type") != "object":
        raise InvalidTool("parameters must have type 'object'")
    _check(schema, "$", 0)
    return dict(schema)


def _check(schema: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise InvalidTool(f"parameters nest deeper than {MAX_DEPTH} levels at {path}")
    if not isinstance(schema, Mapping):
        raise InvalidTool(f"{path}: a schema must be an object")
    unknown = sorted(set(schema) - KEYWORDS)
    if unknown:
        raise InvalidTool(f"{path}: unsupported keyword {unknown[0]!r}")
    kind = schema.get("type")
    if kind not in TYPES:
        raise InvalidTool(f"{path}: type must be one of {sorted(TYPES)}")
    for word in ("description", "title"):
        if word in schema and not isinstance(schema[word], str):
            raise InvalidTool(f"{path}: {word} must be a string")
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        raise InvalidTool(f"{path}: enum must be a non-empty list")
    for word in ("minimum", "maximum"):
        if word in schema and not _is_number(schema[word]):
            raise InvalidTool(f"{path}: {word} must be a number")
    for word in ("minLength", "maxLength", "minItems", "maxItems"):
        value = schema.get(word)
        if word in schema and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise InvalidTool(f"{path}: {word} must be a non-negative integer")
    if kind == "object":
        properties = schema.get("properties", {})
        if not isinstance(properties, Mapping):
            raise InvalidTool(f"{path}: properties must be an object")
        for name, sub in properties.items():
            _check(sub, f"{path}.{name}", depth + 1)
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise InvalidTool(f"{path}: required must be a list of names")
        missing = [r for r in required if r not in properties]
        if missing:
            raise InvalidTool(f"{path}: required names {missing[0]!r}, which is no property")
        extra = schema.get("additionalProperties", True)
        if not isinstance(extra, bool):
            raise InvalidTool(f"{path}: additionalProperties must be true or false")
    elif "properties" in schema or "required" in schema:
        raise InvalidTool(f"{path}: properties and required belong to objects")
    if kind == "array":
        if "items" in schema:
            _check(schema["items"], f"{path}[]", depth + 1)
    elif "items" in schema:
        raise InvalidTool(f"{path}: items belongs to arrays")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return _is_number(value)
    if kind == "boolean":
        return isinstance(value, bool)
    return value is None


def check_arguments(schema: Mapping[str, Any], arguments: Any) -> None:
    """Raise ``InvalidArguments`` naming the first path that does not fit (rule 3)."""
    problem = _problem(schema, arguments, "$")
    if problem is not None:
        raise InvalidArguments(problem)


def _problem(schema: Mapping[str, Any], value: Any, path: str) -> str | None:
    kind = schema["type"]
    if not _type_ok(kind, value):
        return f"{path} must be of type {kind}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} must be one of the declared values"
    if _is_number(value):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path} is below the minimum"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path} is above the maximum"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{path} is shorter than allowed"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{path} is longer than allowed"
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return f"{path} has fewer items than allowed"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{path} has more items than allowed"
        if "items" in schema:
            for index, item in enumerate(value):
                found = _problem(schema["items"], item, f"{path}[{index}]")
                if found is not None:
                    return found
    if isinstance(value, Mapping):
        properties: Mapping[str, Any] = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                return f"{path}.{name} is required"
        for name, item in value.items():
            if name in properties:
                found = _problem(properties[name], item, f"{path}.{name}")
                if found is not None:
                    return found
            elif schema.get("additionalProperties", True) is False:
                return f"{path}.{name} is not a declared property"
    return None
