"""Label and field selectors with Kubernetes' grammar and matching rules.

Label selectors (kube-api-notes §6): comma means AND; a requirement is
`key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`,
`key>N`, `key<N`. `!=` and `notin` also match objects without the key.
Field selectors: `path=v`, `path==v`, `path!=v` joined by commas, with `\\,`,
`\\=` and `\\\\` escapes; each kind declares which paths it supports.

Parsing errors raise `SelectorError` (the HTTP layer turns it into 400
BadRequest). This module is pure: no I/O, no store, no HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from federator.apis.common import label_key_errors, label_value_errors
from federator.apis.views import Body

_INT_RE = re.compile(r"-?[0-9]+")  # fullmatch only: `$` accepts a trailing newline


class SelectorError(ValueError):
    """A selector that does not parse or names an unsupported field."""


def validate_label_key(key: str) -> str | None:
    """None if `key` is a valid qualified name ([prefix/]name), else why not: kube's messages joined by
    "; ", as its selector parser joins them."""
    return "; ".join(label_key_errors(key)) or None


def validate_label_value(value: str) -> str | None:
    """None if `value` is a valid label value (empty is), else why not (as `validate_label_key`)."""
    return "; ".join(label_value_errors(value)) or None


# ---------------------------------------------------------------- label selectors


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    #: "exists" "!" "=" "!=" "in" "notin" ">" "<"
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        if op in ("=", "in"):
            v = labels.get(self.key)
            return v is not None and v in self.values
        if op in ("!=", "notin"):
            v = labels.get(self.key)
            return v is None or v not in self.values
        v = labels.get(self.key)
        if v is None or not _INT_RE.fullmatch(v):
            return False
        bound = int(next(iter(self.values)))
        return int(v) > bound if op == ">" else int(v) < bound

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!":
            return f"!{self.key}"
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(sorted(self.values))})"
        return f"{self.key}{self.op}{next(iter(self.values))}"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        lbl = labels or {}
        return all(r.matches(lbl) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


EVERYTHING = LabelSelector()

_SPECIAL = set("!=(),<> \t\n")


def _lex(text: str) -> list[tuple[str, str]]:
    """Tokens as (type, text): id, op, lparen, rparen, comma."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\n":
            i += 1
            continue
        if c == "(":
            tokens.append(("lparen", c))
            i += 1
        elif c == ")":
            tokens.append(("rparen", c))
            i += 1
        elif c == ",":
            tokens.append(("comma", c))
            i += 1
        elif c == "!":
            if i + 1 < n and text[i + 1] == "=":
                tokens.append(("op", "!="))
                i += 2
            else:
                tokens.append(("not", "!"))
                i += 1
        elif c == "=":
            if i + 1 < n and text[i + 1] == "=":
                tokens.append(("op", "=="))
                i += 2
            else:
                tokens.append(("op", "="))
                i += 1
        elif c in "<>":
            tokens.append(("op", c))
            i += 1
        else:
            j = i
            while j < n and text[j] not in _SPECIAL:
                j += 1
            word = text[i:j]
            if word in ("in", "notin"):
                tokens.append(("op", word))
            else:
                tokens.append(("id", word))
            i = j
    return tokens


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse kube's label selector string; raises SelectorError."""
    if text is None or not text.strip():
        return EVERYTHING
    tokens = _lex(text)
    reqs: list[Requirement] = []
    pos = 0

    def fail(why: str) -> SelectorError:
        return SelectorError(f"unable to parse requirement: {why} (in label selector {text!r})")

    def peek() -> tuple[str, str] | None:
        return tokens[pos] if pos < len(tokens) else None

    while True:
        tok = peek()
        if tok is None:
            raise fail("found end of input, expected: !, identifier")
        negate = False
        if tok[0] == "not":
            negate = True
            pos += 1
            tok = peek()
        if tok is None or tok[0] != "id":
            found = tok[1] if tok else "end of input"
            raise fail(f"found '{found}', expected: identifier")
        key = tok[1]
        pos += 1
        if (why := validate_label_key(key)) is not None:
            raise fail(f"key {key!r}: {why}")
        nxt = peek()
        if negate:
            if nxt is not None and nxt[0] != "comma":
                raise fail(f"found '{nxt[1]}', expected: ',' or end of input after '!{key}'")
            reqs.append(Requirement(key, "!"))
        elif nxt is None or nxt[0] == "comma":
            reqs.append(Requirement(key, "exists"))
        elif nxt[0] == "op":
            op = nxt[1]
            pos += 1
            if op in ("in", "notin"):
                lp = peek()
                if lp is None or lp[0] != "lparen":
                    raise fail(f"found '{lp[1] if lp else 'end of input'}', expected: '('")
                pos += 1
                values: list[str] = []
                expect_value = True
                while True:
                    t = peek()
                    if t is None:
                        raise fail("found end of input, expected: ')'")
                    pos += 1
                    if t[0] == "rparen":
                        if expect_value and values:
                            values.append("")  # trailing comma: an empty value, as kube reads it
                        break
                    if t[0] == "comma":
                        if expect_value:
                            values.append("")
                        expect_value = True
                        continue
                    if t[0] != "id" or not expect_value:
                        raise fail(f"found '{t[1]}', expected: ',' or ')'")
                    values.append(t[1])
                    expect_value = False
                if not values:
                    raise fail(f"for 'in', 'notin' operators, values set can't be empty (key {key!r})")
                for v in values:
                    if (why := validate_label_value(v)) is not None:
                        raise fail(f"value {v!r} of key {key!r}: {why}")
                reqs.append(Requirement(key, op, frozenset(values)))
            else:
                t = peek()
                value = ""
                if t is not None and t[0] == "id":
                    value = t[1]
                    pos += 1
                elif t is not None and t[0] != "comma":
                    raise fail(f"found '{t[1]}', expected: a value")
                if op in ("<", ">"):
                    if not _INT_RE.fullmatch(value):
                        raise fail(f"for '<', '>' operators, exactly one integer value is required (key {key!r})")
                elif (why := validate_label_value(value)) is not None:
                    raise fail(f"value {value!r} of key {key!r}: {why}")
                reqs.append(Requirement(key, "=" if op == "==" else op, frozenset([value])))
        else:
            raise fail(f"found '{nxt[1]}', expected: '=', '!=', '==', 'in', 'notin'")
        t = peek()
        if t is None:
            break
        if t[0] != "comma":
            raise fail(f"found '{t[1]}', expected: ','")
        pos += 1
    return LabelSelector(tuple(reqs))


