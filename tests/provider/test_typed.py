"""Values kept with their types: a tree of lists, tuples and dicts holding typed values comes back as it went."""

from __future__ import annotations

import enum
import functools
import json
import subprocess
import sys
import types as types_module
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar, cast
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturn
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typing_extensions import TypeAliasType

from anagrapheus import Pinning
from anagrapheus.errors import CorruptEvent, PinResultError, UndeclaredType
from anagrapheus.provider.tools import tool_result_raw
from anagrapheus.provider.typed import DeclaredTypes, needs_tags, typed_tree, untyped_tree
from anagrapheus.timeline import EventTypeRegistry, PinLedger, RecordingHeader, ReplayPins, SQLiteEventStore
from anagrapheus.timeline.canonical import stored_json
from anagrapheus.timeline.recording import write_recording
from tests.timeline.sample_recording import unsealed

VALUES = DeclaredTypes(source="the value types")

_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.datetimes(timezones=st.just(UTC)),
    st.decimals(allow_nan=False, allow_infinity=False, places=4),
)
_trees = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=12,
)


def shape(value: object) -> Any:
    """The value with the class of every leaf and container beside it: what equality alone would not tell."""
    if isinstance(value, dict):
        return (dict, {k: shape(v) for k, v in cast(dict[str, object], value).items()})
    if isinstance(value, (list, tuple)):
        return (type(value), [shape(v) for v in cast(list[object], value)])
    return (type(value), value)


@given(_trees)
def test_a_tree_comes_back_from_its_pinned_json_with_every_class_it_held(value: object) -> None:
    stored = json.loads(stored_json(typed_tree(value, what="a detail held", declared=VALUES)))
    assert shape(untyped_tree(stored, VALUES)) == shape(value)


def test_a_value_needs_tags_when_it_is_or_holds_at_any_depth_what_json_would_not_bring_back() -> None:
    assert needs_tags({"usage": {"at": datetime(2026, 1, 5, tzinfo=UTC)}})
    assert needs_tags([1, (2, 3)]) and needs_tags([[Decimal("1.5")]]) and needs_tags((1, 2))
    assert not needs_tags({"usage": {"tokens": [1, 2]}}) and not needs_tags("a") and not needs_tags([None, 1.5])


def test_a_node_no_tree_could_hold_is_refused() -> None:
    with pytest.raises(PinResultError, match="cannot rebuild"):
        untyped_tree({"$t": "set", "v": [1]}, VALUES)


# --- a tag never picks the class: only what the tool's signature declares is built (#41) ---------------------------

BUILT: list[str] = []


@dataclass
class Audit:
    """A class in scope whose construction acts: what a tampered tag must never build."""

    path: str = ""

    def __post_init__(self) -> None:
        BUILT.append(self.path)
        if self.path:
            Path(self.path).write_text("built by a recording", encoding="utf-8")


class Species(enum.Enum):
    COD = "cod"
    HADDOCK = "haddock"


class Catch(BaseModel):
    species: str
    at: datetime


@dataclass
class Quota:
    species: str
    share: Decimal


def catch(port: str) -> Catch:
    """Read the last landing at a port."""
    return Catch(species="cod", at=datetime(2026, 1, 5, tzinfo=UTC))


def quota(port: str) -> list[Quota]:
    """Read a port's quotas."""
    return [Quota("cod", Decimal("0.47"))]


def harbour() -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            calls = [ToolCallPart("catch", {"port": "Hull"}, tool_call_id="c1")]
            return ModelResponse(parts=[*calls, ToolCallPart("quota", {"port": "Hull"}, tool_call_id="q1")])
        return ModelResponse(parts=[TextPart("noted")], provider_details={"at": datetime(2026, 1, 5, tzinfo=UTC)})

    return FunctionModel(answer, model_name="scripted-harbour")


def recorded(tmp_path: Path, types: EventTypeRegistry) -> Path:
    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types)
        Agent(harbour(), tools=[catch, quota], capabilities=[Pinning(ledger)]).run_sync("What landed?")
        ledger.commit()
        header = RecordingHeader(description="Landings.", recorded_with="A scripted model.", rerecord="pytest")
        return write_recording(tmp_path / "harbour.jsonl", store.read(namespace="anagrapheus"), header=header)


