"""SecretPolicy's walk, its rules' hints and checks, the environment's rules, and what a finding says.

The opt-in card-number rule: 13 to 19 digits that pass the Luhn check, and nothing else.
"""

from __future__ import annotations

import pytest

from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.secrets import (
    CARD_NUMBER_RULE,
    EMAIL_RULE,
    SecretFinding,
    SecretPolicy,
    SecretRule,
    environment_rules,
)

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K"


def policy() -> SecretPolicy:
    return SecretPolicy(environ={})


def test_a_finding_says_where_it_is_without_the_match() -> None:
    assert SecretFinding(rule="jwt", path="$.a", seq=None).describe() == "the header at $.a matches secret rule 'jwt'"
    assert SecretFinding(rule="jwt", path="$.a", seq=3).describe() == "seq 3 at $.a matches secret rule 'jwt'"


def test_the_walk_names_keys_by_position_items_by_index_and_odd_members_quoted() -> None:
    value = {"plain": "x", "a b": KEY, KEY: "y", "list": ["x", KEY]}
    assert list(policy().find(value, seq=4)) == [
        SecretFinding(rule="openai-key", path="$['a b']", seq=4),
        SecretFinding(rule="openai-key", path="$.<key 2>", seq=4),
        SecretFinding(rule="openai-key", path="$.list[1]", seq=4),
    ]


def test_scan_trusts_the_text_it_is_given_for_the_line() -> None:
    # The recording writer passes the canonical text it has already written, so the line is not encoded again.
    line = {"a": KEY}
    assert list(policy().scan(line, seq=1)) == [SecretFinding(rule="openai-key", path="$.a", seq=1)]
    assert list(policy().scan(line, text=canonical_json({"a": "clean"}), seq=1)) == []


def test_may_hold_reads_escaped_text_with_characters_beyond_latin_1() -> None:
    # In the line's text the key follows `\n` (so a letter); unescaped, a newline: only then is it a key.
    line = canonical_json({"a": "€ first line\n" + KEY})
    assert "\\n" + KEY in line
    assert policy().may_hold(line)


def test_a_hint_passes_over_text_without_it() -> None:
    rule = SecretRule("at-word", r"[a-z]+", hint="@")
    assert (rule.hint, rule.search("plain words"), list(rule.matches("plain words"))) == ("@", False, [])
    assert [m.group() for m in rule.matches("mail@host")] == ["mail", "host"]
    assert [m.group() for m in EMAIL_RULE.matches("write to uk@example.org")] == ["uk@example.org"]


def test_a_check_decides_which_matches_count() -> None:
    def odd(text: str) -> bool:
        return int(text) % 2 == 1

    rule = SecretRule("odd", r"[0-9]+", check=odd)
    assert rule.check is odd
    assert [m.group() for m in rule.matches("12 13 14 15")] == ["13", "15"]
    assert not rule.found_in("12 14")


@pytest.mark.parametrize(
    "header",
    [
        "Authorization: Basic dXNlcjpwYQ",  # "user:pa" without its padding (10 characters: 2 missing)
        "Authorization: Basic dXNlcjpwYXM",  # "user:pas" without its padding (11 characters: 1 missing)
        "Authorization: Basic dXNlcjpwYXNz",  # "user:pass" (12 characters: none missing)
    ],
)
def test_basic_credentials_are_found_with_or_without_their_padding(header: str) -> None:
    assert [finding.rule for finding in policy().find(header)] == ["basic-auth"]


def test_a_secret_looking_variable_is_looked_for_from_eight_characters() -> None:
    rules = environment_rules({"MY_API_KEY": "12345678", "OTHER_TOKEN": "1234567", "HOME": "/home/someone"})
    assert [rule.name for rule in rules] == ["env:MY_API_KEY"]
    assert rules[0].search("the value 12345678 leaked")


def luhn_check_digit(body: str) -> str:
    """The digit that completes `body` under Luhn, from its definition (ISO/IEC 7812-1, annex B)."""
    total = 0
    for position, char in enumerate(reversed(body), start=1):
        value = int(char) * (2 if position % 2 == 1 else 1)
        total += sum(int(d) for d in str(value))
    return str((10 - total % 10) % 10)


# Published test numbers of the card networks, each passing the check.
VALID = [
    "4111111111111111",
    "4111 1111 1111 1111",
    "4012-8888-8888-1881",
    "5555555555554444",
    "378282246310005",
    "6011111111111117",
    "3566002020360505",
    "4222222222222",
    "3056930009020004",
]


@pytest.mark.parametrize("number", VALID)
def test_a_card_number_that_passes_the_luhn_check_is_found(number: str) -> None:
    assert CARD_NUMBER_RULE.found_in(f"pay with {number} today")


@pytest.mark.parametrize("number", VALID)
def test_the_same_number_with_its_last_digit_changed_is_not(number: str) -> None:
    changed = number[:-1] + str((int(number[-1]) + 1) % 10)
    assert not CARD_NUMBER_RULE.found_in(f"pay with {changed} today")


@pytest.mark.parametrize(("length", "found"), [(12, False), (13, True), (16, True), (19, True), (20, False)])
def test_only_13_to_19_digits_can_be_a_card_number(length: int, found: bool) -> None:
    body = ("4539578763621486" * 2)[: length - 1]
    number = body + luhn_check_digit(body)
    assert CARD_NUMBER_RULE.found_in(f"pay with {number} today") is found