def selector_from_dict(spec: Mapping[str, Any] | None) -> LabelSelector:
    """A metav1.LabelSelector ({matchLabels, matchExpressions}) as a LabelSelector."""
    if not spec:
        return EVERYTHING
    reqs: list[Requirement] = []
    match_labels = spec.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels must be a map of strings")
    for k, v in match_labels.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise SelectorError("matchLabels must be a map of strings")
        if (why := validate_label_key(k)) is not None:
            raise SelectorError(f"matchLabels key {k!r}: {why}")
        if (why := validate_label_value(v)) is not None:
            raise SelectorError(f"matchLabels value {v!r}: {why}")
        reqs.append(Requirement(k, "=", frozenset([v])))
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for i, expr in enumerate(spec.get("matchExpressions") or []):
        if not isinstance(expr, Mapping):
            raise SelectorError(f"matchExpressions[{i}] must be an object")
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not isinstance(key, str) or (why := validate_label_key(key)) is not None:
            raise SelectorError(f"matchExpressions[{i}].key: invalid key {key!r}")
        if op not in ops:
            raise SelectorError(f"matchExpressions[{i}].operator: {op!r} is not a valid selector operator")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"matchExpressions[{i}].values must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"matchExpressions[{i}].values: must be specified when operator is In or NotIn")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"matchExpressions[{i}].values: may not be specified when operator is {op}")
        reqs.append(Requirement(key, ops[op], frozenset(values)))
    return LabelSelector(tuple(reqs))


# ---------------------------------------------------------------- field selectors


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str


