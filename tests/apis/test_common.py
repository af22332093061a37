"""Quantities, names, timestamps, error-path rendering and printer-column getters."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest

from federator.apis.common import (
    QuantityError,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_key_errors,
    label_value_errors,
    parse_quantity,
    split_cause,
)
from federator.apis.crd import column_getter


@pytest.mark.parametrize(("text", "value"), [
    ("8", Fraction(8)), ("500m", Fraction(1, 2)), ("32Gi", Fraction(32 * 2**30)), ("1k", Fraction(1000)),
    ("1e3", Fraction(1000)), ("1.5", Fraction(3, 2)), (".5", Fraction(1, 2)), ("100n", Fraction(1, 10**7)),
    ("2E", Fraction(2 * 10**18)), ("+4", Fraction(4)), ("-1", Fraction(-1)), (4, Fraction(4)), ("1E-3", Fraction(1, 1000)),
])
def test_quantities(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", [
    "", "eight", "1.2.3", "1Gb", "1 Gi", " 1", "1e", "Gi", "1e999", "1e1.5", "9" * 65, "99999999999Ei", True,
    None, [1], 2**64, " 16 ",
])
def test_bad_quantities(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_names() -> None:
    assert dns1123_label_errors("resnet-ps") == []
    assert dns1123_label_errors("a" * 63) == []
    assert dns1123_label_errors("a" * 64) == ["must be no more than 63 characters"]
    for bad in ("Resnet", "-a", "a-", "a.b", "a_b", ""):
        assert dns1123_label_errors(bad), bad
    assert dns1123_subdomain_errors("imagenet.v2") == []
    assert dns1123_subdomain_errors("a..b")
    assert label_key_errors("federator.dev/dataset.imagenet") == []
    assert label_key_errors("tier") == []
    assert label_key_errors("/x") and label_key_errors("a/b/c") and label_key_errors("x" * 64)
    assert label_value_errors("") == [] and label_value_errors("research") == []
    assert label_value_errors("-x") and label_value_errors("x" * 64)


@pytest.mark.parametrize("check", [dns1123_label_errors, dns1123_subdomain_errors, label_key_errors,
                                   label_value_errors])
@pytest.mark.parametrize("name", ["job\n", "job\r\n", "\njob", "example.com/job\n", "jo\nb"])
def test_a_newline_anywhere_is_refused(check: Callable[[str], list[str]], name: str) -> None:
    """`$` with re.match would accept "job\\n": every name check matches the whole text."""
    assert check(name), (check.__name__, name)
    assert check(name.replace("\r", "").replace("\n", "")) == [] or "/" in name  # the rest is a good name


def test_name_messages_are_kubes_to_the_character() -> None:
    """apimachinery's IsDNS1123Label/IsDNS1123Subdomain/IsQualifiedName/IsValidLabelValue and RegexError
    (whose examples are joined by ",  or ": two spaces)."""
    assert dns1123_label_errors("A" * 64) == [
        "must be no more than 63 characters",
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
        "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]
    assert dns1123_subdomain_errors("-x") == [
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
    name_part = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                 "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
                 "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    assert label_key_errors("Example.com/-x") == [
        "prefix part " + dns1123_subdomain_errors("Example.com")[0], "name part " + name_part]
    assert label_key_errors("x/") == ["name part must be non-empty", "name part " + name_part]
    assert label_key_errors("a/b/c") == ["a qualified name " + name_part + " with an optional DNS subdomain prefix "
                                         "and '/' (e.g. 'example.com/MyName')"]
    assert label_value_errors("x_") == [
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
        "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"]


@pytest.mark.parametrize(("message", "cause"), [
    ("Required value", ("FieldValueRequired", "")),
    ("Invalid value: 0: must be greater than or equal to 1", ("FieldValueInvalid", "0: must be greater than or equal to 1")),
    ('Unsupported value: "x": supported values: "a"', ("FieldValueNotSupported", '"x": supported values: "a"')),
    ("Forbidden: field not declared in schema", ("FieldValueForbidden", "field not declared in schema")),
    ('Duplicate value: "ps"', ("FieldValueDuplicate", '"ps"')),
    ("Too long: may not be more than 63 characters", ("FieldValueTooLong", "may not be more than 63 characters")),
    ("something else", ("FieldValueInvalid", "something else")),
])
def test_split_cause(message: str, cause: tuple[str, str]) -> None:
    assert split_cause(message) == cause


def test_column_getter() -> None:
    ready = column_getter('.status.conditions[?(@.type=="Ready")].status')
    obj = {"status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}}
    assert ready(obj) == "True"
    assert ready({}) == "" and ready({"status": {"conditions": "junk"}}) == ""
    assert column_getter(".spec.network.type")({"spec": {"network": {"type": "rdma"}}}) == "rdma"
    assert column_getter(".status.placement.cluster")({"status": {"placement": None}}) == ""
    with pytest.raises(ValueError):
        column_getter(".spec[0]")


@pytest.mark.parametrize("value", [1.5, 0.25, True, None, "-1", "eight"])
def test_api_quantity_refuses_floats_and_bad_values(value: object) -> None:
    """The parser reads JSON floats (members may send them), but the hub's API
    takes quantities only as strings or integers, and never negative."""
    from pydantic import TypeAdapter, ValidationError

    from federator.apis.common import Quantity

    with pytest.raises(ValidationError):
        TypeAdapter(Quantity).validate_python(value)


def test_api_quantity_keeps_the_submitted_form() -> None:
    from pydantic import TypeAdapter

    from federator.apis.common import Quantity

    assert TypeAdapter(Quantity).validate_python("32Gi") == "32Gi"
    assert TypeAdapter(Quantity).validate_python(4) == 4
