"""What users' test suites import: the pytest plugin's recording sessions, run comparison, and regression verdicts."""

from anagrapheus.testing.calls import (
    ToolCall,
    assert_called,
    assert_called_in_order,
    assert_called_once,
    assert_not_called,
    tool_calls,
)
from anagrapheus.testing.compare import (
    PAIRED_FIELDS,
    PER_RUN_FIELDS,
    PROVIDER_ASSIGNED_FIELDS,
    assert_same_run,
    comparable,
    first_difference,
)
from anagrapheus.testing.regress import AgentBuilder, Turn, aregress, regress
from anagrapheus.testing.rerun import RerunOutcome, rerun
from anagrapheus.testing.session import Mode, RecordingSession
from anagrapheus.testing.trials import TrialOutcome, trials
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
    "PAIRED_FIELDS",
    "PER_RUN_FIELDS",
    "PROVIDER_ASSIGNED_FIELDS",
    "AgentBuilder",
    "Conversation",
    "Exchange",
    "Invariant",
    "InvariantResult",
    "InvariantStatus",
    "Mode",
    "RecordingSession",
    "RerunOutcome",
    "ToolCall",
    "TrialOutcome",
    "Turn",
    "Verdict",
    "VerdictStatus",
    "aregress",
    "assert_called",
    "assert_called_in_order",
    "assert_called_once",
    "assert_not_called",
    "assert_same_run",
    "comparable",
    "first_difference",
    "regress",
    "rerun",
    "tool_calls",
    "trials",
]
