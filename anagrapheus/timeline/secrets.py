"""Credential shapes a recording must not carry: the rules, the scan that finds them, and redaction."""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from anagrapheus.deprecation import moved_names
from anagrapheus.timeline.canonical import JSONValue, canonical_json

__all__ = [
    "CARD_NUMBER_RULE",
    "DEFAULT_RULES",
    "EMAIL_RULE",
    "PASSWORD_FIELD_RULE",
    "SECRET_FIELD_RULE",
    "Redactor",
    "SecretFinding",
    "SecretRule",
    "SecretScanner",
    "environment_rules",
    "masked_dsn",
    "masked_message",
    "split_private_keys",
]


@dataclass(frozen=True, slots=True, init=False)
class SecretRule:
    """A named credential shape: a regex searched within each string, and an optional check of each match.

    Patterns are searched inside every string (and object key) of a recording, so they must not be
    anchored with `^` or `$`; use lookarounds to mark where a credential starts and ends. A pattern
    that opens with a literal, or a `hint`, keeps the scan of a large recording fast. When the pattern
    has a group named `secret`, only that group is checked and redacted (`password=` stays, its value
    goes). `field` names object keys (matched whole) whose string value is the credential, whatever it
    holds: `{"password": "hunter2"}` is found although `hunter2` has no shape of its own.
    """

    name: str
    """What the rule finds (`openai-key`, `jwt`, ...); errors and placeholders name it, never the match."""
    pattern: re.Pattern[str]
    """The regex searched within each string."""
    check: Callable[[str], bool] | None
    """Decides whether a match (its `secret` group, if any) really is a credential; None accepts every match."""
    hint: str | tuple[str, ...] | Callable[[str], object] | None
    """A literal every match contains (a tuple: one of them; a callable: a cheap test true of any text with a match).

    Text without it is passed over without running `pattern`."""
    field: re.Pattern[str] | None
    """Object keys whose string values are credentials when `check` accepts them; None looks at no key."""

    def __init__(
        self,
        name: str,
        pattern: str | re.Pattern[str],
        *,
        check: Callable[[str], bool] | None = None,
        hint: str | tuple[str, ...] | Callable[[str], object] | None = None,
        field: str | re.Pattern[str] | None = None,
    ) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "pattern", re.compile(pattern))
        object.__setattr__(self, "check", check)
        object.__setattr__(self, "hint", hint)
        object.__setattr__(self, "field", None if field is None else re.compile(field))

    def _passed_over(self, text: str) -> bool:
        """Say whether `text` lacks the hint, so that it certainly holds no match."""
        hint = self.hint
        if hint is None:
            return False
        if isinstance(hint, str):
            return hint not in text
        if callable(hint):
            return not hint(text)
        return not any(literal in text for literal in hint)

    def search(self, text: str) -> bool:
        """Say whether the regex matches anywhere in `text`, before any check: a cheap, over-eager first pass."""
        if self._passed_over(text):
            return False
        return self.pattern.search(text) is not None

    def matches(self, text: str) -> Iterator[re.Match[str]]:
        """Yield each match of the rule in `text` that passes its check."""
        if self._passed_over(text):
            return
        for match in self.pattern.finditer(text):
            if self.check is None or self.check(_secret_of(match)):
                yield match

    def found_in(self, text: str) -> bool:
        """Say whether `text` holds at least one match that passes the check."""
        if self.check is None:
            return self.search(text)
        return any(True for _ in self.matches(text))

    def holds_field(self, key: str, value: object) -> bool:
        """Say whether `value`, found under the object key `key`, is a credential by this rule's `field`."""
        if self.field is None or not isinstance(value, str) or not self.field.fullmatch(key):
            return False
        return self.check is None or self.check(value)


def _secret_of(match: re.Match[str]) -> str:
    """The part of a match that is the credential: its `secret` group when the pattern has one, else all of it."""
    if "secret" in match.re.groupindex:
        secret = match.group("secret")
        if secret is not None:
            return secret
    return match.group()


