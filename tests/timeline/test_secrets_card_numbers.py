"""The opt-in card-number rule: 13 to 19 digits that pass the Luhn check, and nothing else."""

from __future__ import annotations

import pytest

from anagrapheus.timeline.secrets import CARD_NUMBER_RULE


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
