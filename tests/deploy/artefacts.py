"""Reading the files under deploy/ (and the Dockerfile) the way the tests look at them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pulsar_lookup_gateway.listeners.config.conf_file import RawConfig, parse_properties
from pulsar_lookup_gateway.listeners.config.model import GatewayConfig, validate_raw
from tests.processes import ROOT

DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
DASHBOARD = DEPLOY / "grafana" / "pulsar-lookup-gateway.json"
#: Where the image and the Deployment put the config (the Dockerfile's ENTRYPOINT names it).
CONFIG_PATH = "/etc/pulsar-lookup-gateway/gateway.conf"


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kubernetes_objects() -> list[tuple[Path, dict[str, Any]]]:
    """Every object of deploy/kubernetes/*.yaml but the kustomization, with its file."""
    return [
        (path, doc)
        for path in sorted(KUBERNETES.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in yaml_documents(path)
    ]


def kubernetes_object(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        doc
        for _, doc in kubernetes_objects()
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name}"
    return found[0]


def configmap_text() -> str:
    """gateway.conf as the ConfigMap holds it."""
    return str(kubernetes_object("ConfigMap")["data"]["gateway.conf"])


def configmap_raw() -> RawConfig:
    return parse_properties(configmap_text(), "configmap.yaml gateway.conf")


def configmap_config() -> GatewayConfig:
    return validate_raw(configmap_raw()).config


def files_named(raw: RawConfig) -> dict[str, str]:
    """The config keys whose value is a file the gateway reads (a path or a file:// key URL)."""
    return {
        key: value.removeprefix("file://")
        for key, value in raw.values.items()
        if value.startswith(("/", "file:///"))
    }


# -- Dockerfile ---------------------------------------------------------------------------------

DOCKERFILE = ROOT / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    stage: int  # 0 for the first FROM, ...; -1 before it (ARG)
    keyword: str  # upper case
    arguments: str


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """The instructions, continuation lines joined and comments dropped (no heredocs)."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, arguments = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(stage, keyword, arguments.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def exec_form(arguments: str) -> list[str]:
    """The JSON array of an exec-form CMD / ENTRYPOINT / HEALTHCHECK CMD."""
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(item, str) for item in value), arguments
    return value


# -- Grafana ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    panel: str
    expr: str


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows included."""
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(board: dict[str, Any]) -> list[Query]:
    """The PromQL of every panel target and of every query variable."""
    queries = [
        Query(panel["title"], target["expr"])
        for panel in panels(board)
        for target in panel.get("targets", [])
    ]
    for variable in board.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            queries.append(Query(f"${variable['name']}", text))
    return queries


#: What the dashboard's variables stand for when a query is sent to Prometheus directly.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "$job": ".*",
    "$instance": ".*",
}


def expand_variables(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a Grafana variable the tests do not know: {expr}"
    return expr


_LABEL_VALUES = re.compile(
    r"^label_values\(\s*(?:(?P<selector>[^,]+?)\s*,)?\s*(?P<label>\w+)\s*\)$"
)


def label_values_call(expr: str) -> tuple[str | None, str] | None:
    """A Grafana `label_values([selector,] label)` variable query as (selector, label); None
    for PromQL."""
    match = _LABEL_VALUES.match(expr.strip())
    return (match["selector"], match["label"]) if match else None