def _basic_credentials(match: str) -> bool:
    # "Basic understanding" is prose; "Basic dXNlcjpwYXNz" decodes to "user:pass". Only the latter is refused.
    token = match.split()[-1]
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _luhn(match: str) -> bool:
    digits = [int(c) for c in match if c.isdigit()]
    total = 0
    for index, digit in enumerate(reversed(digits)):
        if index % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return 13 <= len(digits) <= 19 and total % 10 == 0


# Values that stand in for a credential rather than being one: masks, placeholders, templates, empty words.
_STAND_IN = re.compile(
    r"\*+|[xX•.…]{3,}|\[redacted[:\]].*|<.*|\$\{.*|\{\{.*|%s|%\(.*|null|none|true|false|undefined|string|required",
    re.IGNORECASE,
)


def _real_password(value: str) -> bool:
    """Say whether `value`, given a password's name, is a password rather than a stand-in for one."""
    # A password may be any text, but not a mask (`***`, `:****`), a template (`${DB_PASSWORD}`) or a path
    # (`PWD=/home/ana`).
    value = value.strip()
    return (
        len(value) >= 3
        and any(c.isalnum() for c in value)
        and not _STAND_IN.fullmatch(value)
        and not value.startswith(("/", "~", "./"))
    )


def _token_like(value: str) -> bool:
    """Say whether `value`, given a key's or a token's name, is shaped like a key or a token."""
    # A key or token is one run of 12 or more characters with a digit in it: "YOUR_API_KEY" and "Hello" are not.
    return (
        len(value) >= 12
        and not any(c.isspace() for c in value)
        and any(c.isdigit() for c in value)
        and not _STAND_IN.fullmatch(value)
    )


# Each pattern opens with a literal, which lets the regex engine skip ahead to it instead of trying every
# position (measured 40x faster on a 2.5 kB line); the boundary check comes right after it, as a lookbehind
# over the literal, so "task-..." holds no "sk-" key. Only a letter or digit before it says so: a key joined to an id
# by `-` or `_` (`chat-sk-ant-...`, a unit id) is still a key (issue #35).
_KEY_CHARS = r"A-Za-z0-9_\-"
_ALNUM = r"A-Za-z0-9"

# A name's last word part: after a non-alphanumeric, or where camelCase starts a word (`dbPassword`).
_WORD_START = r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))"
_WORD_END = r"(?![A-Za-z0-9])"
_PASSWORD_NAME = (
    rf"(?:{_WORD_START}(?i:password|passwd|passphrase|pwd)"
    # `pass` alone is too common a word (`pass=10 fail=0`): only as the last part of a longer name (`DB_PASS`).
    rf"|(?:(?<=[A-Za-z0-9][_.\-])|(?<=[a-z0-9])(?=P))(?i:pass)){_WORD_END}"
)
_SECRET_NAME_WORDS = (
    rf"(?:{_WORD_START}(?i:token|secret|api[_.\-]?key"
    r"|(?:access|secret|private|subscription|master|account|auth|signing|client)[_.\-]?(?:key|secret))"
    # A bare `key` or `sig` is a credential only as a URL's query parameter (`?key=...`, Azure's `&sig=...`).
    rf"|(?<=[?&;])(?:key|sig)){_WORD_END}"
)
# What may close a quoted name (`"password"`, `'api-key'`, `\"token\"` inside JSON held in a string).
_NAME_CLOSE = r"""(?:\\?["'])?[ \t]*"""
# An unquoted value: one run, taken whole (possessive), and not a call (`token=get_token(...)` is code).
_BARE = r"""[^\s"'&;,<>{}()\[\]\\]++(?!\()"""


