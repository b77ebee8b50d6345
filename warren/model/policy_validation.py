"""Policy validation: RabbitMQ's rules and error texts for a policy's four parts.

Theory of operation:
1. A policy arrives as decoded JSON: a pattern, a definition, a priority and an apply-to.
   `validate_policy` checks all four and returns every failure, in the order RabbitMQ
   reports them (definition, apply-to, pattern, priority: rabbit_parameter_validation
   collects results in reverse). `PolicyError.text` joins them the way
   rabbit_runtime_parameters:format_error/1 does (``Validation failed\\n\\n…\\n``).
2. A definition is checked by groups of keys, each group standing for one RabbitMQ
   validator module, in the order RabbitMQ 3.10.8 runs them: queue-master-locator, then
   rabbit_policies' keys, then the classic mirroring keys (``ha-*``). Within a group keys
   are visited in sorted order (an Erlang map's order) and the first failure is the
   answer; keys no group claims are ``not recognised policy settings``. Operator policies
   accept only the numeric limits of `OPERATOR_POLICY_KEYS`.
3. Texts print the offending JSON value with Erlang's ``~p`` (`warren.model.erlang_pretty`),
   since the value RabbitMQ sees is the decoded Erlang term: ``<<"x">>``, ``null``, ``1.5``.
4. Patterns are compiled with Python's `re` over UTF-8 bytes, as RabbitMQ's `re:run` reads
   a queue name's bytes; the common compile errors are reported with PCRE's message and
   offset (``{"missing )",1}``). Python's dialect is close to PCRE's for the patterns
   policies use (anchors, classes, alternation, quantifiers); PCRE-only syntax such as
   ``\\z`` is refused.
5. Warren differs on purpose where RabbitMQ crashes (HTTP 500): a definition that is not a
   JSON object is ``definition must be a dictionary: …``, an ``ha-mode`` that is not a
   string or a ``max-age`` that is not one is refused with the key's usual text.

Source: rabbit_policy.erl (validation/3, validation0/2, apply_to_validation/2),
rabbit_policies.erl (validate_policy0/2), rabbit_mirror_queue_misc.erl and its mode modules,
rabbit_queue_location_validator.erl, rabbit_parameter_validation.erl (RabbitMQ 3.10.8).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

from warren.model.erlang_pretty import Atom, Charlist, pretty

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"

APPLY_TO = ("queues", "exchanges", "all")
OPERATOR_POLICY_KEYS = (
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "delivery-limit",
)
STREAM_SEGMENT_SIZE_BYTES_MAX = 3_000_000_000


class PolicyError(ValueError):
    """A policy RabbitMQ would refuse; `reasons` in RabbitMQ's order."""

    def __init__(self, reasons: Sequence[str]) -> None:
        self.reasons = list(reasons)
        super().__init__(self.text)

    @property
    def text(self) -> str:
        return "Validation failed\n\n" + "".join(reason + "\n" for reason in self.reasons)


def erl_format(template: str, *terms: object) -> str:
    """`io_lib:format` of a template whose only directives are ``~p``."""
    pieces = template.split("~p")
    out = pieces[0]
    for term, piece in zip(terms, pieces[1:], strict=True):
        column = len(out) - (out.rfind("\n") + 1)
        out += pretty(term, column) + piece
    return out


def validate_policy(
    pattern: object, definition: object, priority: object, apply_to: object, *, operator: bool
) -> list[str]:
    """Every reason to refuse this policy, in RabbitMQ's order; empty when it is valid."""
    checks = (
        validate_definition(definition, operator=operator),
        _validate_apply_to(apply_to),
        validate_pattern(pattern),
        _validate_priority(priority),
    )
    return [reason for reason in checks if reason is not None]


def _validate_priority(priority: object) -> str | None:
    if _is_number(priority):
        return None
    return erl_format("priority should be a number, actually was ~p", priority)


def _validate_apply_to(apply_to: object) -> str | None:
    if apply_to in APPLY_TO:
        return None
    shown = _tilde_s(apply_to)
    return f"apply-to '{shown}' unrecognised; should be 'queues', 'exchanges' or 'all'"