def retagged(path: Path, retag: Callable[[dict[str, Any]], None]) -> int:
    """Rewrite in place every typed node of the recording's pins with `retag`; how many it rewrote."""
    rewritten = 0

    def walk(node: object) -> None:
        nonlocal rewritten
        if isinstance(node, list):
            for item in cast(list[object], node):
                walk(item)
        elif isinstance(node, dict):
            tree = cast(dict[str, Any], node)
            if isinstance(tree.get("type"), str) and ":" in tree["type"] and "v" in tree:
                retag(tree)
                rewritten += 1
            for item in tree.values():
                walk(item)

    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for number, line in enumerate(lines):
        event = json.loads(line)
        raw = event.get("payload", {}).get("raw") if isinstance(event.get("payload"), dict) else None
        if not (isinstance(raw, dict) and "ordered_json" in raw):
            continue
        value = json.loads(cast(str, raw["ordered_json"]))
        walk(value)
        raw["ordered_json"] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        lines[number] = json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    # Unsealed: the seal would refuse the edit first (test_recording_seal.py); here the tags' own refusal is held.
    path.write_text("".join(line + "\n" for line in unsealed([line.rstrip("\n") for line in lines])), encoding="utf-8")
    return rewritten


def replayed(path: Path, types: EventTypeRegistry) -> str:
    replay = ReplayPins.from_recording(path, types)
    return Agent(harbour(), tools=[catch, quota], capabilities=[Pinning(replay)]).run_sync("What landed?").output