def _value(bare: str) -> str:
    """The value after a name: quoted (the quote it opens with closes it) or `bare`; the `secret` group."""
    return rf"""[ \t]*(?P<q>\\?["'])?(?P<secret>(?(q)(?:(?!(?P=q))[^\n]){{1,256}}|{bare}))(?(q)(?P=q))"""


# Where `name=value` is configuration rather than code: in a URL's query or an ODBC string (after `?`, `&` or
# `;`), in a keyword DSN (after another pair's value and one space), or at the start of a line. Elsewhere an
# unquoted all-letter value is a variable (`password=password`, `password=self._password`), not a password.
_CONFIG = r"""(?:(?:(?<=[?&;])|(?<=[A-Za-z0-9'"] )|(?<![^\n]))(?P<cfg>))?"""
_PREFIX = r"(?:(?<![A-Za-z0-9_.\-])(?:[A-Za-z0-9]+[_.\-])+)?"
_PASSWORD_BARE = r"""(?(cfg)|(?![A-Za-z_.]++(?![^\s"'&;,<>{}()\[\]\\])))"""


# Cheap first passes for the named-value rules: a name's last word, then a closing quote or space, then `=` or `:`.
# Each opens with a character class, which Python's regex engine skips ahead by; an alternation of case-blind
# names would be tried at every position of a line (0.3 ms for 2 kB). A bare `"key":` opens every pin's line,
# so `key` counts only after a letter, digit, `_`, `-`, `.`, `?`, `&` or `;` (`api_key`, `apiKey`, `?key=`).
_NAME_CLOSE_GATE = r"""["'\\ \t]*[:=]"""
_PASSWORD_GATE = re.compile(rf"[Pp](?:[Aa][Ss][Ss][A-Za-z]*|[Ww][Dd]){_NAME_CLOSE_GATE}")
# Opened at a name's rarer letter (the k of token and key, the c of secret, the g of sig): half the cost.
_SECRET_GATE = re.compile(
    r"[KkCcGg](?:(?<=[Tt][Oo][Kk])[Ee][Nn]|(?<=[A-Za-z0-9_.\-?&;][Kk])[Ee][Yy]|(?<=[Ss][Ee][Cc])[Rr][Ee][Tt]"
    rf"|(?<=[Ss][Ii][Gg])){_NAME_CLOSE_GATE}"
)


def _field_names(words: str) -> str:
    """A regex of object keys whose last word part is one of `words`, for `SecretRule.field`."""
    return rf"(?s:.*?){words}"


PASSWORD_FIELD_RULE = SecretRule(
    "password-field",
    # `=` anywhere (`password=...`, `?password=...`, `DB_PASS=...`); `:` only before a quoted value or one with a
    # digit or a symbol, so "Password: required" in prose stays prose.
    rf"{_CONFIG}{_PREFIX}{_PASSWORD_NAME}{_NAME_CLOSE}"
    rf"(?:=(?!=)|:(?=[ \t]*(?:\\?[\"']|(?![0-9.]+(?:[\s,;)}}\]]|$))[^\s]*[0-9!@#$%^&*+=?~])))"
    rf"{_value(_PASSWORD_BARE + _BARE)}",
    check=_real_password,
    hint=_PASSWORD_GATE.search,
    field=_field_names(_PASSWORD_NAME),
)
SECRET_FIELD_RULE = SecretRule(
    "secret-field",
    rf"{_SECRET_NAME_WORDS}{_NAME_CLOSE}(?:=(?!=)|:){_value(_BARE)}",
    check=_token_like,
    hint=_SECRET_GATE.search,
    field=_field_names(_SECRET_NAME_WORDS),
)