def _tilde_s(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --- Patterns ---


def compile_pattern(pattern: str) -> re.Pattern[bytes]:
    """The pattern as it matches queue names (their UTF-8 bytes); raises `re.error`."""
    return re.compile(pattern.encode("utf-8"))


def validate_pattern(pattern: object) -> str | None:
    if not isinstance(pattern, str):
        return erl_format("pattern should be a binary but was ~p", pattern)
    try:
        compile_pattern(pattern)
    except re.error as error:
        message, offset = _pcre_error(pattern.encode("utf-8"), error)
        template = "pattern should be regular expression but is invalid: ~p"
        return erl_format(template, (Charlist(message), offset))
    return None


def _pcre_error(pattern: bytes, error: re.error) -> tuple[str, int]:
    """PCRE's message and offset for the compile errors people make; Python's otherwise."""
    message, position = error.msg, error.pos or 0
    if message.startswith("missing ), unterminated subpattern"):
        return "missing )", len(pattern)
    if message.startswith("unterminated character set"):
        return "missing terminating ] for character class", len(pattern)
    if message.startswith("unbalanced parenthesis"):
        return "unmatched parentheses", position
    if message in ("nothing to repeat", "multiple repeat"):
        return "nothing to repeat", position
    if message.startswith("min repeat greater than max repeat"):
        return "numbers out of order in {} quantifier", pattern.find(b"}", position)
    if message.startswith("bad character range"):
        return "range out of order in character class", position + len(message.split()[-1]) - 1
    if message.startswith("look-behind requires fixed-width pattern"):
        return "lookbehind assertion is not fixed length", _lookbehind_end(pattern)
    return message, position


def _lookbehind_end(pattern: bytes) -> int:
    start = max(pattern.find(b"(?<="), pattern.find(b"(?<!"))
    return max(pattern.find(b")", start), 0)


# --- Definitions ---


def validate_definition(definition: object, *, operator: bool) -> str | None:
    """The first reason RabbitMQ gives for refusing `definition`, or None."""
    if definition == {} or definition == []:
        return "no policy provided"
    if not isinstance(definition, dict):
        return erl_format("definition must be a dictionary: ~p", definition)
    terms = sorted(definition.items())
    groups = _OPERATOR_GROUPS if operator else _USER_GROUPS
    for keys, check in groups:
        scope = [(key, value) for key, value in terms if key in keys]
        if scope:
            reason = check(scope)
            if reason is not None:
                return reason
    claimed = {key for keys, _ in groups for key in keys}
    unknown = [(key, value) for key, value in terms if key not in claimed]
    if unknown:
        return erl_format("~p are not recognised policy settings", unknown)
    return None


Scope: TypeAlias = list[tuple[str, object]]
GroupCheck: TypeAlias = Callable[[Scope], "str | None"]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: object, minimum: int, maximum: int | None = None) -> bool:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        return False
    return maximum is None or value <= maximum


def _integer_at_least(minimum: int, maximum: int | None = None) -> Callable[[object], bool]:
    return lambda value: _is_integer(value, minimum, maximum)


def _one_of(*choices: object) -> Callable[[object], bool]:
    return lambda value: isinstance(value, str) and value in choices


def _is_string(value: object) -> bool:
    return isinstance(value, str)


_MAX_AGE = re.compile(r"([0-9]+)(Y|M|D|h|m|s)")


def _is_max_age(value: object) -> bool:
    match = _MAX_AGE.fullmatch(value) if isinstance(value, str) else None
    return match is not None and int(match.group(1)) > 0


# rabbit_policies:validate_policy0/2: key -> (accepts, "~p …" text).
_RABBIT_POLICIES: Mapping[str, tuple[Callable[[object], bool], str]] = {
    "alternate-exchange": (_is_string, "~p is not a valid alternate exchange name"),
    "dead-letter-exchange": (_is_string, "~p is not a valid dead letter exchange name"),
    "dead-letter-routing-key": (_is_string, "~p is not a valid dead letter routing key"),
    "dead-letter-strategy": (
        _one_of("at-most-once", "at-least-once"),
        "~p is not a valid dead letter strategy",
    ),
    "message-ttl": (_integer_at_least(0), "~p is not a valid message TTL"),
    "expires": (_integer_at_least(1), "~p is not a valid queue expiry"),
    "max-length": (_integer_at_least(0), "~p is not a valid maximum length"),
    "max-length-bytes": (_integer_at_least(0), "~p is not a valid maximum length in bytes"),
    "max-in-memory-length": (_integer_at_least(0), "~p is not a valid maximum memory in bytes"),
    "max-in-memory-bytes": (_integer_at_least(0), "~p is not a valid maximum memory in bytes"),
    "queue-mode": (_one_of("default", "lazy"), "~p is not a valid queue-mode value"),
    "queue-version": (
        lambda value: _is_integer(value, 1, 2),
        "~p is not a valid queue-version value",
    ),
    "overflow": (
        _one_of("drop-head", "reject-publish", "reject-publish-dlx"),
        "~p is not a valid overflow value",
    ),
    "delivery-limit": (_integer_at_least(0), "~p is not a valid delivery limit"),
    "max-age": (_is_max_age, "~p is not a valid max age"),
    "stream-max-segment-size-bytes": (
        _integer_at_least(0, STREAM_SEGMENT_SIZE_BYTES_MAX),
        "~p is not a valid segment size",
    ),
    "queue-leader-locator": (
        _one_of("client-local", "balanced", "random", "least-leaders"),
        "~p is not a valid queue leader locator value",
    ),
    "initial-cluster-size": (_integer_at_least(0), "~p is not a valid cluster size"),
}