def test_a_recording_replays_its_typed_values_as_the_classes_the_tools_declare(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    path = recorded(tmp_path, types)
    assert retagged(path, lambda node: None) == 3  # Catch (its datetime within), Quota, the provider detail
    assert replayed(path, types) == "noted"


def test_a_tag_naming_a_class_the_tool_does_not_declare_builds_nothing_and_is_a_corrupt_pin(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    path = recorded(tmp_path, types)
    target = tmp_path / "written-by-a-recording"

    def to_audit(node: dict[str, Any]) -> None:
        if node["type"].endswith(":Catch"):
            node.update(type=f"{Audit.__module__}:Audit", v={"path": str(target)})

    assert retagged(path, to_audit) == 3
    BUILT.clear()
    with pytest.raises(UndeclaredType) as refused:
        replayed(path, types)
    assert isinstance(refused.value, CorruptEvent)
    assert refused.value.named == f"{Audit.__module__}:Audit" and refused.value.key is not None
    assert "signature of tool 'catch' does not declare" in str(refused.value)
    assert refused.value.key in str(refused.value)
    assert BUILT == [] and not target.exists()


def test_a_recording_whose_every_tag_names_another_class_in_scope_builds_nothing(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    in_scope = [f"{Audit.__module__}:Audit", "decimal:Context", "pathlib:Path", "subprocess:Popen", "builtins:object"]
    for named in in_scope:
        folder = tmp_path / named.replace(":", "-")
        folder.mkdir()
        path = recorded(folder, types)
        assert retagged(path, lambda node, named=named: node.update(type=named)) == 3
        BUILT.clear()
        with pytest.raises(UndeclaredType, match=named):
            replayed(path, types)
        assert BUILT == []


class LazyModule(types_module.ModuleType):
    """A module whose `__getattr__` notes each name asked of it, as a package's lazy imports would run."""

    def __init__(self) -> None:
        super().__init__("lazy_tags")
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.asked.append(name)
        raise AttributeError(name)


@pytest.mark.parametrize(
    "named", ["lazy_tags:Anything", "pydantic:AnyUrl", "pydantic_ai.models:cached_async_http_client", "nowhere:X"]
)
def test_a_tag_reads_no_module_imports_nothing_and_fails_typed(
    tmp_path: Path, types: EventTypeRegistry, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    lazy = LazyModule()
    monkeypatch.setitem(sys.modules, "lazy_tags", lazy)
    path = recorded(tmp_path, types)
    retagged(path, lambda node: node.update(type=named) if node["type"].endswith(":Catch") else None)
    before = set(sys.modules)
    with pytest.raises(UndeclaredType, match=named):
        replayed(path, types)
    assert set(sys.modules) == before
    assert lazy.asked == []


def test_a_provider_detail_is_rebuilt_only_as_a_fixed_value_type(tmp_path: Path, types: EventTypeRegistry) -> None:
    path = recorded(tmp_path, types)
    # Only the provider detail's datetime: the tools' tags stay as they were.
    details = {"type": "datetime:datetime", "v": "2026-01-05T00:00:00Z"}
    # Rewrites every datetime's tag, the catch's own included: the provider detail's is read first, on its pin.
    retagged(path, lambda node: node.update(type="uuid:SafeUUID") if node == details else None)
    with pytest.raises(UndeclaredType, match="fixed value types of provider details"):
        replayed(path, types)


def test_reading_a_tampered_recording_imports_no_module_in_a_fresh_process(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    path = recorded(tmp_path, types)
    retagged(path, lambda node: node.update(type="pydantic:AnyUrl") if node["type"].endswith(":Catch") else None)
    script = f"""
import sys
from pathlib import Path
from tests.provider.test_typed import replayed
from anagrapheus.errors import UndeclaredType
from anagrapheus.timeline import EventTypeRegistry
assert "pydantic.networks" not in sys.modules, "imported before the replay"
try:
    replayed(Path({str(path)!r}), EventTypeRegistry())
except UndeclaredType:
    pass
print("pydantic.networks" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


T = TypeVar("T")


@dataclass
class Pair(Generic[T]):
    """A generic dataclass: its parameter is declared where it is named."""

    first: T
    second: T


@dataclass
class Unresolved:
    """A dataclass whose field names a class nothing can resolve: its fields declare nothing."""

    catch: Catch
    later: Nowhere  # type: ignore[name-defined]  # noqa: F821  # pyright: ignore[reportUndefinedVariable]


Aliased = TypeAliasType("Aliased", list[Quota])


def test_a_return_annotation_declares_every_class_it_names_through_containers_unions_and_fields() -> None:
    shapes = Annotated[list[Catch | None], "meta"] | dict[str, tuple[Pair[Species], ...]] | Literal["none"]
    declared = DeclaredTypes(shapes, source="a test")
    for kind in (Catch, Pair, Species, datetime, Decimal, UUID, date, time, timedelta):
        assert declared.declares(kind), kind
    assert not declared.declares(Audit) and not declared.declares(Quota)
    assert DeclaredTypes(Aliased, source="an alias").declares(Quota)
    assert DeclaredTypes(ToolReturn[Catch], source="a tool return").declares(Catch)
    # Fields whose annotations do not resolve declare nothing (its value refused while recording, never guessed).
    unresolved = DeclaredTypes(Unresolved, source="a test")
    assert unresolved.declares(Unresolved) and not unresolved.declares(Catch)


class Surveyor:
    """A callable object: its `__call__` declares what it returns."""

    def __call__(self, port: str) -> Catch:
        return catch(port)


def test_a_function_declares_its_return_annotation_through_partials_and_callable_objects() -> None:
    def undeclared(port: str) -> Nowhere:  # type: ignore[name-defined]  # noqa: F821  # pyright: ignore[reportUndefinedVariable]
        return catch(port)

    assert DeclaredTypes.returned_by(functools.partial(catch, "Hull"), source="a partial").declares(Catch)
    assert DeclaredTypes.returned_by(Surveyor(), source="a callable object").declares(Catch)
    assert DeclaredTypes.returned_by(quota, source="a function").declares(Quota)
    # An annotation that does not resolve declares nothing: only the fixed value types.
    assert not DeclaredTypes.returned_by(undeclared, source="a function").declares(Catch)
    assert DeclaredTypes.returned_by(None, source="no function").declares(datetime)


def test_a_tool_returning_a_class_its_signature_does_not_name_is_refused_while_recording() -> None:
    with pytest.raises(PinResultError, match="which the signature of tool 'landing' does not declare") as refused:
        tool_result_raw(
            "landing", Species.COD, declared=DeclaredTypes.returned_by(catch, source="the signature of tool 'landing'")
        )
    assert "Name it in the return annotation (-> Species" in str(refused.value)


def test_a_provider_detail_of_another_class_is_kept_as_its_json_on_every_path(
    tmp_path: Path, types: EventTypeRegistry
) -> None:
    details = {"tier": Species.HADDOCK, "window": [Species.COD, datetime(2026, 1, 5, tzinfo=UTC)]}

    def stamped(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Hold.")], provider_details=dict(details))

    with SQLiteEventStore(tmp_path / "live.db") as store:
        ledger = PinLedger(store, types)
        live = Agent(FunctionModel(stamped, model_name="scripted")).run_sync("Hold?", capabilities=[Pinning(ledger)])
        ledger.commit()
        again = Agent(FunctionModel(stamped, model_name="scripted")).run_sync(
            "Hold?", capabilities=[Pinning(ReplayPins.from_store(store, types))]
        )
    for result in (live, again):
        response = result.all_messages()[-1]
        assert isinstance(response, ModelResponse)
        assert response.provider_details == {"tier": "haddock", "window": ["cod", datetime(2026, 1, 5, tzinfo=UTC)]}


def test_a_typed_node_naming_no_class_or_holding_what_its_class_refuses_is_refused() -> None:
    declared = DeclaredTypes(Catch, source="the signature of tool 'catch'")
    with pytest.raises(PinResultError, match="names no class"):
        untyped_tree({"$t": "typed", "type": 7, "v": {}}, declared)
    with pytest.raises(PinResultError, match="cannot be rebuilt from"):
        untyped_tree({"$t": "typed", "type": f"{Catch.__module__}:Catch", "v": {"species": []}}, declared)