DEFAULT_RULES: tuple[SecretRule, ...] = (
    SecretRule("anthropic-key", rf"sk-ant-(?<![{_ALNUM}]sk-ant-)[{_KEY_CHARS}]{{20,}}"),
    SecretRule("openai-key", rf"sk-(?<![{_ALNUM}]sk-)(?!ant-)(?:proj-|svcacct-|admin-)?[{_KEY_CHARS}]{{20,}}"),
    SecretRule("google-api-key", rf"AIza(?<![{_KEY_CHARS}]AIza)[{_KEY_CHARS}]{{35}}"),
    SecretRule("aws-access-key", r"A(?:KIA|SIA|BIA|CCA)(?<![A-Z0-9]....)[A-Z0-9]{16}(?![A-Z0-9])"),
    SecretRule("github-token", r"g(?<![A-Za-z0-9_]g)(?:h[pousr]_[A-Za-z0-9]{36,}|ithub_pat_[A-Za-z0-9_]{22,})"),
    SecretRule("slack-token", r"xox[abposr]-(?<![A-Za-z0-9]xox.-)[A-Za-z0-9\-]{10,}"),
    SecretRule("slack-webhook", r"hooks\.slack\.com/services/[A-Za-z0-9_/]{20,}"),
    SecretRule(
        "jwt", rf"eyJ(?<![{_KEY_CHARS}]eyJ)[{_KEY_CHARS}]{{5,}}\.eyJ[{_KEY_CHARS}]{{5,}}\.[{_KEY_CHARS}]{{10,}}"
    ),
    # The whole block when its end is there; with no end in the string, all the rest of the string, so a
    # redaction leaves none of the key's body behind in it. (A key whose end is in another string is refused
    # even under redaction: see `split_private_keys`.)
    SecretRule(
        "pem-private-key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|[\s\S]*)",
    ),
    SecretRule("stripe-key", r"(?<![A-Za-z0-9_])[rs]k_(?:live|test)_[A-Za-z0-9]{16,}", hint=("k_live_", "k_test_")),
    SecretRule("huggingface-token", r"hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{30,}"),
    SecretRule("groq-key", r"gsk_(?<![A-Za-z0-9_]gsk_)[A-Za-z0-9]{20,}"),
    SecretRule("xai-key", r"xai-(?<![A-Za-z0-9_\-]xai-)[A-Za-z0-9]{20,}"),
    # An Azure OpenAI key as its SDK's errors and logs print it: `api-key <32 hex>`, with a space (issue #35).
    SecretRule(
        "azure-api-key",
        r"(?:api|API|Api)[-_ ](?:key|KEY|Key)[ \t]+(?P<secret>[0-9a-fA-F]{32})(?![0-9A-Za-z])",
        hint=(
            "api-key",
            "api_key",
            "api key",
            "API-KEY",
            "API_KEY",
            "API KEY",
            "API-Key",
            "API key",
            "Api-Key",
            "Api key",
        ),
    ),
    # A token worth the name has a digit somewhere; "bearer of unwelcome tidings" has none.
    SecretRule(
        "bearer-auth",
        r"(?:earer|EARER)(?<=[Bb]earer|BEARER)(?<![A-Za-z]......)[ \t]+(?=[A-Za-z._~+/\-]*[0-9])"
        r"[A-Za-z0-9._~+/\-]{16,}=*",
        hint=("earer", "EARER"),
    ),
    SecretRule(
        "basic-auth", r"asic(?<=[Bb]asic)(?<![A-Za-z][Bb]asic)[ \t]+[A-Za-z0-9+/]{8,}={0,2}", check=_basic_credentials
    ),
    # Any other scheme (`Authorization: Token ...`, `Bot ...`) or none; Basic is left to its own rule's check.
    SecretRule(
        "authorization-header",
        r"""(?i:authorization)(?:\\?["'])?[ \t]*[:=][ \t]*(?:\\?["'])?"""
        r"(?:(?!(?i:basic)[ \t])[A-Za-z][A-Za-z\-]*[ \t]+)?"
        r"(?P<secret>[A-Za-z0-9._~+/=\-]{12,})",
        check=_token_like,
        hint=("authorization", "Authorization", "AUTHORIZATION"),
    ),
    # The user may be empty: `redis://:password@host` is how a password-only server is named. The password runs
    # to the last `@` before the host and may hold `/`; a port followed by a path (`host:8080/@user`) is no password.
    SecretRule("url-credentials", r"""://[^/\s:@"\[\]]*:(?![0-9]*(?:/|$))(?:[^\s"@]|@(?=[^\s"/@]*@))+@"""),
    PASSWORD_FIELD_RULE,
    SECRET_FIELD_RULE,
)
"""The credential shapes every recording is checked against: provider API keys, auth headers, cloud and chat tokens,
passwords and keys in URLs, DSNs, config rows and JSON fields."""

