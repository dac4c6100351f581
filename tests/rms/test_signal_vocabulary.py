"""Every rule about signal types lives in ``rms.policy``: which types exist, their kind, which
count as "used" and which have an aggregate total. Everything else derives from it, so adding a
signal type is an edit of the policy (plus the migration ``makemigrations`` writes for a new
total column). This file fails when another module spells a signal type name itself.
"""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime
from pathlib import Path

from feedback import aggregates
from feedback.utility import is_used
from rms import policy

ROOT = Path(__file__).resolve().parents[2]
#: The shipped code: the service's apps and the Python client.
PACKAGES = (
    "rms",
    "feedback",
    "taskruns",
    "analysis",
    "dashboard",
    "delivery",
    "otlp",
    "clients/python/src",
)
#: The policy says it; the client's copy is pinned to it by tests/client/test_vocabulary.py.
ALLOWED = {Path("rms/policy.py"), Path("clients/python/src/rms_client/vocabulary.py")}


def _python_modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel in ALLOWED or "migrations" in rel.parts or "tests" in rel.parts:
                continue
            yield rel


def _string_literals(tree: ast.AST):
    """Every string constant but the names an ``__all__`` exports (a name, not a value)."""
    exported = {
        id(element)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        and isinstance(node.value, ast.List | ast.Tuple)
        for element in node.value.elts
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in exported
        ):
            yield node.lineno, node.value


def test_the_scan_sees_the_shipped_modules():
    modules = set(_python_modules())
    assert Path("feedback/aggregates.py") in modules
    assert Path("clients/python/src/rms_client/recorder.py") in modules
    assert Path("rms/policy.py") not in modules


def test_no_module_but_the_policy_spells_a_signal_type():
    """No string literal equal to a signal type in a shipped module, and no quoted one in a
    template (a comparison such as ``{% if s == "CORRECTED" %}``); prose may name them."""
    names = set(policy.SIGNAL_TYPES)
    found = [
        f"{rel}:{line}: {value!r}"
        for rel in _python_modules()
        for line, value in _string_literals(ast.parse((ROOT / rel).read_text(), str(rel)))
        if value in names
    ]
    quoted = re.compile("[\"'](" + "|".join(map(re.escape, names)) + ")[\"']")
    found += [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "templates").rglob("*.html"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if quoted.search(line)
    ]
    assert found == [], "spell these with rms.policy's constants and tables:\n" + "\n".join(found)


def test_usage_and_totals_follow_the_policys_used_signals():
    """One injection and one signal of each type with a total: the usage ratio counts it and the
    session counts as a use exactly for the policy's "used" types (SPEC §8, §12)."""
    ts = datetime(2026, 6, 1, tzinfo=UTC)
    for signal_type, total in policy.TOTAL_FIELDS.items():
        agg = aggregates.Aggregate()
        aggregates.on_injection(agg, 10)
        aggregates.on_signal(agg, signal_type, "unused", 0.0, ts)
        used = signal_type in policy.USED_SIGNALS
        assert getattr(agg, total) == 1
        assert agg.usage_ratio == (1.0 if used else 0.0), signal_type
        assert is_used([signal_type]) is used
    assert {policy.REFERENCED, policy.CONFIRMED, policy.TASK_COMPLETED_WITH} == policy.USED_SIGNALS
