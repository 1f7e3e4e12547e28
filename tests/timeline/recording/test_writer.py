"""Writing a recording: what it refuses (a secret, events out of seq order, a path it cannot write), and redaction."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import stat
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus.errors import PinMiss, RecordingError, SecretInRecording, UsageError
from anagrapheus.provider import PinnedModel, pinned_tool
from anagrapheus.timeline import (
    CARD_NUMBER_RULE,
    DEFAULT_RULES,
    EMAIL_RULE,
    EventTypeRegistry,
    PinLedger,
    ReplayPins,
    SecretRule,
    SecretScanner,
    SQLiteEventStore,
    StoredEvent,
)
from anagrapheus.timeline.recording import RecordingHeader, read_recording, write_recording
from tests.timeline.sample_recording import HEADER, logged_events, promoted


def test_a_recording_that_cannot_be_written_is_refused_naming_it_and_why(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").mkdir()
    (tmp_path / "run.jsonl" / "inside").write_text("a directory in the way")
    with pytest.raises(RecordingError) as raised:
        write_recording(tmp_path / "run.jsonl", [], header=HEADER)
    assert (raised.value.path, raised.value.line) == (str(tmp_path / "run.jsonl"), None)
    assert str(raised.value) == f"{tmp_path / 'run.jsonl'}: cannot write the recording (Is a directory)"
    # The temporary file beside it is gone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_events_with_one_seq_are_refused_on_write(tmp_path: Path) -> None:
    first, second, _ = logged_events(tmp_path / "run.db")
    with pytest.raises(UsageError, match="seq 1 follows seq 1"):
        write_recording(tmp_path / "run.jsonl", [first, dataclasses.replace(second, seq=1)], header=HEADER)


def test_a_secret_is_refused_naming_the_recording_not_written(tmp_path: Path) -> None:
    header = {**HEADER.model_dump(), "details": {"endpoint": "https://user:hunter2hunter2@example.com/x"}}
    with pytest.raises(SecretInRecording) as raised:
        write_recording(tmp_path / "run.jsonl", [], header=header)
    assert raised.value.path == str(tmp_path / "run.jsonl")


SECRETS_HEADER = RecordingHeader(description="secrets tests", recorded_with="hand-built pins", rerecord="pytest")

# Built from pieces, so this file holds no string that a scanner (ours or a forge's) takes for a live credential.
ALNUM = "A1b2C3d4E5f6G7h8J9k0"
SHAPES = {
    "openai-key": "sk-" + ALNUM + ALNUM,
    "openai-project-key": "sk-" + "proj-" + ALNUM + ALNUM,
    "anthropic-key": "sk-" + "ant-api03-" + ALNUM + ALNUM,
    "google-api-key": "AI" + "za" + (ALNUM * 2)[:35],
    "aws-access-key": "AK" + "IA" + "IOSFODNN7EXAMPLE",
    "github-token": "gh" + "p_" + (ALNUM * 2)[:36],
    "github-fine-grained": "github" + "_pat_" + ALNUM + "_" + ALNUM,
    "slack-token": "xo" + "xb-" + "1234567890-" + ALNUM,
    "jwt": "ey"
    + "JhbGciOiJIUzI1NiJ9."
    + "ey"
    + "JzdWIiOiIxMjM0NTY3ODkwIn0."
    + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "pem-private-key": "-----BEGIN RSA "
    + "PRIVATE KEY-----\nMIIEowIBAAKCAQEA"
    + ALNUM
    + "\n-----END RSA PRIVATE KEY-----",
    "bearer-auth": "Authorization: Bear" + "er " + ALNUM + "xyz",
    "basic-auth": "Authorization: Bas" + "ic " + base64.b64encode(b"admin:hunter2-" + ALNUM.encode()).decode(),
    "url-credentials": "postgres://admin:" + "hunter2" + "@db.example.com:5432/app",
    "url-password-only": "redis://:" + "hunter2-cache" + "@cache.example.com:6379/0",
}
RULE_OF = {
    "openai-project-key": "openai-key",
    "github-fine-grained": "github-token",
    "url-password-only": "url-credentials",
}


def pin(seq: int, raw: Any, *, key_char: str = "a") -> StoredEvent:
    return promoted(seq, raw, key="p1:tool_call:" + key_char * 64)


def clean_pin(seq: int) -> StoredEvent:
    return pin(seq, {"note": "the bearer of unwelcome tidings has a basic understanding of task-12345678901234567890"})


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPES.keys())
def test_each_secret_shape_is_refused_naming_seq_path_and_rule_but_never_the_value(tmp_path: Path, shape: str) -> None:
    secret = SHAPES[shape]
    target = tmp_path / "run.jsonl"
    events = [clean_pin(1), pin(3, {"result": {"note": f"the key is {secret} (keep it safe)"}}, key_char="b")]

    with pytest.raises(SecretInRecording) as caught:
        write_recording(target, events, header=SECRETS_HEADER)

    error = caught.value
    assert (error.seq, error.json_path, error.rule) == (3, "$.payload.raw.result.note", RULE_OF.get(shape, shape))
    assert error.path == str(target) and str(error).startswith(f"refusing to write {target}: ")
    assert "seq 3" in str(error) and "$.payload.raw.result.note" in str(error) and repr(error.rule) in str(error)
    for fragment in (secret, ALNUM, "hunter2"):
        assert fragment not in str(error) and fragment not in repr(error.args)
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary file left behind either


def test_a_secret_is_searched_for_as_written_after_unicode_normalisation(tmp_path: Path) -> None:
    # U+212A KELVIN SIGN is written as the letter K: the key is whole in the file, so it is refused before.
    secret = "sk-" + "proj-" + "FAKE" * 8
    disguised = secret.replace("K", "\u212a")
    assert disguised != secret and unicodedata.normalize("NFC", disguised) == secret
    with pytest.raises(SecretInRecording) as caught:
        write_recording(
            tmp_path / "run.jsonl", [clean_pin(1), pin(2, {"note": disguised}, key_char="b")], header=SECRETS_HEADER
        )
    assert (caught.value.seq, caught.value.json_path, caught.value.rule) == (2, "$.payload.raw.note", "openai-key")
    header = {**SECRETS_HEADER.model_dump(), "details": {"note": disguised}}
    with pytest.raises(SecretInRecording) as in_header:
        write_recording(tmp_path / "run.jsonl", [clean_pin(1)], header=header)
    assert (in_header.value.seq, in_header.value.rule) == (None, "openai-key")
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_refused_rewrite_leaves_the_previous_recording_alone(tmp_path: Path) -> None:
    target = write_recording(tmp_path / "run.jsonl", [clean_pin(1)], header=SECRETS_HEADER)
    before = target.read_bytes()

    with pytest.raises(SecretInRecording):
        write_recording(target, [clean_pin(1), pin(2, [SHAPES["jwt"]], key_char="b")], header=SECRETS_HEADER)

    assert target.read_bytes() == before


def test_ordinary_prose_near_the_shapes_is_not_refused(tmp_path: Path) -> None:
    path = write_recording(tmp_path / "run.jsonl", [clean_pin(1)], header=SECRETS_HEADER)

    assert read_recording(path).events[0].payload_json()["raw"] == clean_pin(1).payload_json()["raw"]


def test_a_secret_in_the_header_is_refused_as_the_header(tmp_path: Path) -> None:
    header = {**SECRETS_HEADER.model_dump(), "details": {"endpoint": SHAPES["url-credentials"]}}

    with pytest.raises(SecretInRecording) as caught:
        write_recording(tmp_path / "run.jsonl", [clean_pin(1)], header=header)

    assert (caught.value.seq, caught.value.json_path, caught.value.rule) == (
        None,
        "$.details.endpoint",
        "url-credentials",
    )
    assert "the header" in str(caught.value) and "hunter2" not in str(caught.value)


def test_a_secret_used_as_an_object_key_is_named_by_position_not_by_text(tmp_path: Path) -> None:
    with pytest.raises(SecretInRecording) as caught:
        write_recording(
            tmp_path / "run.jsonl", [pin(1, {"tokens": {"plain": 1, SHAPES["openai-key"]: 2}})], header=SECRETS_HEADER
        )

    assert caught.value.json_path == "$.payload.raw.tokens.<key 1>"
    assert SHAPES["openai-key"] not in str(caught.value)


def test_a_secret_behind_json_escapes_is_still_found(tmp_path: Path) -> None:
    # In the file a newline before the key is written `\n`: the scan reads the string, not its escaped form.
    with pytest.raises(SecretInRecording) as caught:
        write_recording(tmp_path / "run.jsonl", [pin(1, "line one\n" + SHAPES["openai-key"])], header=SECRETS_HEADER)

    assert caught.value.rule == "openai-key"


def test_the_exact_value_of_a_secret_looking_environment_variable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = "acme-live-0042-staging"  # no shape of its own: only the environment says it is secret
    monkeypatch.setenv("ACME_API_KEY", value)
    monkeypatch.setenv("ACME_REGION", "eu-west-1-region")  # not secret-looking: written as it is

    with pytest.raises(SecretInRecording) as caught:
        write_recording(tmp_path / "run.jsonl", [pin(1, {"used": f"key={value}"})], header=SECRETS_HEADER)
    assert caught.value.rule == "env:ACME_API_KEY"
    assert value not in str(caught.value)

    path = write_recording(tmp_path / "ok.jsonl", [pin(1, {"region": "eu-west-1-region"})], header=SECRETS_HEADER)
    assert read_recording(path).events[0].payload_json()["raw"] == {"region": "eu-west-1-region"}


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "STRIPE_SECRET", "X_API_KEY"])
def test_environment_variable_names_that_look_secret(name: str) -> None:
    policy = SecretScanner([], environ={name: "some-long-value", "HOME": "/home/someone-else"})

    assert [rule.name for rule in policy.rules] == [f"env:{name}"]


def test_the_opt_out_writes_the_value_as_it_is(tmp_path: Path) -> None:
    path = write_recording(
        tmp_path / "run.jsonl", [pin(1, SHAPES["github-token"])], header=SECRETS_HEADER, dangerously_keep_secrets=True
    )

    assert read_recording(path).events[0].payload_json()["raw"] == SHAPES["github-token"]


def test_redaction_writes_stable_placeholders(tmp_path: Path) -> None:
    first, second = SHAPES["github-token"], "gh" + "p_" + (ALNUM[::-1] * 2)[:36]
    events = [
        pin(1, {"a": f"token {first}", "b": [first, second]}),
        pin(2, {"again": first}, key_char="b"),
    ]

    path = write_recording(tmp_path / "run.jsonl", events, header=SECRETS_HEADER, redact=SecretScanner())
    again = write_recording(tmp_path / "again.jsonl", events, header=SECRETS_HEADER, redact=SecretScanner())

    raws = [event.payload_json()["raw"] for event in read_recording(path).events]
    assert raws == [
        {"a": "token [redacted:github-token:1]", "b": ["[redacted:github-token:1]", "[redacted:github-token:2]"]},
        {"again": "[redacted:github-token:1]"},
    ]
    assert path.read_bytes() == again.read_bytes()
    assert first not in path.read_text() and second not in path.read_text()


def test_email_and_card_numbers_are_redacted_only_when_opted_in(tmp_path: Path) -> None:
    raw = {"contact": "write to ana.k@example.org", "card": "4111 1111 1111 1111", "not_a_card": "4111 1111 1111 1112"}

    plain = write_recording(tmp_path / "plain.jsonl", [pin(1, raw)], header=SECRETS_HEADER)
    assert read_recording(plain).events[0].payload_json()["raw"] == raw

    policy = SecretScanner((*DEFAULT_RULES, EMAIL_RULE, CARD_NUMBER_RULE))
    redacted = write_recording(tmp_path / "redacted.jsonl", [pin(1, raw)], header=SECRETS_HEADER, redact=policy)
    assert read_recording(redacted).events[0].payload_json()["raw"] == {
        "contact": "write to [redacted:email:1]",
        "card": "[redacted:card-number:1]",
        "not_a_card": "4111 1111 1111 1112",  # fails the Luhn check
    }


def test_your_own_rule_redacts_and_a_default_shape_left_unredacted_is_still_refused(tmp_path: Path) -> None:
    ticket = SecretRule("ticket", r"TKT-[0-9]{6}", hint="TKT-")
    events = [pin(1, {"ticket": "TKT-123456", "key": SHAPES["openai-key"]})]

    with pytest.raises(SecretInRecording) as caught:
        write_recording(tmp_path / "run.jsonl", events, header=SECRETS_HEADER, redact=SecretScanner([ticket]))
    assert caught.value.rule == "openai-key"

    path = write_recording(
        tmp_path / "run.jsonl", events, header=SECRETS_HEADER, redact=SecretScanner([*DEFAULT_RULES, ticket])
    )
    assert read_recording(path).events[0].payload_json()["raw"] == {
        "ticket": "[redacted:ticket:1]",
        "key": "[redacted:openai-key:1]",
    }


def test_a_read_recording_reports_its_secrets_for_a_check(tmp_path: Path) -> None:
    path = write_recording(
        tmp_path / "run.jsonl",
        [clean_pin(1), pin(2, {"k": SHAPES["slack-token"]}, key_char="b")],
        header=SECRETS_HEADER,
        dangerously_keep_secrets=True,
    )

    findings = read_recording(path).find_secrets()

    assert [(f.seq, f.path, f.rule) for f in findings] == [(2, "$.payload.raw.k", "slack-token")]
    assert "seq 2 at $.payload.raw.k" in findings[0].describe()


def test_a_check_finds_secrets_in_the_header_and_under_the_policy_given(tmp_path: Path) -> None:
    ticket = SecretRule("ticket", r"TKT-[0-9]{6}", hint="TKT-")
    header = {**SECRETS_HEADER.model_dump(), "details": {"endpoint": SHAPES["url-credentials"]}}
    path = write_recording(
        tmp_path / "run.jsonl",
        [pin(1, {"ticket": "TKT-123456"})],
        header=header,
        dangerously_keep_secrets=True,
    )
    recording = read_recording(path)

    assert [(f.seq, f.path, f.rule) for f in recording.find_secrets()] == [
        (None, "$.details.endpoint", "url-credentials")
    ]
    assert [(f.seq, f.path, f.rule) for f in recording.find_secrets(SecretScanner([ticket]))] == [
        (1, "$.payload.raw.ticket", "ticket")
    ]


@given(st.text(max_size=40), st.sampled_from(sorted(SHAPES)), st.text(max_size=40))
def test_a_shape_is_found_whatever_text_surrounds_it_and_redaction_removes_it(
    before: str, shape: str, after: str
) -> None:
    # Separated by a space: a shape glued to a word of its own alphabet is deliberately not taken for a credential.
    text = f"{before} {SHAPES[shape]} {after}"
    policy = SecretScanner(environ={})

    assert [f.rule for f in policy.find({"v": text})][:1] == [RULE_OF.get(shape, shape)]
    redacted = policy.redactor().redact({"v": text})
    assert list(policy.find(redacted)) == []


def test_recordings_are_owner_only_unless_asked_otherwise(tmp_path: Path) -> None:
    private = write_recording(tmp_path / "private.jsonl", [clean_pin(1)], header=SECRETS_HEADER)
    shared = write_recording(tmp_path / "shared.jsonl", [clean_pin(1)], header=SECRETS_HEADER, mode=0o644)

    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o644


def test_a_plain_mapping_is_a_header(tmp_path: Path, types: EventTypeRegistry) -> None:
    fields = {"description": "a mapping", "recorded_with": "hand-built pins", "rerecord": "pytest", "models": {}}
    with SQLiteEventStore(tmp_path / "run.db"):
        path = write_recording(tmp_path / "run.jsonl", [clean_pin(1)], header=fields)

    header = read_recording(path, registry=types).header
    assert (header.description, header.recorded_with, header.rerecord) == ("a mapping", "hand-built pins", "pytest")
    assert json.loads(path.read_text().splitlines()[0])["description"] == "a mapping"


def test_a_mapping_that_is_no_header_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="rerecord: Field required"):
        write_recording(tmp_path / "run.jsonl", [], header={"description": "d", "recorded_with": "w"})


def deploy_agent(resolver: PinLedger | ReplayPins, *, read_back: bool) -> Agent[None, str]:
    """An operator whose tool returns a key; with `read_back`, the model reads the key in its next request."""

    def issue_deploy_key(repo: str) -> str:
        """Issue a deploy key for a repository."""
        return f"key for {repo}: {SHAPES['github-token']}"

    def operator(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        if read_back and not returns:
            return ModelResponse(parts=[ToolCallPart("issue_deploy_key", {"repo": "fisheries"})])
        # Without read-back the model quotes a key of its own in its final answer; nothing sends it back.
        return ModelResponse(parts=[TextPart(f"Done. Use {SHAPES['openai-key']} from now on.")])

    model = PinnedModel(FunctionModel(operator, model_name="operator"), resolver)
    return Agent(model, tools=[pinned_tool(resolver, issue_deploy_key)])


@pytest.mark.parametrize("read_back", [False, True], ids=["value-ends-the-run", "value-read-back-by-the-model"])
def test_a_redacted_recording_replays_the_placeholder_and_misses_where_it_is_read_back(
    tmp_path: Path, types: EventTypeRegistry, read_back: bool
) -> None:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types, unit_id="u")
        deploy_agent(ledger, read_back=read_back).run_sync("Give the fisheries repository a deploy key.")
        ledger.commit()
        path = write_recording(
            tmp_path / "run.jsonl",
            store.read(namespace="anagrapheus", type="pin_promoted"),
            header=SECRETS_HEADER,
            redact=SecretScanner(),
        )

    replay = ReplayPins.from_events(read_recording(path, registry=types).events, types)
    if not read_back:
        result = deploy_agent(replay, read_back=False).run_sync("Give the fisheries repository a deploy key.")
        assert result.output == "Done. Use [redacted:openai-key:1] from now on."
        return
    with pytest.raises(PinMiss) as caught:
        deploy_agent(replay, read_back=True).run_sync("Give the fisheries repository a deploy key.")
    # The tool answered with the placeholder; the next model call carries it, so its key was never recorded.
    assert (caught.value.divergence.kind, caught.value.divergence.after_hits) == ("model_call", 2)
    assert caught.value.divergence.moved == ("messages[2]",)


def test_redacting_a_private_key_removes_its_body_too(tmp_path: Path) -> None:
    path = write_recording(
        tmp_path / "run.jsonl",
        [pin(1, {"key": SHAPES["pem-private-key"]})],
        header=SECRETS_HEADER,
        redact=SecretScanner(),
    )

    assert read_recording(path).events[0].payload_json()["raw"] == {"key": "[redacted:pem-private-key:1]"}
    assert "MIIE" not in path.read_text(encoding="utf-8")


# Recording again over a file that holds the same run (issue #33): a newer pydantic-ai changes nothing.


def provenance(**versions: object) -> dict[str, Any]:
    return {
        "anagrapheus": "0.1.0",
        "pydantic_ai": "2.68.0",
        "python": "3.11.7",
        "key_scheme": "p1",
        "call_policy": "semantic",
        "call_policy_version": 1,
    } | versions


def header(**versions: object) -> RecordingHeader:
    return HEADER.model_copy(update={"provenance": provenance(**versions)})


def test_recording_the_same_events_again_under_other_versions_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    events = logged_events(tmp_path / "log.db")
    path = tmp_path / "run.jsonl"
    write_recording(path, events, header=header())
    first = path.read_bytes()
    write_recording(path, events, header=header(pydantic_ai="2.78.0", python="3.12.1", anagrapheus="0.2.0"))
    assert path.read_bytes() == first
    assert json.loads(first.splitlines()[0])["provenance"]["pydantic_ai"] == "2.68.0"


def test_recording_again_rewrites_the_file_when_an_event_or_anything_else_in_the_header_changed(
    tmp_path: Path,
) -> None:
    events = logged_events(tmp_path / "log.db")
    path = tmp_path / "run.jsonl"
    write_recording(path, events, header=header())
    write_recording(path, events[:-1], header=header(pydantic_ai="2.78.0"))
    assert json.loads(path.read_bytes().splitlines()[0])["provenance"]["pydantic_ai"] == "2.78.0"
    write_recording(path, events[:-1], header=header(pydantic_ai="2.78.0", key_scheme="p2"))
    assert json.loads(path.read_bytes().splitlines()[0])["provenance"]["key_scheme"] == "p2"
    changed = HEADER.model_copy(update={"description": "Another run.", "provenance": provenance(pydantic_ai="2.78.0")})
    write_recording(path, events[:-1], header=changed)
    assert json.loads(path.read_bytes().splitlines()[0])["description"] == "Another run."