EMAIL_RULE = SecretRule("email", r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}", hint="@")
"""Opt-in: e-mail addresses (personal data rather than a credential, so not refused by default)."""

CARD_NUMBER_RULE = SecretRule("card-number", r"(?<![0-9])(?:[0-9][ \-]?){12,18}[0-9](?![0-9])", check=_luhn)
"""Opt-in: payment card numbers, 13 to 19 digits (spaces or dashes allowed) that pass the Luhn check."""

# A name looks secret when it holds one of the long words anywhere, or one of the short ones as a whole word part
# (`DB_PASS`, `GITLAB_PAT`, `API_KEY_MISTRAL`; not `PATH`, `PASSENGER` or `MONKEY`).
_SECRET_NAME = re.compile(
    r"SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|TOKEN$"
    r"|(?:^|[_\-.])(?:KEY|PASS|PAT|TOKEN)(?:$|[_\-.])",
    re.IGNORECASE,
)
# Where a secret is kept rather than the secret: `SSH_KEY_PATH=/home/ana/.ssh/id` would refuse every path.
_NOT_A_SECRET = re.compile(r"[_\-.](?:FILE|PATH|DIR|SOCK)$", re.IGNORECASE)

ENVIRONMENT_MIN_CHARS = 8
"""Shorter values of secret-looking variables are not looked for: `1234` or `true` would match ordinary text."""

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _written_as(value: str) -> str:
    """A regex of `value` as written, or percent-encoded (any case, in whole or in part), or JSON-escaped."""
    parts: list[str] = []
    for char in value:
        if char in _UNRESERVED:
            parts.append(char)
            continue
        forms = [re.escape(char), "".join(f"%{_hex_either_case(byte)}" for byte in char.encode())]
        if char == " ":
            forms.append(r"\+")
        if char in '"\\':
            forms.append(re.escape("\\" + char))
        parts.append(f"(?:{'|'.join(forms)})")
    return "".join(parts)


