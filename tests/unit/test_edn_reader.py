"""The EDN reader (checkers/formats/edn.py) reads exactly what edn_format reads.

The fast reader handles a subset of EDN itself and leaves everything else to edn_format; these
properties hold it to that over generated EDN: whatever it returns is what edn_format returns
(after `_plain`, compared type by type: 1 is not 1.0 nor True, -0.0 is not 0.0), the subset is
really read by the fast path, and on any text at all the fast path either agrees with edn_format
or steps aside.
"""

from __future__ import annotations

import math
from typing import Any

import edn_format
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkaesque_harness.checkers.formats.edn import _fast_loads, _plain, parse_edn_history, read_edn_form

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types, all the way down (NaN equals NaN; -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(same(ka, kb) and same(va, vb)
                                        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True))
    return a == b


def edn_format_reads(text: str) -> Any:
    forms = edn_format.loads_all(text)
    assert len(forms) == 1, f"the generator made {len(forms)} forms of {text!r}"
    return _plain(forms[0])


# --- generated EDN ---------------------------------------------------------------------------------
SEPARATORS = st.sampled_from([" ", ",", ", ", " ,", "\t", "\n", "  ", ",,"])
# Characters of string bodies, unescaped: commas, quotes' neighbours, non-ASCII text, a semicolon.
BODY_CHARS = st.one_of(st.sampled_from(list(",;:#{}[]() é日本\u2028\u0085ß€")),
                       st.characters(exclude_characters='"\\', exclude_categories=("Cs",)))
FAST_ESCAPES = st.one_of(st.sampled_from(["\\n", "\\t", "\\\"", "\\\\", "\\r", "\\b", "\\f"]),
                         st.integers(0, 0xFFFF).map(lambda c: f"\\u{c:04x}"),
                         st.integers(0, 0xFFFF).map(lambda c: f"\\u{c:04X}"))
OTHER_ESCAPES = st.sampled_from(["\\x41", "\\'", "\\a", "\\v", "\\101", "\\0", "\\U0001F600", "\\q", "\\/",
                                 "\\N{LATIN SMALL LETTER E WITH ACUTE}"])


def strings(escapes: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(st.one_of(BODY_CHARS, escapes), max_size=12).map(lambda parts: '"' + "".join(parts) + '"')


NAME = st.text(alphabet=st.sampled_from(list("abcxyzé日_-?!*+.<>=$%&#:0123")), min_size=1, max_size=6).filter(
    lambda s: not s[0].isdigit() and not s.startswith(("#", ":")))
KEYWORDS = st.one_of(NAME.map(lambda n: ":" + n), st.tuples(NAME, NAME).map(lambda t: f":{t[0]}/{t[1]}"))
INTEGERS = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.integers(0, 10**6).map(lambda i: f"+{i}"),
    st.integers(-(10**25), 10**25).map(lambda i: f"{i}N"))
FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr).filter(lambda r: "inf" not in r),
    st.tuples(st.sampled_from(["", "-", "+"]), st.integers(0, 999), st.integers(0, 999),
              st.sampled_from(["", "e5", "E-3", "e+12", "e400"])).map(lambda t: f"{t[0]}{t[1]}.{t[2]}{t[3]}"),
    st.tuples(st.integers(0, 99), st.sampled_from(["e3", "E-2"])).map(lambda t: f"{t[0]}{t[1]}"))
FAST_SCALARS = st.one_of(strings(FAST_ESCAPES), KEYWORDS, INTEGERS, FLOATS,
                         st.sampled_from(["nil", "true", "false"]))
# Beyond the fast subset: edn_format alone reads these.
OTHER_SCALARS = st.one_of(
    strings(OTHER_ESCAPES),
    st.sampled_from(["##Inf", "##-Inf", "##NaN", "1.5M", "3M", "-0.25M", "1/2", "0x1F", "foo", "a.b/c", "-", "\\c",
                     "\\newline", "\\u00e9", '#uuid "f81d4fae-7dec-11d0-a765-00a0c91e6bf6"', "#_ 99 1"]))


