"""IAM policy evaluation, as AWS does it for a role's or a user's calls: actions, resources and
conditions, identity policies capped by a permissions boundary.

moto's own enforcement checks actions only; it never evaluates conditions such as
`ec2:ResourceTag/xeoncluster:cluster`, so a role scoped to one cluster could still terminate
another's instances there. The stand-in asks this module instead, one question per resource.

Supported: Allow/Deny, Action/NotAction, Resource/NotResource with `*` and `?`, and the condition
operators String(Not)Equals(IgnoreCase), String(Not)Like, Arn(Not)Like/Arn(Not)Equals, Bool and
Null, with the ForAnyValue:/ForAllValues: prefixes and the IfExists suffix. As in AWS, a key absent
from the request makes a negated operator (StringNotEquals...) and ForAllValues: true, the others
false.
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


Policies = Sequence[Mapping[str, Any]]
# Why a question was refused, in the words of AWS's AccessDenied messages.
EXPLICIT_DENY_IDENTITY = "with an explicit deny in an identity-based policy"
EXPLICIT_DENY_BOUNDARY = "with an explicit deny in a permissions boundary"
NO_IDENTITY_ALLOW = "because no identity-based policy allows the {action} action"
NO_BOUNDARY_ALLOW = "because no permissions boundary allows the {action} action"


def allowed(policies: Policies, question: Question) -> bool:
    """An explicit Deny wins; otherwise one matching Allow is needed (the default is deny)."""
    return _effect(policies, question) == "Allow"


def refusal(policies: Policies, boundary: Policies | None, question: Question) -> str | None:
    """None when the call is allowed; else why not. With a permissions boundary, AWS allows only what
    both the identity's policies and the boundary allow, and an explicit Deny in either wins."""
    identity = _effect(policies, question)
    capped = _effect(boundary, question) if boundary is not None else "Allow"
    if identity == "Deny":
        return EXPLICIT_DENY_IDENTITY
    if capped == "Deny":
        return EXPLICIT_DENY_BOUNDARY
    if identity is None:
        return NO_IDENTITY_ALLOW.format(action=question.action)
    if capped is None:
        return NO_BOUNDARY_ALLOW.format(action=question.action)
    return None


def _effect(policies: Policies, question: Question) -> str | None:
    """Deny if a matching statement denies, Allow if one allows, None if none matches."""
    statements = [s for policy in policies for s in _as_list(policy.get("Statement", []))]
    lowered = {key.lower(): list(values) for key, values in question.context.items()}
    matching = [s for s in statements if _applies(s, question, lowered)]
    if any(s.get("Effect") == "Deny" for s in matching):
        return "Deny"
    return "Allow" if any(s.get("Effect") == "Allow" for s in matching) else None


def _applies(statement: Mapping[str, Any], question: Question, lowered: Mapping[str, list[str]]) -> bool:
    """`lowered`: the question's condition keys in lower case (IAM compares key names without case)."""
    return (_matches_field(statement, "Action", question.action, case=False, context={})
            and _matches_field(statement, "Resource", question.resource, case=True, context=lowered)
            and _conditions_hold(statement.get("Condition", {}), lowered))


def _matches_field(statement: Mapping[str, Any], name: str, value: str, case: bool,
                   context: Mapping[str, list[str]]) -> bool:
    if name in statement:
        return any(_glob(_substitute(p, context), value, case) for p in _as_list(statement[name]))
    if f"Not{name}" in statement:
        return not any(_glob(_substitute(p, context), value, case) for p in _as_list(statement[f"Not{name}"]))
    return False


_VARIABLE = re.compile(r"\$\{([^}]+)\}")
_UNMATCHABLE = "\x00"  # what a policy variable absent from the request becomes: it matches nothing


def _substitute(pattern: str, context: Mapping[str, list[str]]) -> str:
    """Policy variables (`${aws:PrincipalAccount}`) take the request's single value of that key."""
    def value(match: re.Match[str]) -> str:
        values = context.get(match.group(1).lower())
        return values[0] if values and len(values) == 1 else _UNMATCHABLE
    return _VARIABLE.sub(value, str(pattern)) if "${" in str(pattern) else str(pattern)


def _glob(pattern: str, value: str, case: bool) -> bool:
    regex = fnmatch.translate(pattern)
    return re.match(regex, value, 0 if case else re.IGNORECASE) is not None


def _conditions_hold(conditions: Mapping[str, Mapping[str, Any]], lowered: Mapping[str, list[str]]) -> bool:
    return all(_condition_holds(operator, key, [_substitute(e, lowered) for e in _as_list(expected)],
                                lowered.get(key.lower()))
               for operator, block in conditions.items() for key, expected in block.items())


def _condition_holds(operator: str, key: str, expected: list[str], actual: list[str] | None) -> bool:
    qualifier, _, base = operator.rpartition(":")
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    if base == "Null":
        return (not actual) == (str(expected[0]).lower() == "true")
    test = _OPERATORS.get(base)
    if test is None:
        raise ValueError(f"condition operator {operator} is not supported by the stand-in")
    negated = base.startswith(("StringNot", "ArnNot"))
    if not actual:
        return if_exists or qualifier == "ForAllValues" or (negated and qualifier != "ForAnyValue")
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