def _hex_either_case(byte: int) -> str:
    """A regex of `byte`'s two hex digits, each letter in either case."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in f"{byte:02X}")


def environment_rules(environ: Mapping[str, str] | None = None) -> tuple[SecretRule, ...]:
    """One rule per secret-looking variable (`*_KEY*`, `*_TOKEN`, `*_PASS`, `*SECRET*`, ...): its value as written.

    The value is stripped of surrounding whitespace, and found as it is, percent-encoded or JSON-escaped (a
    scanner that decodes base64 finds it base64-encoded too).
    """
    source = os.environ if environ is None else environ
    rules: list[SecretRule] = []
    for name in sorted(source):
        value = source[name].strip()
        if (
            _SECRET_NAME.search(name)
            and not _NOT_A_SECRET.search(name)
            and len(value) >= ENVIRONMENT_MIN_CHARS
            # A path names where a secret is kept (`GOOGLE_APPLICATION_CREDENTIALS=/home/ana/key.json`).
            and not value.startswith(("/", "~"))
        ):
            rules.append(SecretRule(f"env:{name}", _written_as(value)))
    return tuple(rules)


_PEM_BEGIN = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?![\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----)"
)


def split_private_keys(value: JSONValue, *, seq: int | None = None) -> Iterator[SecretFinding]:
    """Yield each string of `value` that opens a private key without closing it: its body may sit in other strings.

    A key split over several strings (`key.splitlines()`), or cut short, cannot be redacted whole, since its
    body lines have no shape of their own; a recording writer refuses it even under redaction.
    """
    walker = SecretScanner([SecretRule("pem-private-key", _PEM_BEGIN, hint="-----BEGIN ")], environ={}, encoded=False)
    return walker.find(value, seq=seq)


@dataclass(frozen=True, slots=True)
class SecretFinding:
    """Where a credential-shaped string sits in a recording; it never holds the string itself."""

    rule: str
    """The name of the rule that matched."""
    path: str
    """The JSON path within the line, as `$.payload.raw.parts[0].content`; a key that matched shows as `<key N>`."""
    seq: int | None
    """The seq of the event whose line holds it; None for the header."""

    def describe(self) -> str:
        """Say where the match is and which rule it matched, without the matched text."""
        where = "the header" if self.seq is None else f"seq {self.seq}"
        return f"{where} at {self.path} matches secret rule {self.rule!r}"


def _plain(line: str) -> str:
    # The line's strings with JSON escapes undone, in C: canonical JSON escapes only quotes, backslashes and
    # control characters, all of which Python's unicode_escape reads the same way.
    return line.encode("latin-1", "backslashreplace").decode("unicode_escape")


# A run of base64 (standard or URL-safe) long enough to hold an encoded key (15 bytes); `=` padding optional.
# Searched from the left, a run is always taken whole, so it needs no boundary of its own.
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_\-]{20,}={0,2}")


def _base64_texts(text: str) -> Iterator[tuple[re.Match[str], str]]:
    """Yield each base64 run of `text` that decodes to printable UTF-8 text, with that text."""
    for match in _BASE64_RUN.finditer(text):
        run = match.group().rstrip("=")
        if run.lower() == run:
            # Base64 of text always has a capital letter: a run without one is hex, an id or a word (most runs).
            continue
        if "-" in run or "_" in run:
            if "+" in run or "/" in run:
                continue  # two alphabets at once: not base64
            run = run.translate(_URL_SAFE)
        try:
            decoded = base64.b64decode(run + "=" * (-len(run) % 4), validate=True).decode()
        except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
            continue
        if all(c.isprintable() or c in "\n\r\t" for c in decoded):
            yield match, decoded


_URL_SAFE = str.maketrans("-_", "+/")


class SecretScanner:
    """A set of secret rules: finds credential-shaped strings in JSON values, or redacts them.

    `environ` is where secret-looking variables are read from (the process environment when None,
    read when the scanner is made); pass `{}` to look for no variable's value. With `encoded` (the
    default), each run of base64 that decodes to text is searched too, once: a key found inside
    it is named `base64:<rule>`, and the whole run is what a redaction replaces.
    """

    __slots__ = ("_encoded", "_fields", "_rules")

    def __init__(
        self,
        rules: Iterable[SecretRule] = DEFAULT_RULES,
        *,
        environ: Mapping[str, str] | None = None,
        encoded: bool = True,
    ) -> None:
        self._rules = (*rules, *environment_rules(environ))
        self._fields = tuple(rule for rule in self._rules if rule.field is not None)
        self._encoded = encoded

    @property
    def rules(self) -> tuple[SecretRule, ...]:
        """The rules in the order they are tried, the environment's last."""
        return self._rules

    def same_search(self, other: SecretScanner) -> bool:
        """Say whether `other` searches exactly as this scanner does: the same rules, base64 decoded or not."""
        return self._rules == other._rules and self._encoded == other._encoded

    def may_hold(self, line: str) -> bool:
        """Say whether the canonical JSON text `line` may hold a match: False means it certainly holds none.

        One search per rule over the whole line, so a clean line (nearly all of them) costs no walk.
        """
        plain = _plain(line) if "\\" in line else line
        if any(rule.search(plain) for rule in self._rules):
            return True
        return self._encoded and any(
            any(rule.search(decoded) for rule in self._rules) for _, decoded in _base64_texts(plain)
        )

    def find(self, value: JSONValue, *, seq: int | None = None) -> Iterator[SecretFinding]:
        """Yield every string or key of `value` that matches a rule, in document order."""
        yield from self._walk(value, "$", seq)

    def scan(self, line: JSONValue, *, text: str | None = None, seq: int | None = None) -> Iterator[SecretFinding]:
        """`find` over one recording line, walked only when a search of its canonical JSON `text` may match."""
        if self.may_hold(canonical_json(line) if text is None else text):
            yield from self.find(line, seq=seq)

    def _first_rule(self, text: str) -> str | None:
        for rule in self._rules:
            if rule.found_in(text):
                return rule.name
        if self._encoded:
            for _, decoded in _base64_texts(text):
                for rule in self._rules:
                    if rule.found_in(decoded):
                        return f"base64:{rule.name}"
        return None

    def _field_rule(self, key: str, item: object) -> str | None:
        """The name of the first rule whose `field` makes `item`, under the object key `key`, a credential."""
        for rule in self._fields:
            if rule.holds_field(key, item):
                return rule.name
        return None

    def _walk(self, value: object, path: str, seq: int | None) -> Iterator[SecretFinding]:
        if isinstance(value, str):
            rule = self._first_rule(value)
            if rule is not None:
                yield SecretFinding(rule=rule, path=path, seq=seq)
        elif isinstance(value, dict):
            mapping: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
            for index, (key, item) in enumerate(mapping.items()):
                rule = self._first_rule(key)
                # A key that matched is named by its position: the path must not print the secret.
                name = f".<key {index}>" if rule is not None else _member(key)
                if rule is not None:
                    yield SecretFinding(rule=rule, path=path + name, seq=seq)
                field = self._field_rule(key, item)
                if field is not None:
                    # `{"password": "hunter2"}`: the key says what the value is, whatever the value looks like.
                    yield SecretFinding(rule=field, path=path + name, seq=seq)
                else:
                    yield from self._walk(item, path + name, seq)
        elif isinstance(value, list):
            items: list[Any] = value  # pyright: ignore[reportUnknownVariableType]
            for index, item in enumerate(items):
                yield from self._walk(item, f"{path}[{index}]", seq)

    def redactor(self) -> Redactor:
        """Return a redactor that numbers the values it replaces, so one value gets one placeholder."""
        return Redactor(self)


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def _member(key: str) -> str:
    return f".{key}" if _IDENTIFIER.match(key) else f"[{key!r}]"