def _check_rabbit_policies(scope: Scope) -> str | None:
    for key, value in scope:
        accepts, template = _RABBIT_POLICIES[key]
        if not accepts(value):
            return erl_format(template, value)
    return None


QUEUE_MASTER_LOCATORS = ("min-masters", "client-local", "random")


def _check_queue_master_locator(scope: Scope) -> str | None:
    value = scope[0][1]
    if value in QUEUE_MASTER_LOCATORS:
        return None
    return erl_format("~p invalid queue-master-locator value", value)


# --- Classic queue mirroring (rabbit_mirror_queue_misc:validate_policy/1) ---

HA_KEYS = (
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
)
_ABSENT = Atom("none")  # proplists:get_value(Key, List, none)


def _check_mirroring(scope: Scope) -> str | None:
    given: dict[str, object] = dict(scope)
    mode = given.get("ha-mode", _ABSENT)
    if mode is _ABSENT:
        return (
            "ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown"
        )
    if mode not in _HA_PARAMS:
        return erl_format("~p is not a valid ha-mode value", mode)
    checks: list[tuple[object, Callable[[object], str | None]]] = [
        (given.get("ha-params", _ABSENT), _HA_PARAMS[str(mode)]),
        (given.get("ha-sync-mode", _ABSENT), _check_sync_mode),
        (given.get("ha-sync-batch-size", _ABSENT), _check_sync_batch_size),
        (given.get("ha-promote-on-shutdown", _ABSENT), _promote_check("shutdown")),
        (given.get("ha-promote-on-failure", _ABSENT), _promote_check("failure")),
    ]
    for value, check in checks:
        reason = check(value)
        if reason is not None:
            return reason
    return None


def _params_all(params: object) -> str | None:
    return None if params is _ABSENT else 'ha-mode="all" does not take parameters'


def _params_exactly(params: object) -> str | None:
    if _is_integer(params, 1):
        return None
    return erl_format('ha-mode="exactly" takes an integer, ~p given', params)


def _params_nodes(params: object) -> str | None:
    if params == []:
        return 'ha-mode="nodes" list must be non-empty'
    if not isinstance(params, list):
        return erl_format('ha-mode="nodes" takes a list, ~p given', params)
    invalid = [node for node in params if not isinstance(node, str)]
    if invalid:
        return erl_format('ha-mode="nodes" takes a list of strings, ~p was not a string', invalid)
    return None


_HA_PARAMS: Mapping[object, Callable[[object], str | None]] = {
    "all": _params_all,
    "exactly": _params_exactly,
    "nodes": _params_nodes,
}


def _check_sync_mode(value: object) -> str | None:
    if value is _ABSENT or value in ("automatic", "manual"):
        return None
    return erl_format('ha-sync-mode must be "manual" or "automatic", got ~p', value)


def _check_sync_batch_size(value: object) -> str | None:
    if value is _ABSENT or _is_integer(value, 1):
        return None
    return erl_format("ha-sync-batch-size takes an integer greater than 0, ~p given", value)


def _promote_check(event: str) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if value is _ABSENT or value in ("always", "when-synced"):
            return None
        template = f'ha-promote-on-{event} must be "always" or "when-synced", got ~p'
        return erl_format(template, value)

    return check


# Validator groups in the order RabbitMQ 3.10.8 runs its validator modules.
_USER_GROUPS: tuple[tuple[tuple[str, ...], GroupCheck], ...] = (
    (("queue-master-locator",), _check_queue_master_locator),
    (tuple(_RABBIT_POLICIES), _check_rabbit_policies),
    (HA_KEYS, _check_mirroring),
)
_OPERATOR_GROUPS: tuple[tuple[tuple[str, ...], GroupCheck], ...] = (
    (OPERATOR_POLICY_KEYS, _check_rabbit_policies),
)