FieldGetter = Callable[[dict[str, Any]], str]


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()
    getters: tuple[FieldGetter, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, obj: dict[str, Any]) -> bool:
        for req, get in zip(self.requirements, self.getters):
            actual = get(obj)
            if (actual == req.value) != (req.op == "="):
                return False
        return True

    def single_value(self, field: str) -> str | None:
        """The value of an `=` requirement on `field`, if there is one (lets a
        list narrow its key range for metadata.name / metadata.namespace)."""
        for req in self.requirements:
            if req.field == field and req.op == "=":
                return req.value
        return None

    def __str__(self) -> str:
        return ",".join(f"{r.field}{r.op}{r.value}" for r in self.requirements)


def _meta_getter(key: str) -> FieldGetter:
    def get(obj: dict[str, Any]) -> str:
        v = Body(obj).metadata.get(key)
        return v if isinstance(v, str) else ""

    return get


BASE_FIELD_GETTERS: dict[str, FieldGetter] = {
    "metadata.name": _meta_getter("name"),
    "metadata.namespace": _meta_getter("namespace"),
}


def path_getter(path: str) -> FieldGetter:
    """A getter for a dotted path; bools render as "true"/"false", absent as ""."""
    parts = path.split(".")

    def get(obj: dict[str, Any]) -> str:
        cur: Any = obj
        for p in parts:
            if not isinstance(cur, Mapping):
                return ""
            cur = cur.get(p)
            if cur is None:
                return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        if isinstance(cur, (str, int, float)):
            return str(cur)
        return ""

    return get


def _split_unescaped(text: str, sep: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if c == sep:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    out.append("".join(cur))
    return out


def _unescape(value: str, whole: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: {whole!r}: invalid escape sequence")
            out.append(value[i + 1])
            i += 2
            continue
        if c in ",=":
            raise SelectorError(f"invalid field selector: {whole!r}: unescaped {c!r} in value")
        out.append(c)
        i += 1
    return "".join(out)


def _find_op(term: str) -> tuple[int, str] | None:
    i = 0
    while i < len(term):
        c = term[i]
        if c == "\\":
            i += 2
            continue
        if term.startswith("!=", i):
            return i, "!="
        if term.startswith("==", i):
            return i, "=="
        if c == "=":
            return i, "="
        i += 1
    return None


def parse_field_selector(
    text: str | None,
    supported: Mapping[str, FieldGetter] | None = None,
    *,
    resource: str = "",
    label_selector: str = "",
) -> FieldSelector:
    """Parse a field selector and bind it to the kind's supported fields.
    `supported` maps path -> getter (BASE_FIELD_GETTERS always apply)."""
    if text is None or not text.strip():
        return FieldSelector()
    getters_by_field = dict(BASE_FIELD_GETTERS)
    if supported:
        getters_by_field.update(supported)
    reqs: list[FieldRequirement] = []
    getters: list[FieldGetter] = []
    for term in _split_unescaped(text, ","):
        if not term:
            continue
        found = _find_op(term)
        if found is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        idx, op = found
        field, raw_value = term[:idx].strip(), term[idx + len(op):]
        if not field:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        value = _unescape(raw_value, text)
        getter = getters_by_field.get(field)
        if getter is None:
            known = ", ".join(f'"{f}"' for f in sorted(getters_by_field, key=_field_order))
            raise SelectorError(
                f'Unable to find "{resource}" that match label selector "{label_selector}", '
                f'field selector "{text}": "{field}" is not a known field selector: only {known}'
            )
        reqs.append(FieldRequirement(field, "!=" if op == "!=" else "=", value))
        getters.append(getter)
    return FieldSelector(tuple(reqs), tuple(getters))


def _field_order(f: str) -> tuple[int, str]:
    return (0 if f.startswith("metadata.") else 1, f)


def label_selector_string(match_labels: Mapping[str, str]) -> str:
    """`a=b,c=d` for a matchLabels map (for building list requests)."""
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def known_fields(supported: Iterable[str]) -> list[str]:
    return sorted(set(BASE_FIELD_GETTERS) | set(supported), key=_field_order)
