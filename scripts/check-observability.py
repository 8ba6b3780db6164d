#!/usr/bin/env python3
"""Checks observability/ against docs/operations.md, for scripts/lint.sh.

- observability/dashboard.json is valid JSON; every panel queries the `${datasource}` data
  source and has at least one target with an expression; panel ids are unique.
- Every expression of the dashboard (panel targets and template variables) and of
  observability/rules.yml uses only metric names listed in the metrics table of
  docs/operations.md (a histogram's `_bucket`, `_sum` and `_count` included) or recorded by
  rules.yml.
- Dashboard variables appear in expressions only as `label=~"$var"`, so `.*` can stand for any
  of them; with that substitution every panel expression parses (promtool check rules).
- Every alert's runbook_url is `docs/operations.md#<anchor>` of a heading there.

Needs only python3 and promtool. Exit status 1 with one line per problem.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DASHBOARD = os.path.join(ROOT, "observability", "dashboard.json")
RULES = os.path.join(ROOT, "observability", "rules.yml")
OPERATIONS = os.path.join(ROOT, "docs", "operations.md")

problems = []


def problem(msg):
    problems.append(msg)


def documented_metrics():
    """Names in the metrics table of docs/operations.md: rows `| `name` | type | ...`."""
    names = set()
    row = re.compile(r"^\|\s*`(zklock_[a-z0-9_]+)`\s*\|\s*(counter|gauge|histogram)\s*\|")
    with open(OPERATIONS, encoding="utf-8") as f:
        for line in f:
            m = row.match(line)
            if not m:
                continue
            name, kind = m.groups()
            names.add(name)
            if kind == "histogram":
                names.update(name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def rules_file():
    """(records, alerts, exprs) of rules.yml, read without a YAML library: the file keeps one
    `- record:`/`- alert:` per rule, `expr:` on one line or as a `>-` block, and
    `runbook_url:` on one line."""
    records, alerts, exprs = [], [], []
    with open(RULES, encoding="utf-8") as f:
        lines = f.read().splitlines()
    i = 0
    current = None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^\s*- (record|alert):\s*(\S+)\s*$", line)
        if m:
            current = m.group(2)
            (records if m.group(1) == "record" else alerts).append(current)
        m = re.match(r"^(\s*)expr:\s*(.*)$", line)
        if m:
            indent, text = len(m.group(1)), m.group(2).strip()
            if text in (">-", ">", "|", "|-"):
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i].strip())
                    i += 1
                exprs.append((current, " ".join(block)))
                continue
            exprs.append((current, text))
        m = re.match(r'^\s*runbook_url:\s*"?([^"]*)"?\s*$', line)
        if m:
            url = m.group(1)
            if not url.startswith("docs/operations.md#"):
                problem(f"rules.yml: {current}: runbook_url {url!r} is not docs/operations.md#<anchor>")
            elif url.split("#", 1)[1] not in anchors():
                problem(f"rules.yml: {current}: runbook_url {url!r}: no such heading in docs/operations.md")
        i += 1
    if len(set(alerts)) != len(alerts):
        problem("rules.yml: an alert name is used twice")
    return records, alerts, exprs


_anchors = None


def anchors():
    """GitHub-style anchors of the headings of docs/operations.md."""
    global _anchors
    if _anchors is None:
        _anchors = set()
        with open(OPERATIONS, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
                if m:
                    slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
                    _anchors.add(slug)
    return _anchors


KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "inf", "nan", "atan2"}


def metric_names(expr):
    """The metric names an expression selects (identifiers that are not functions, keywords,
    label names or durations)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = []
    for m in re.finditer(r"(?<![\w.:])([A-Za-z_:][\w:]*)", text):
        word = m.group(1)
        rest = text[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue
        names.append(word)
    return names


VAR_USE = re.compile(r'\b\w+=~"\$\{?(\w+)\}?"')


def substitute_variables(where, expr, variables):
    """`expr` with each `label=~"$var"` given `.*`; any other use of a variable is a problem."""
    for name in VAR_USE.findall(expr):
        if name not in variables:
            problem(f"{where}: uses ${name}, which is not a dashboard variable")
    plain = VAR_USE.sub(lambda m: m.group(0).split("=~")[0] + '=~".*"', expr)
    if "$" in plain:
        problem(f"{where}: a variable outside a `label=~\"$var\"` matcher: {expr}")
    return plain


def check_names(where, expr, allowed):
    names = metric_names(expr)
    if not names:
        problem(f"{where}: selects no metric: {expr}")
    for name in names:
        if name not in allowed:
            problem(f"{where}: {name} is neither in the metrics table of docs/operations.md nor recorded by rules.yml")


def main():
    documented = documented_metrics()
    if not documented:
        problem("docs/operations.md: no metrics table (rows like | `zklock_…` | counter | …)")
    records, alerts, rule_exprs = rules_file()
    allowed = documented | set(records)
    for rule, expr in rule_exprs:
        check_names(f"rules.yml: {rule}", expr, allowed)

    try:
        with open(DASHBOARD, encoding="utf-8") as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        problem(f"dashboard.json: not valid JSON: {e}")
        return

    variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        query = v.get("query")
        query = query.get("query", "") if isinstance(query, dict) else (query or "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
        if not m:
            problem(f"dashboard.json: variable {v.get('name')}: not a label_values(metric, label) query: {query}")
            continue
        where = f"dashboard.json: variable {v.get('name')}"
        check_names(where, substitute_variables(where, m.group(1), variables), allowed)

    panels = []
    for panel in dashboard.get("panels", []):
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    ids = [p.get("id") for p in panels]
    if len(set(ids)) != len(ids):
        problem("dashboard.json: panel ids are not unique")

    parse_checks = []
    for panel in panels:
        if panel.get("type") == "row":
            continue
        title = panel.get("title", "?")
        where = f"dashboard.json: panel {title!r}"
        if (panel.get("datasource") or {}).get("uid") != "${datasource}":
            problem(f"{where}: data source is not ${{datasource}}")
        targets = panel.get("targets") or []
        if not targets or not all(t.get("expr") for t in targets):
            problem(f"{where}: every panel needs targets with an expr")
        for target in targets:
            expr = target.get("expr", "")
            plain = substitute_variables(where, expr, variables)
            check_names(where, plain, allowed)
            parse_checks.append((where, plain))

    # Let promtool parse every panel expression, as recording rules of a scratch file.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "panels.yml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("groups:\n  - name: panels\n    rules:\n")
            for n, (_, expr) in enumerate(parse_checks):
                f.write(f"      - record: panel:expr_{n}\n        expr: {json.dumps(expr)}\n")
        run = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
        if run.returncode != 0:
            problem("dashboard.json: promtool cannot parse a panel expression:\n" + run.stdout + run.stderr)

    print(f"check-observability: {len(parse_checks)} panel expressions, {len(records)} recording rules, "
          f"{len(alerts)} alerts against {len(documented)} documented metric names")


if __name__ == "__main__":
    main()
    for p in problems:
        print(f"check-observability: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)
