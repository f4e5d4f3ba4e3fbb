"""IAM policy evaluation, as EC2 and S3 do it for a role's calls: actions, resources and conditions.

moto's own enforcement checks actions only; it never evaluates conditions such as
`ec2:ResourceTag/xeoncluster:cluster`, so a role scoped to one cluster could still terminate
another's instances there. The stand-in asks this module instead, one question per resource.

Supported: Allow/Deny, Action/NotAction, Resource/NotResource with `*` and `?`, and the condition
operators String(Not)Equals(IgnoreCase), String(Not)Like, ArnLike/ArnEquals, Bool and Null, with
the ForAnyValue:/ForAllValues: prefixes and the IfExists suffix.
"""
from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Values = Sequence[str]


@dataclass(frozen=True)
class Question:
    """May the caller do `action` on `resource`, given the request's condition keys?"""

    action: str
    resource: str
    context: Mapping[str, Values] = field(default_factory=dict)


def allowed(policies: Sequence[Mapping[str, Any]], question: Question) -> bool:
    """An explicit Deny wins; otherwise one matching Allow is needed (the default is deny)."""
    statements = [s for policy in policies for s in _as_list(policy.get("Statement", []))]
    matching = [s for s in statements if _applies(s, question)]
    if any(s.get("Effect") == "Deny" for s in matching):
        return False
    return any(s.get("Effect") == "Allow" for s in matching)


def _applies(statement: Mapping[str, Any], question: Question) -> bool:
    return (_matches_field(statement, "Action", question.action, case=False)
            and _matches_field(statement, "Resource", question.resource, case=True)
            and _conditions_hold(statement.get("Condition", {}), question.context))


def _matches_field(statement: Mapping[str, Any], name: str, value: str, case: bool) -> bool:
    if name in statement:
        return any(_glob(pattern, value, case) for pattern in _as_list(statement[name]))
    if f"Not{name}" in statement:
        return not any(_glob(pattern, value, case) for pattern in _as_list(statement[f"Not{name}"]))
    return False


def _glob(pattern: str, value: str, case: bool) -> bool:
    regex = fnmatch.translate(pattern)
    return re.match(regex, value, 0 if case else re.IGNORECASE) is not None


def _conditions_hold(conditions: Mapping[str, Mapping[str, Any]], context: Mapping[str, Values]) -> bool:
    lowered = {key.lower(): list(values) for key, values in context.items()}
    return all(_condition_holds(operator, key, _as_list(expected), lowered.get(key.lower()))
               for operator, block in conditions.items() for key, expected in block.items())


def _condition_holds(operator: str, key: str, expected: list[str], actual: list[str] | None) -> bool:
    qualifier, _, base = operator.rpartition(":")
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    if base == "Null":
        return (actual is None) == (str(expected[0]).lower() == "true")
    if actual is None:
        return if_exists
    test = _OPERATORS.get(base)
    if test is None:
        raise ValueError(f"condition operator {operator} is not supported by the stand-in")
    negated = base.startswith(("StringNot", "ArnNot"))
    if qualifier == "ForAllValues":
        return all(test(value, expected) for value in actual)
    if qualifier == "ForAnyValue" or not negated:
        return any(test(value, expected) for value in actual)
    return all(test(value, expected) for value in actual)


def _like(value: str, patterns: list[str]) -> bool:
    return any(_glob(p, value, case=True) for p in patterns)


_OPERATORS = {
    "StringEquals": lambda v, e: v in e,
    "StringNotEquals": lambda v, e: v not in e,
    "StringEqualsIgnoreCase": lambda v, e: v.lower() in {x.lower() for x in e},
    "StringNotEqualsIgnoreCase": lambda v, e: v.lower() not in {x.lower() for x in e},
    "StringLike": _like,
    "StringNotLike": lambda v, e: not _like(v, e),
    "ArnEquals": lambda v, e: v in e,
    "ArnLike": _like,
    "ArnNotEquals": lambda v, e: v not in e,
    "ArnNotLike": lambda v, e: not _like(v, e),
    "Bool": lambda v, e: v.lower() in {str(x).lower() for x in e},
}


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]
