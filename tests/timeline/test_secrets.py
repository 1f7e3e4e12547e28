"""SecretScanner: its walk, rules, hints and findings, and the everyday credential shapes it refuses or redacts while
prose passes."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import EventTypeRegistry, PinLedger, PinnedModel, SQLiteEventStore
from anagrapheus.errors import SecretInRecording
from anagrapheus.provider import SemanticCallPolicy
from anagrapheus.timeline import StoredEvent
from anagrapheus.timeline.canonical import canonical_json
from anagrapheus.timeline.recording import RecordingHeader, read_recording, write_recording
from anagrapheus.timeline.secrets import (
    CARD_NUMBER_RULE,
    EMAIL_RULE,
    SecretFinding,
    SecretRule,
    SecretScanner,
    environment_rules,
    split_private_keys,
)
from tests.timeline.sample_recording import promoted

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K"


def policy() -> SecretScanner:
    return SecretScanner(environ={})


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


HEADER = RecordingHeader(description="shapes", recorded_with="hand-built pins", rerecord="pytest")

# Built from pieces, so this file holds no string a forge's scanner takes for a live credential.
ALNUM = "A1b2C3d4E5f6G7h8J9k0"
PW = "hunter2" + "-prod"
HEX32 = "0123456789abcdef" * 2
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
OPENAI = "sk-" + "proj-" + ALNUM + ALNUM

# name: (text, rule, what must not be left after redaction)
TEXT_SHAPES: dict[str, tuple[str, str, str]] = {
    "dsn-query-password": (f"postgresql://db.example.com/app?user=app&password={PW}", "password-field", PW),
    "dsn-keyword": (f"host=db.example.com port=5432 dbname=app user=app password={PW}", "password-field", PW),
    "dsn-keyword-letters-only": ("host=db dbname=app password=letmein sslmode=require", "password-field", "letmein"),
    "dsn-keyword-quoted": (f"host=db password='{PW} two' dbname=app", "password-field", PW),
    "url-password-with-slash": ("postgresql://app:pa/ss-" + ALNUM + "@db.example.com/app", "url-credentials", ALNUM),
    "url-password-with-at": ("postgresql://app:" + "pw@rest-" + ALNUM + "@db/app", "url-credentials", ALNUM),
    "query-api_key": ("https://api.example.com/v1/items?api_key=" + ALNUM, "secret-field", ALNUM),
    "query-api-key": ("https://api.example.com/v1/items?page=2&api-key=" + ALNUM, "secret-field", ALNUM),
    "query-key": ("https://maps.example.com/v1/geocode?key=" + ALNUM + "&q=Oslo", "secret-field", ALNUM),
    "x-api-key-in-error-body": (
        'HTTP 401: {"error": "unauthorized", "request": {"headers": {"x-api-key": "' + ALNUM + '"}}}',
        "secret-field",
        ALNUM,
    ),
    "x-api-key-header-line": ("x-api-key: " + ALNUM, "secret-field", ALNUM),
    "azure-api-key-header": ("api-key: " + HEX32, "secret-field", HEX32),
    "azure-api-key-repr": ("{'api-key': '" + HEX32 + "', 'Content-Type': 'application/json'}", "secret-field", HEX32),
    "authorization-token": ("Authorization: Token " + ALNUM, "authorization-header", ALNUM),
    "authorization-upper-bearer": ("Authorization: BEA" + "RER " + ALNUM, "bearer-auth", ALNUM),
    "aws-secret-config": (f"aws_secret_access_key = {AWS_SECRET}", "secret-field", AWS_SECRET),
    "aws-secret-json": ('{"AccessKeyId": "id", "SecretAccessKey": "' + AWS_SECRET + '"}', "secret-field", AWS_SECRET),
    "stripe-live": ("sk_" + "live_" + ALNUM + "xyz", "stripe-key", ALNUM),
    "stripe-restricted": ("rk_" + "live_" + ALNUM + "xyz", "stripe-key", ALNUM),
    "huggingface": ("hf_" + ALNUM + ALNUM, "huggingface-token", ALNUM),
    "groq": ("gsk_" + ALNUM + ALNUM, "groq-key", ALNUM),
    "xai": ("xai-" + ALNUM + ALNUM, "xai-key", ALNUM),
    "config-row-equals": (f"password = {PW}", "password-field", PW),
    "config-row-yaml": (f"db:\n  password: {PW}\n", "password-field", PW),
    "env-file-line": (f"DB_PASS={PW}", "password-field", PW),
    "odbc": (f"Driver={{ODBC}};Server=db;Uid=sa;Pwd={PW};", "password-field", PW),
    "json-text-password": (json.dumps({"user": "app", "password": PW}), "password-field", PW),
    "json-text-escaped-password": (json.dumps(json.dumps({"password": PW})), "password-field", PW),
    "oauth-client-secret-text": (
        json.dumps({"client_id": "1.apps.example.com", "client_secret": "GOCSPX-" + ALNUM}),
        "secret-field",
        ALNUM,
    ),
    "base64-openai-key": (base64.b64encode(OPENAI.encode()).decode(), "base64:openai-key", ALNUM),
    "base64-in-text": (
        "config blob: " + base64.b64encode(json.dumps({"token": "gh" + "p_" + ALNUM * 2}).encode()).decode() + " ok",
        "base64:github-token",
        "Z2hwX",
    ),
    "base64-url-safe": (
        base64.urlsafe_b64encode(("\xff" + OPENAI).encode()).decode(),
        "base64:openai-key",
        ALNUM,
    ),
}

# JSON objects whose key says what the value is: the value needs no shape of its own.
FIELD_SHAPES: dict[str, tuple[dict[str, Any], str, str]] = {
    "config-row": ({"host": "db", "user": "app", "password": "letmein"}, "password-field", "letmein"),
    "camel-case": ({"dbPassword": "s3cret!"}, "password-field", "s3cret!"),
    "prefixed": ({"REDIS_PASS": "cache-pass-9"}, "password-field", "cache-pass-9"),
    "oauth-client-secret": ({"client_id": "x", "client_secret": "GOCSPX-" + ALNUM}, "secret-field", ALNUM),
    "access-token": ({"access_token": "ya29." + ALNUM, "expires_in": 3599}, "secret-field", ALNUM),
}

BENIGN = [
    "Reset your password: click the link we sent you.",
    "Password: required",
    "The password field is required; passwords: 3 rotated this year.",
    "Choose a password = at least 12 characters, Password: 8+ chars",
    "api_key: YOUR_API_KEY",
    "token: Hello",
    "bypass=true pass=10 fail=0 PWD=/home/ana/project",
    "see ?key=name&sort=asc and key=value pairs",
    "http://localhost:8000/docs/@scope/pkg and https://example.com:8443/path",
    "max_tokens=1024 input_tokens: 812",
    'password=******** password="${DB_PASSWORD}" password=<your password>',
    "if password == 'x': return",
    "client = connect(user=user, password=password, host=self.host)",
    "self.token = OAuth2Token.from_dict(token_value_2024)",
    "the secret: keep it safe, said the bearer of unwelcome tidings",
    "Authorization: Basic understanding; the authorization: granted by the board",
    "ssh://git@github.com:org/repo.git",
    "hf_hub_download(repo_id='gpt2'); use sk_test_ mode; model xai-grok-2-latest",
    '"password": 864000, "password": "string"',
    base64.b64encode(b"just some ordinary text that is base64 encoded").decode(),
    base64.b64encode(b"\x01\x02 control bytes are not text \x03").decode(),
    "C:/Program-Files/Some-Vendor/Tools_2024",
    "00000000-0000-7000-8000-000000000001",
]


def pin(seq: int, raw: Any, *, fingerprint: dict[str, str] | None = None) -> StoredEvent:
    return promoted(seq, raw, key=f"p1:tool_call:{seq:064x}", fingerprint=fingerprint)


@pytest.mark.parametrize("shape", TEXT_SHAPES, ids=TEXT_SHAPES.keys())
def test_an_everyday_shape_is_refused_and_redacted_away(tmp_path: Path, shape: str) -> None:
    text, rule, fragment = TEXT_SHAPES[shape]
    events = [pin(1, {"note": "fine"}), pin(2, {"result": {"note": f"got: {text} (done)"}})]

    with pytest.raises(SecretInRecording) as caught:
        write_recording(tmp_path / "run.jsonl", events, header=HEADER)
    assert (caught.value.seq, caught.value.json_path, caught.value.rule) == (2, "$.payload.raw.result.note", rule)
    assert fragment not in str(caught.value)

    path = write_recording(tmp_path / "run.jsonl", events, header=HEADER, redact=SecretScanner())
    written = path.read_text(encoding="utf-8")
    assert fragment not in written and f"[redacted:{rule}:1]" in written
    assert read_recording(path).find_secrets() == []


@pytest.mark.parametrize("shape", FIELD_SHAPES, ids=FIELD_SHAPES.keys())
def test_a_secret_named_field_is_refused_at_its_value_and_redacted_in_place(tmp_path: Path, shape: str) -> None:
    row, rule, value = FIELD_SHAPES[shape]
    name = next(key for key, item in row.items() if isinstance(item, str) and value in item)

    with pytest.raises(SecretInRecording) as caught:
        write_recording(tmp_path / "run.jsonl", [pin(1, {"rows": [row]})], header=HEADER)
    assert (caught.value.json_path, caught.value.rule) == (f"$.payload.raw.rows[0].{name}", rule)

    path = write_recording(tmp_path / "run.jsonl", [pin(1, {"rows": [row]})], header=HEADER, redact=SecretScanner())
    [kept] = read_recording(path).events[0].payload_json()["raw"]["rows"]
    assert kept == {**row, name: f"[redacted:{rule}:1]"}
    assert value not in path.read_text(encoding="utf-8")


def test_benign_text_near_the_shapes_is_written_as_it_is(tmp_path: Path) -> None:
    raw = {"texts": BENIGN, "row": {"password": "", "token": "Hello", "api_key": "YOUR_API_KEY", "secret": "***"}}

    path = write_recording(tmp_path / "run.jsonl", [pin(1, raw)], header=HEADER)

    assert read_recording(path).events[0].payload_json()["raw"] == raw


@pytest.mark.parametrize("name", ["AZURE_OPENAI_KEY", "DB_PASS", "REDIS_PASS", "API_KEY_MISTRAL", "GITLAB_PAT"])
def test_more_environment_names_look_secret(name: str) -> None:
    policy = SecretScanner([], environ={name: "some-long-value"})

    assert [rule.name for rule in policy.rules] == [f"env:{name}"]


@pytest.mark.parametrize(
    "name",
    ["PATH", "PASSENGER_HOME", "MONKEY_BUSINESS", "TOKENIZERS_PARALLELISM", "GIT_ASKPASS", "SSH_KEY_PATH", "PWD"],
)
def test_names_that_only_contain_a_secret_word_do_not(name: str) -> None:
    assert environment_rules({name: "/usr/local/bin:/usr/bin", "GOOGLE_CREDENTIALS": "/home/ana/key.json"}) == ()


def test_an_environment_value_is_found_stripped_percent_encoded_and_base64_encoded(tmp_path: Path) -> None:
    value = "p@ss word/" + "0042"
    environ = {"DB_PASS": f"  {value}\n", "SHORT_TOKEN": " 1234567 "}
    policy = SecretScanner([], environ=environ)
    assert [rule.name for rule in policy.rules] == ["env:DB_PASS"]  # seven characters once stripped: not looked for

    for written in (
        f"connected with {value}",
        "postgresql://db/app?password=" + quote(value, safe=""),
        "form: password=" + quote(value, safe="").lower().replace("%20", "+"),
        "blob " + base64.b64encode(f"secret={value}".encode()).decode(),
    ):
        assert [finding.rule for finding in policy.find({"v": written})][:1] in (
            ["env:DB_PASS"],
            ["base64:env:DB_PASS"],
        ), written
        redacted = policy.redactor().redact_text(written)
        assert value not in redacted and quote(value, safe="") not in redacted and list(policy.find(redacted)) == []
    assert list(policy.find("the value 1234567 and p@ss word/0043")) == []


def operator(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Connected.")])


@pytest.mark.parametrize(
    "instructions",
    [
        f"Connect to the database with host=db user=app password={PW} and report.",
        f"Use postgresql://db/app?sslmode=require&password={PW} to connect.",
        "The configuration is " + json.dumps({"user": "app", "password": PW}) + ".",
        f"The database password is {PW}.",  # prose: only the environment knows it is secret
    ],
    ids=["keyword-dsn", "dsn-query", "json-config", "prose-with-env"],
)
def test_kept_values_never_carry_a_password_from_the_instructions(
    tmp_path: Path, types: EventTypeRegistry, monkeypatch: pytest.MonkeyPatch, instructions: str
) -> None:
    monkeypatch.setenv("DB_PASS", PW)
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types, unit_id="u")
        policy = SemanticCallPolicy(keep_values=True)
        model = PinnedModel(FunctionModel(operator, model_name="op"), ledger, policy=policy)
        Agent(model, instructions=instructions).run_sync("Go.")
        ledger.commit()
        events = list(store.read(namespace="anagrapheus", type="pin_promoted"))
        path = write_recording(tmp_path / "run.jsonl", events, header=HEADER)

    [fingerprint] = [e.payload_json()["fingerprint"] for e in read_recording(path).events]
    kept = fingerprint["=instructions[0]"]
    assert kept.startswith('{"content":') and "[redacted:" in kept and "[redacted:" in fingerprint["=messages[0]"]
    assert PW not in path.read_text(encoding="utf-8")
    assert PW.encode() not in (tmp_path / "live.db").read_bytes()


def test_a_kept_value_that_escaped_redaction_is_still_refused_when_written(tmp_path: Path) -> None:
    # A fingerprint's value entry is written like any other string of the line: the same scan refuses it.
    leaked = pin(1, {"ok": True}, fingerprint={"instructions": "0" * 16, "=instructions": f'"password={PW}"'})

    with pytest.raises(SecretInRecording) as caught:
        write_recording(tmp_path / "run.jsonl", [leaked], header=HEADER)
    assert (caught.value.json_path, caught.value.rule) == ("$.payload.fingerprint['=instructions']", "password-field")


PEM = (
    "-----BEGIN RSA "
    + "PRIVATE KEY-----\nMIIEowIBAAKCAQEA"
    + ALNUM
    + "\n"
    + ALNUM[::-1]
    + "\n-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    "raw",
    [{"lines": PEM.splitlines()}, {"head": PEM[:60]}, {"chunks": [PEM[:40], PEM[40:]]}],
    ids=["split-into-lines", "cut-before-its-end", "split-into-chunks"],
)
def test_a_private_key_not_whole_in_one_string_is_refused_even_under_redaction(tmp_path: Path, raw: Any) -> None:
    for redact in (None, SecretScanner()):
        with pytest.raises(SecretInRecording) as caught:
            write_recording(tmp_path / "run.jsonl", [pin(1, raw)], header=HEADER, redact=redact)
        assert caught.value.rule == "pem-private-key"
        assert ALNUM not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_private_key_whole_in_one_string_is_redacted_with_its_body() -> None:
    redactor = SecretScanner(environ={}).redactor()

    assert redactor.redact({"key": f"key: {PEM} (keep)"}) == {"key": "key: [redacted:pem-private-key:1] (keep)"}
    # With no END in the string, the rest of it goes: none of the body is left where the BEGIN was.
    assert redactor.redact_text("key: " + PEM[:60]) == "key: [redacted:pem-private-key:2]"
    assert [f.path for f in split_private_keys({"a": [PEM, PEM[:60]]}, seq=3)] == ["$.a[1]"]


def test_a_url_password_holding_at_signs_is_redacted_to_the_last_at_before_the_host() -> None:
    redactor = SecretScanner(environ={}).redactor()

    redacted = redactor.redact_text("postgresql://app:pw@rest@db/app?user=a@b")
    assert redacted == "postgresql[redacted:url-credentials:1]db/app?user=a@b"


def test_base64_is_decoded_only_when_the_policy_asks() -> None:
    blob = base64.b64encode(OPENAI.encode()).decode()
    ordinary = base64.b64encode(b"an ordinary sentence, encoded").decode()

    assert list(SecretScanner(environ={}, encoded=False).find(blob)) == []
    assert SecretScanner(environ={}, encoded=False).redactor().redact_text(blob) == blob
    redactor = SecretScanner(environ={}).redactor()
    assert redactor.redact_text(f"{ordinary} {blob}") == f"{ordinary} [redacted:base64:openai-key:1]"


def test_an_environment_value_with_quotes_is_found_json_escaped_too() -> None:
    value = 'say "open sesame" 42'
    policy = SecretScanner([], environ={"VAULT_PASSPHRASE": value})

    assert [f.rule for f in policy.find(json.dumps({"v": value}))] == ["env:VAULT_PASSPHRASE"]


def test_a_rule_whose_secret_group_may_be_absent_redacts_the_whole_match() -> None:
    rule = SecretRule("pin", r"PIN(?: (?P<secret>[0-9]{4}))?!")
    redactor = SecretScanner([rule], environ={}).redactor()

    assert redactor.redact_text("PIN 1234! and PIN!") == "PIN [redacted:pin:1]! and [redacted:pin:2]"


def test_a_key_joined_to_an_id_by_a_dash_or_underscore_is_still_a_key() -> None:
    # A unit id such as `chat-sk-ant-...` (issue #35); a word that only ends in "sk" (`task-...`) is none.
    redactor = SecretScanner().redactor()
    anthropic, openai = "sk-ant-api03-" + "b" * 90, "sk-proj-" + "c" * 40
    assert redactor.redact_text(f"chat-{anthropic}") == "chat-[redacted:anthropic-key:1]"
    assert redactor.redact_text(f"x_{openai}") == "x_[redacted:openai-key:1]"
    assert redactor.redact_text("task-" + "d" * 30) == "task-" + "d" * 30


def test_an_azure_key_printed_after_a_space_is_found() -> None:
    # `api-key <32 hex>` in a pinned error text was written by `export` (issue #35).
    key = "0123456789abcdef0123456789abcdef"
    redactor = SecretScanner().redactor()
    assert (
        redactor.redact_text(f"401: api-key {key} is invalid") == "401: api-key [redacted:azure-api-key:1] is invalid"
    )
    assert key not in redactor.redact_text(f"API key {key}")
    assert redactor.redact_text("the api-key header is required") == "the api-key header is required"
    assert [finding.rule for finding in SecretScanner().scan({"error": f"api_key {key}"})] == ["azure-api-key"]
