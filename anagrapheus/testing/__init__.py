"""What users' test suites import: compare two runs, and judge a candidate agent against a recording."""

from anagrapheus.testing.compare import VOLATILE_FIELDS, assert_same_run, first_difference
from anagrapheus.testing.regress import AgentBuilder, Turn, aregress, regress
from anagrapheus.testing.verdict import (
    Conversation,
    Exchange,
    Invariant,
    InvariantResult,
    InvariantStatus,
    Verdict,
    VerdictStatus,
)

__all__ = [
    "VOLATILE_FIELDS",
    "AgentBuilder",
    "Conversation",
    "Exchange",
    "Invariant",
    "InvariantResult",
    "InvariantStatus",
    "Turn",
    "Verdict",
    "VerdictStatus",
    "aregress",
    "assert_same_run",
    "first_difference",
    "regress",
]
