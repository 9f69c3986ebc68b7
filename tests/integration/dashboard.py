"""The Grafana dashboard's queries, read with a real PromQL parser: what each one selects and groups by."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import promql_parser

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "sie.json"
# Grafana's range variables are not PromQL; any valid duration parses the same way.
RANGE_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


@dataclass
class Query:
    where: str  # the panel's title, or the variable's name
    expr: str
    # (metric name, label names its matchers use) of every vector selector in the expression
    selectors: list[tuple[str, set[str]]] = field(default_factory=list)
    # (labels an aggregation groups by, metric names under it) of every `by (...)` aggregation
    groupings: list[tuple[set[str], set[str]]] = field(default_factory=list)
    label: str | None = None  # label_values(..., label): the label a variable lists


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panels(panel)


def queries(dashboard: dict[str, Any]) -> list[Query]:
    found = [
        parse(panel["title"], target["expr"])
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = _LABEL_VALUES.match(variable["query"]["query"])
            assert match, variable["query"]
            query = parse(variable["name"], match["selector"])
            query.label = match["label"]
            found.append(query)
    return found


def parse(where: str, expr: str) -> Query:
    text = expr
    for variable, duration in RANGE_VARIABLES.items():
        text = text.replace(variable, duration)
    query = Query(where, expr)
    _walk(promql_parser.parse(text), query)
    return query


def _walk(node: Any, query: Query) -> set[str]:
    """Record `node`'s selectors and groupings into `query`; return the metric names under it."""
    if isinstance(node, promql_parser.VectorSelector):
        labels = {m.name for m in node.matchers.matchers} | {
            m.name for group in node.matchers.or_matchers for m in group
        }
        query.selectors.append((node.name, labels - {"__name__"}))
        return {node.name}
    if isinstance(node, promql_parser.MatrixSelector):
        return _walk(node.vector_selector, query)
    if isinstance(node, promql_parser.AggregateExpr):
        names = _walk(node.expr, query)
        if node.param is not None:
            _walk(node.param, query)
        if node.modifier is not None:
            assert node.modifier.type == promql_parser.AggModifierType.By, f"{query.where}: use `by`"
            query.groupings.append((set(node.modifier.labels), names))
        return names
    if isinstance(node, promql_parser.BinaryExpr):
        return _walk(node.lhs, query) | _walk(node.rhs, query)
    if isinstance(node, promql_parser.Call):
        return set().union(*(_walk(arg, query) for arg in node.args))
    if isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr):
        return _walk(node.expr, query)
    assert isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral), type(node)
    return set()
