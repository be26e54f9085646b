"""Minimal structural JSON schemas of the deployment files' kinds, written here.

No Kubernetes or Compose schema is available offline on our machines (the ``kubernetes``
package is not installed, no schema files are on disk), so these describe only what our files
use: the required fields, their types, and — where a typo would silently do nothing (a probe's
or a container's fields) — no unknown keys. They are a floor, not the API's full schemas.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STRING: Schema = {"type": "string", "minLength": 1}
PORT: Schema = {"type": "integer", "minimum": 1, "maximum": 65535}
NAMED_PORT: Schema = {"anyOf": [PORT, {"type": "string", "pattern": "^[a-z0-9-]{1,15}$"}]}
LABELS: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
QUANTITY: Schema = {"anyOf": [{"type": "string", "pattern": r"^[0-9.]+(m|Ki|Mi|Gi|Ti)?$"},
                              {"type": "number"}]}  # fmt: skip


def closed(properties: dict[str, Schema], required: list[str] | None = None) -> Schema:
    """An object with exactly these optional properties (and ``required`` ones)."""
    return {
        "type": "object",
        "properties": properties,
        "required": required or [],
        "additionalProperties": False,
    }


METADATA = closed(
    {"name": STRING, "namespace": STRING, "labels": LABELS, "annotations": LABELS}, ["name"]
)
SELECTOR = closed({"matchLabels": LABELS}, ["matchLabels"])

HTTP_GET = closed({"path": {"type": "string", "pattern": "^/"}, "port": NAMED_PORT}, ["port"])
PROBE = closed(
    {
        "httpGet": HTTP_GET,
        "initialDelaySeconds": {"type": "integer", "minimum": 0},
        "periodSeconds": {"type": "integer", "minimum": 1},
        "timeoutSeconds": {"type": "integer", "minimum": 1},
        "failureThreshold": {"type": "integer", "minimum": 1},
        "successThreshold": {"type": "integer", "minimum": 1},
    },
    ["httpGet"],
)
EXEC = closed({"command": {"type": "array", "items": {"type": "string"}, "minItems": 1}})
ENV_VAR = closed(
    {
        "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "value": {"type": "string"},
        "valueFrom": closed(
            {"secretKeyRef": closed({"name": STRING, "key": STRING}, ["name", "key"])},
            ["secretKeyRef"],
        ),
    },
    ["name"],
)
CONTAINER = closed(
    {
        "name": STRING,
        "image": STRING,
        "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
        "command": {"type": "array", "items": {"type": "string"}},
        "args": {"type": "array", "items": {"type": "string"}},
        "ports": {
            "type": "array",
            "items": closed(
                {"name": STRING, "containerPort": PORT, "protocol": {"enum": ["TCP", "UDP"]}},
                ["containerPort"],
            ),
        },
        "env": {"type": "array", "items": ENV_VAR},
        "resources": closed(
            {
                "requests": {"type": "object", "additionalProperties": QUANTITY},
                "limits": {"type": "object", "additionalProperties": QUANTITY},
            }
        ),
        "startupProbe": PROBE,
        "readinessProbe": PROBE,
        "livenessProbe": PROBE,
        "lifecycle": closed({"preStop": closed({"exec": EXEC}, ["exec"])}),
        "securityContext": closed(
            {
                "allowPrivilegeEscalation": {"type": "boolean"},
                "readOnlyRootFilesystem": {"type": "boolean"},
                "capabilities": closed({"drop": {"type": "array", "items": STRING}}),
            }
        ),
        "volumeMounts": {
            "type": "array",
            "items": closed({"name": STRING, "mountPath": STRING}, ["name", "mountPath"]),
        },
    },
    ["name", "image"],
)
POD_SPEC = closed(
    {
        "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
        "securityContext": closed(
            {
                "runAsNonRoot": {"type": "boolean"},
                "runAsUser": {"type": "integer", "minimum": 1},
                "runAsGroup": {"type": "integer", "minimum": 1},
                "fsGroup": {"type": "integer", "minimum": 1},
            }
        ),
        "containers": {"type": "array", "items": CONTAINER, "minItems": 1},
        "volumes": {
            "type": "array",
            "items": closed({"name": STRING, "emptyDir": {"type": "object"}}, ["name"]),
        },
    },
    ["containers"],
)


def kind(api_version: str, name: str, spec: Schema) -> Schema:
    return closed(
        {
            "apiVersion": {"const": api_version},
            "kind": {"const": name},
            "metadata": METADATA,
            "spec": spec,
        },
        ["apiVersion", "kind", "metadata", "spec"],
    )


DEPLOYMENT = kind(
    "apps/v1",
    "Deployment",
    closed(
        {
            "replicas": {"type": "integer", "minimum": 0},
            "selector": SELECTOR,
            "strategy": closed(
                {
                    "type": {"enum": ["RollingUpdate", "Recreate"]},
                    "rollingUpdate": closed(
                        {"maxSurge": NAMED_PORT, "maxUnavailable": {"type": "integer"}}
                    ),
                }
            ),
            "template": closed(
                {"metadata": closed({"labels": LABELS}), "spec": POD_SPEC}, ["metadata", "spec"]
            ),  # fmt: skip
        },
        ["selector", "template"],
    ),
)
SERVICE = kind(
    "v1",
    "Service",
    closed(
        {
            "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
            "selector": LABELS,
            "ports": {
                "type": "array",
                "minItems": 1,
                "items": closed(
                    {
                        "name": STRING,
                        "port": PORT,
                        "targetPort": NAMED_PORT,
                        "protocol": {"enum": ["TCP", "UDP"]},
                    },
                    ["port"],
                ),
            },
        },
        ["selector", "ports"],
    ),
)
METRIC_TARGET = closed(
    {"type": {"enum": ["AverageValue", "Value", "Utilization"]}, "averageValue": QUANTITY},
    ["type"],
)
SCALING_POLICY = closed(
    {
        "type": {"enum": ["Pods", "Percent"]},
        "value": {"type": "integer", "minimum": 1},
        "periodSeconds": {"type": "integer", "minimum": 1},
    },
    ["type", "value", "periodSeconds"],
)
HPA = kind(
    "autoscaling/v2",
    "HorizontalPodAutoscaler",
    closed(
        {
            "scaleTargetRef": closed(
                {"apiVersion": STRING, "kind": STRING, "name": STRING}, ["kind", "name"]
            ),
            "minReplicas": {"type": "integer", "minimum": 1},
            "maxReplicas": {"type": "integer", "minimum": 1},
            "metrics": {
                "type": "array",
                "items": closed(
                    {
                        "type": {"const": "Pods"},
                        "pods": closed(
                            {"metric": closed({"name": STRING}, ["name"]), "target": METRIC_TARGET},
                            ["metric", "target"],
                        ),
                    },
                    ["type", "pods"],
                ),
            },
            "behavior": closed(
                {
                    "scaleDown": closed(
                        {
                            "stabilizationWindowSeconds": {"type": "integer", "minimum": 0},
                            "policies": {"type": "array", "items": SCALING_POLICY},
                        }
                    )
                }
            ),
        },
        ["scaleTargetRef", "maxReplicas"],
    ),
)
PDB = kind(
    "policy/v1",
    "PodDisruptionBudget",
    {
        "type": "object",
        "properties": {
            "maxUnavailable": NAMED_PORT,
            "minAvailable": NAMED_PORT,
            "selector": SELECTOR,
        },
        "required": ["selector"],
        "additionalProperties": False,
        "oneOf": [{"required": ["maxUnavailable"]}, {"required": ["minAvailable"]}],
    },
)
KUSTOMIZATION = closed(
    {
        "apiVersion": {"const": "kustomize.config.k8s.io/v1beta1"},
        "kind": {"const": "Kustomization"},
        "resources": {"type": "array", "items": STRING, "minItems": 1},
    },
    ["apiVersion", "kind", "resources"],
)
KINDS: dict[str, Schema] = {
    "Deployment": DEPLOYMENT,
    "Service": SERVICE,
    "HorizontalPodAutoscaler": HPA,
    "PodDisruptionBudget": PDB,
    "Kustomization": KUSTOMIZATION,
}

COMPOSE_SERVICE = closed(
    {
        "image": STRING,
        "build": closed({"context": STRING, "dockerfile": STRING}, ["context"]),
        "command": {"type": "array", "items": {"type": "string"}},
        "environment": {
            "type": "object",
            "additionalProperties": {"type": ["string", "number", "boolean"]},
        },
        "volumes": {"type": "array", "items": {"type": "string", "pattern": "^[^:]+:/"}},
        "ports": {"type": "array", "items": {"type": "string", "pattern": r"^\d+:\d+$"}},
        "expose": {"type": "array", "items": {"type": "string", "pattern": r"^\d+$"}},
        "depends_on": {
            "anyOf": [
                {"type": "array", "items": STRING},
                {
                    "type": "object",
                    "additionalProperties": closed(
                        {"condition": {"enum": ["service_started", "service_healthy"]}}
                    ),
                },
            ]
        },
        "healthcheck": closed(
            {
                "test": {"type": "array", "items": {"type": "string"}},
                "interval": STRING,
                "timeout": STRING,
                "retries": {"type": "integer", "minimum": 1},
            },
            ["test"],
        ),
        "deploy": closed({"replicas": {"type": "integer", "minimum": 1}}),
        "profiles": {"type": "array", "items": STRING},
        "stop_grace_period": {"type": "string", "pattern": r"^\d+s$"},
        "restart": {"enum": ["no", "always", "on-failure", "unless-stopped"]},
    },
    ["image"],
)
COMPOSE = closed(
    {
        "name": STRING,
        "services": {"type": "object", "additionalProperties": COMPOSE_SERVICE, "minProperties": 1},
        "volumes": {"type": "object", "additionalProperties": {"type": ["object", "null"]}},
    },
    ["services"],
)