def collections(scalars: st.SearchStrategy[str], fast: bool) -> st.SearchStrategy[str]:
    """Vectors, lists and maps (and, beyond the fast subset, sets and maps with repeated keys)."""
    def join(items: list[str], seps: list[str]) -> str:
        return "".join(s + i for i, s in zip(items, seps, strict=False)) if items else ""

    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        seq = st.lists(children, max_size=5).flatmap(
            lambda items: st.lists(SEPARATORS, min_size=len(items) + 1, max_size=len(items) + 1).map(
                lambda seps: join(items, seps) + seps[-1]))
        kinds = [seq.map(lambda s: f"[{s}]"), seq.map(lambda s: f"({s})"),
                 st.lists(st.tuples(KEYWORDS if fast else st.one_of(KEYWORDS, strings(FAST_ESCAPES), INTEGERS),
                                    children), max_size=4, unique_by=(lambda kv: kv[0]) if fast else None)
                 .map(lambda kv: "{" + ", ".join(f"{k} {v}" for k, v in kv) + "}")]
        if not fast:
            kinds.append(st.lists(st.one_of(KEYWORDS, INTEGERS), max_size=4, unique=True)
                         .map(lambda xs: "#{" + " ".join(xs) + "}"))
        return st.one_of(*kinds)

    return st.recursive(scalars, extend, max_leaves=12)


FAST_EDN = collections(FAST_SCALARS, fast=True)
ANY_EDN = collections(st.one_of(FAST_SCALARS, OTHER_SCALARS), fast=False).flatmap(
    lambda form: st.sampled_from([form, f" {form} ", f"{form} ; a comment, with \"quotes\"", f"; note\n{form}",
                                  f"{form},"]))


# --- the properties --------------------------------------------------------------------------------
@PROPERTY
@given(FAST_EDN)
def test_the_fast_subset_is_read_by_the_fast_path_exactly_as_edn_format_reads_it(text):
    assert same(_fast_loads(text), edn_format_reads(text)), text


@PROPERTY
@given(ANY_EDN)
def test_any_edn_is_read_as_edn_format_reads_it(text):
    assert same(read_edn_form(text), edn_format_reads(text)), text


@PROPERTY
@given(st.text(alphabet=st.sampled_from(list('[]{}()" ,\t\\:;#_-+./0123456789eEMNnilrutfasxé')), max_size=30))
def test_on_any_text_the_fast_path_agrees_with_edn_format_or_steps_aside(text):
    try:
        fast = _fast_loads(text)
    except ValueError:
        return  # read_edn_form hands the text to edn_format
    assert same(fast, edn_format_reads(text)), text


# --- the cases that were misread, by name --------------------------------------------------------
@pytest.mark.parametrize("text,value", [
    ('"a,b"', "a,b"),
    ('"é"', "é"),
    ('"日本, \\"quoted\\"\\n"', '日本, "quoted"\n'),
    ('"\\u00e9\\\\"', "é\\"),
    ("{:f :txn, :value [[:append :x \"a,b\"]]}", {"f": "txn", "value": [["append", "x", "a,b"]]}),
])
def test_strings_keep_their_commas_and_their_unicode(text, value):
    assert same(read_edn_form(text), value)


@pytest.mark.parametrize("text", ["[1 2)", "{:a 1 :b}", "07", "{:a 1} {:b 2}", '"open'])
def test_malformed_or_ambiguous_text_is_refused_not_guessed(text):
    with pytest.raises(ValueError):
        read_edn_form(text)


def test_a_line_with_two_op_maps_is_refused_by_line(tmp_path):
    p = tmp_path / "h.edn"
    p.write_text('{:type :invoke, :f :txn, :value []}\n{:type :ok, :f :txn, :value []} {:type :ok}\n')
    with pytest.raises(ValueError, match="line 2: not one EDN map"):
        parse_edn_history(p)


def test_a_string_holding_a_line_separator_character_stays_one_line(tmp_path):
    p = tmp_path / "h.edn"
    p.write_text('{:type :invoke, :process 0, :f :txn, :value [[:append 1 "a\u2028b\u0085c"]]}\n', encoding="utf-8")
    [op] = parse_edn_history(p)
    assert op.value == [["append", 1, "a\u2028b\u0085c"]]
