"""The default call policy is the provider's `SemanticCallPolicy`, named by the stamping the timeline is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from anagrapheus import ReplayPins, SemanticCallPolicy, read_recording
from anagrapheus.errors import ProvenanceMismatch, UsageError
from anagrapheus.provider.provenance import STAMPING, provenance_of_pins
from anagrapheus.timeline.provenance import Stamping, call_policy_identity, check_provenance, own_provenance

DATA = Path(__file__).resolve().parents[1] / "data"


def test_no_policy_named_means_the_providers_default() -> None:
    assert call_policy_identity(None) == (SemanticCallPolicy.name, SemanticCallPolicy.version) == ("semantic", 1)
    assert call_policy_identity(None, stamping=STAMPING) == ("semantic", 1)
    stamped = own_provenance()
    assert (stamped.call_policy, stamped.call_policy_version) == ("semantic", 1)


@pytest.mark.parametrize("name", ["negotiation-before-inputs.jsonl", "negotiation-sorted-answers.jsonl"])
def test_a_committed_recording_stamped_with_the_default_policy_loads_without_one(name: str) -> None:
    recording = read_recording(DATA / name, provenance="warn")
    provenance = recording.header.provenance
    assert provenance is not None and (provenance.call_policy, provenance.call_policy_version) == ("semantic", 1)


def test_another_default_passed_is_the_one_checked() -> None:
    recorded = provenance_of_pins([], call_policy=None)
    terse = Stamping(provenance_of_pins, default_call_policy=("terse", 3))
    assert call_policy_identity(None, stamping=terse) == ("terse", 3)
    with pytest.raises(ProvenanceMismatch) as caught:
        check_provenance(recorded, path="run.jsonl", rerecord="pytest", stamping=terse)
    assert caught.value.recorded == ("semantic", 1) and caught.value.current == ("terse", 3)
    # Nothing of the process changed: a call without one still checks under the provider's default.
    check_provenance(recorded, path="run.jsonl", rerecord="pytest")


def test_a_stamping_without_a_default_refuses_no_policy() -> None:
    with pytest.raises(UsageError, match="names no default call policy"):
        call_policy_identity(None, stamping=Stamping())


@pytest.mark.parametrize("name", ["negotiation-before-inputs.jsonl"])
def test_a_replay_reads_its_recording_under_the_stamping_passed(name: str) -> None:
    terse = Stamping(provenance_of_pins, default_call_policy=("terse", 3))
    with pytest.raises(ProvenanceMismatch) as caught:
        ReplayPins.from_recording(DATA / name, stamping=terse)
    assert caught.value.current == ("terse", 3)
    with pytest.raises(ProvenanceMismatch):
        read_recording(DATA / name, stamping=terse)
    assert len(ReplayPins.from_recording(DATA / name, stamping=STAMPING)) > 0
