"""SeededRun: a clock one second a reading, and UUIDv7 ids stamped with it, their random bits from the seed."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

from anagrapheus.timeline.seeded import EPOCH, SeededRun

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_the_clock_ticks_one_second_a_reading_from_its_start() -> None:
    run = SeededRun("s", start=START)

    assert [run.now() for _ in range(3)] == [START + timedelta(seconds=n) for n in (1, 2, 3)]
    assert SeededRun("s").now() == EPOCH + timedelta(seconds=1)


def test_an_id_is_a_uuid7_laid_out_as_rfc_9562_says_with_the_seeds_bits() -> None:
    run = SeededRun("talks", start=START)
    seed = random.Random("talks")

    for ticks in range(4):
        if ticks:
            run.now()
        text = run.new_id()
        value = uuid.UUID(text)
        millis = int((START + timedelta(seconds=ticks)).timestamp() * 1000)
        rand_a, rand_b = seed.getrandbits(12), seed.getrandbits(62)

        assert text == str(value) and value.version == 7 and value.variant == uuid.RFC_4122
        assert value.int >> 80 == millis  # unix_ts_ms: the clock's current instant
        assert (value.int >> 64) & 0xFFF == rand_a
        assert value.int & (2**62 - 1) == rand_b


def test_one_seed_gives_one_sequence_and_another_seed_another() -> None:
    def ids(seed: str) -> list[str]:
        run = SeededRun(seed)
        return [run.new_id() for _ in range(3)]

    assert ids("a") == ids("a")
    assert ids("a") != ids("b")
    assert len(set(ids("a"))) == 3