class Redactor:
    """Replaces every match of a scanner's rules with `[redacted:<rule>:<n>]`, one number per distinct value.

    The numbering lives as long as the redactor, so a value met twice in one recording gets the same
    placeholder both times, and redacting the same run again writes the same placeholders.
    """

    __slots__ = ("_counts", "_numbers", "_scanner")

    def __init__(self, scanner: SecretScanner) -> None:
        self._scanner = scanner
        self._numbers: dict[tuple[str, str], int] = {}
        self._counts: dict[str, int] = {}

    def placeholder(self, rule: str, secret: str) -> str:
        """Return the placeholder for `secret` under `rule`, numbering it on first sight."""
        number = self._numbers.get((rule, secret))
        if number is None:
            number = self._numbers[(rule, secret)] = self._counts.get(rule, 0) + 1
            self._counts[rule] = number
        return f"[redacted:{rule}:{number}]"

    def redact(self, value: JSONValue) -> JSONValue:
        """Return `value` with every match replaced by its placeholder (a new value; `value` is not changed)."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            redacted: dict[str, JSONValue] = {}
            for key, item in value.items():
                field = self._scanner._field_rule(key, item)  # pyright: ignore[reportPrivateUsage]
                if field is not None:
                    redacted[self.redact_text(key)] = self.placeholder(field, cast(str, item))
                else:
                    redacted[self.redact_text(key)] = self.redact(item)
            return redacted
        if isinstance(value, list):
            return [self.redact(item) for item in value]
        return value

    def redact_text(self, text: str) -> str:
        """Return `text` with every match replaced by its placeholder."""
        for rule in self._scanner.rules:
            if not rule.search(text):
                continue

            def replace(match: re.Match[str], rule: SecretRule = rule) -> str:
                found = match.group()
                secret = _secret_of(match)
                if rule.check is not None and not rule.check(secret):
                    return found
                if "secret" not in match.re.groupindex or match.group("secret") is None:
                    return self.placeholder(rule.name, found)
                # Only the value goes: `password=[redacted:password-field:1]` still says what stood there.
                start, end = match.span("secret")
                offset = match.start()
                return found[: start - offset] + self.placeholder(rule.name, secret) + found[end - offset :]

            text = rule.pattern.sub(replace, text)
        if self._scanner._encoded:  # pyright: ignore[reportPrivateUsage]
            text = self._redact_encoded(text)
        return text

    def _redact_encoded(self, text: str) -> str:
        """Replace each base64 run whose decoded text holds a match, whole, named after the rule inside it."""
        pieces: list[str] = []
        last = 0
        for match, decoded in list(_base64_texts(text)):
            for rule in self._scanner.rules:
                if rule.found_in(decoded):
                    pieces += [text[last : match.start()], self.placeholder(f"base64:{rule.name}", match.group())]
                    last = match.end()
                    break
        return "".join(pieces) + text[last:] if pieces else text


# `password=` and `sslpassword=` in a keyword DSN or a URI's query: a quoted value (libpq's quoting) or one run.
_DSN_PASSWORD = re.compile(r"""(?i)((?:^|[\s?&;])(?:ssl)?password[ \t]*=[ \t]*)('(?:[^'\\]|\\.)*'?|[^\s&;]*)""")
# Greedy, so the password runs to the last `@`; a port followed by a path or query (`db:5432/app`) is no password.
_URL_USERINFO = re.compile(r"(?s)^([A-Za-z][A-Za-z0-9+.\-]*://[^/:@\s]*:)(?![0-9]*(?:[/?]|$))(.*)(@.*)$")


def masked_dsn(address: str) -> str:
    """`address` (a DSN, a URL or a file path) as it may be printed: each password in it shown as `***`.

    Masks a URL's userinfo password (which may hold `/` or `@`: it runs to the last `@`), a `password=` in
    its query, and a keyword DSN's `password=` (quoted or not). Errors and reports print only this form.
    """
    address = _URL_USERINFO.sub(r"\1***\3", address)
    return _DSN_PASSWORD.sub(lambda match: match.group(1) + "***", address)


def masked_message(message: str, address: str) -> str:
    """`message` (an error about `address`) with each password of `address`, and each piece of one, as `***`.

    A driver that misreads a DSN whose password holds `/` or `@` names a piece of the password as the host or
    the port (`agent:hunter2-prod`): so the pieces between those characters are masked too.
    """
    passwords: list[str] = []
    userinfo = _URL_USERINFO.match(address)
    if userinfo is not None:
        passwords.append(userinfo.group(2))
    passwords += [match.group(2).strip("'") for match in _DSN_PASSWORD.finditer(address)]
    pieces = {piece for password in passwords for piece in [password, *re.split(r"[/@:?#]", password)]}
    for piece in sorted(pieces, key=len, reverse=True):
        if len(piece) >= 3:
            message = message.replace(piece, "***")
    return message


# `SecretPolicy` was this scanner's name until 0.2.0 ("policy" is the call policy's word): kept one release, warning.
__getattr__ = moved_names(__name__, {"SecretPolicy": f"{__name__}:SecretScanner"})
