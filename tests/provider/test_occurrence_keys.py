"""The key of an asking is byte-identical to the keys recordings hold: what was asked, its run, its occurrence.

The keys below were computed by the chain of re-keyings that recordings were made with (anagrapheus 0.2.0, main
b144a27): what was asked, re-keyed for its run's place, then for its occurrence. A change to how the key of an
asking is built that moves any of them would make every committed recording miss.
"""

from __future__ import annotations

import json

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from anagrapheus import Pinning
from anagrapheus.provider.occurrence import occurrence_key, run_key
from anagrapheus.timeline import EventTypeRegistry, PinLedger, SQLiteEventStore
from anagrapheus.timeline.canonical import asking_key

ASKED = "p1:model_call:" + "ab" * 32
"""What was asked, as its key: the run and the occurrence re-key it."""

KNOWN: dict[tuple[str, int | str, int], str] = {
    ("model_call", 0, 1): "p1:model_call:abababababababababababababababababababababababababababababababab",
    ("model_call", 0, 2): "p1:model_call:fa83679b1a4de1d607855b84346ac5eb031a14d115d276b6bd8071b1544c9653",
    ("model_call", 0, 3): "p1:model_call:844da43f039d4e32ef637fbbf7ad3498d1a47db37c761b8473b4e3c913ab47a0",
    ("model_call", 1, 1): "p1:model_call:a74e0eb2401851a75ff150a58fc4d1ac048416e509229702e6562fc2152e4a98",
    ("model_call", 1, 2): "p1:model_call:3a851681d50a0f17fd897247b16a2e612819fa07837dccd9b46be1ffa2ed76f5",
    ("model_call", 1, 3): "p1:model_call:ba028f7be3ed39cfad3a1313b9f3ef8a0c7dcd8cacef21bed82f9e44a72338ab",
    ("model_call", 2, 1): "p1:model_call:f5942b05f83c01f8adbc0181084ba26b5005996d7e097dcb8911323929e1a463",
    ("model_call", 2, 2): "p1:model_call:f6c87c1a1ea2a2979081be4a2bfe6a431c52e545d5755378128824de89a23954",
    ("model_call", 2, 3): "p1:model_call:83602505fc610bdff0611634901a037da23cb530c5a390d4cafde0c5ce25bd29",
    ("model_call", 17, 1): "p1:model_call:175133318bbba49a840dd8953adea6518ae77fba16087651bc24cfabb479c3b5",
    ("model_call", 17, 2): "p1:model_call:af203fff45a973b469ab331ac229faf88718a71cae4729d667f2a68e02bdcf27",
    ("model_call", 17, 3): "p1:model_call:ce17a104e76dc65b615f3316dd76724b1325637eb143c786dbbf9680763f1a2c",
    ("model_call", "run-7f3a", 1): "p1:model_call:300703e78006f25399936f7e6277ea8aef106224db80a10cf4b3e7bcc59918ea",
    ("model_call", "run-7f3a", 2): "p1:model_call:5ef5bfede24889dcb3eb6783826342f31bc078063aab8929b731cf3cbacf905a",
    ("model_call", "run-7f3a", 3): "p1:model_call:9d8ea58d97e9df888affaaf00bdf08b6fdc130f40bc11d7fb52c87d77eb6ad58",
    (
        "model_call",
        "e\u0301t\u00e9",
        1,
    ): "p1:model_call:30263ef0e9ba6076c0c05b14bbb99d869d3a803db0f2427aef1f640ca819f51a",
    (
        "model_call",
        "e\u0301t\u00e9",
        2,
    ): "p1:model_call:8718139ac5366d7cc414d945d62dff169815758ce550d96007ad74fa02d060a3",
    (
        "model_call",
        "e\u0301t\u00e9",
        3,
    ): "p1:model_call:5df4a6bdd2c052794c887c0566ae2f37ad2ac1cf96e818afd26349bb8cbb0dc6",
    ("tool_call", 0, 1): "p1:tool_call:abababababababababababababababababababababababababababababababab",
    ("tool_call", 0, 2): "p1:tool_call:c229f6190da3dc39eeb2701cbae0adeabcd4f1825ed35ad1071cd6f943ed2115",
    ("tool_call", 0, 3): "p1:tool_call:9f1e6e42bed03485be8b2489ccda65f9a4a659df2014062d6b0a1bad3c18a02a",
    ("tool_call", 1, 1): "p1:tool_call:26f1a6d84768642592ae7e4549bf8e16b0676138adcb18fecf70502965c6072c",
    ("tool_call", 1, 2): "p1:tool_call:9be628f10e5969de560801e5a93c7297c4765e95d37937684a5376f0dc821ee0",
    ("tool_call", 1, 3): "p1:tool_call:325a1284724a0efe7d6e697f4b22995ac52adbc497ef8841acf8e9b5a5441527",
    ("tool_call", 2, 1): "p1:tool_call:f72e07e12f097ee8e6b7248e82a323ba5a24d57e1159b7ea14b970b26e61ac20",
    ("tool_call", 2, 2): "p1:tool_call:bfa64d3431ef386106e895975c3c94134d821c96f64564d0d80c6c7464050bde",
    ("tool_call", 2, 3): "p1:tool_call:8292efe6ab88cf1010168a8add4dfb9682787da0f4dacd1d67458db25707eae3",
    ("tool_call", 17, 1): "p1:tool_call:166872af1482a1d338cf64f6d223f5a7e1f8c511acededbdde5578fa6bbd147b",
    ("tool_call", 17, 2): "p1:tool_call:87bb3ac9038ecec5cbd55a77642e47efeb71870e5073f97fad27d79faaef7d02",
    ("tool_call", 17, 3): "p1:tool_call:70a9bb2614a7e8efc5467e28e838a7e5a3d310465e88fce7de32047f1a55569e",
    ("tool_call", "run-7f3a", 1): "p1:tool_call:d63d828c5fea4bef17dd4d9241a339384bd81194fe582212ba2811cc829d8110",
    ("tool_call", "run-7f3a", 2): "p1:tool_call:f84d6aaa340f535e2532d27b610a42b37cb42ec1899a847efee24498aee065ef",
    ("tool_call", "run-7f3a", 3): "p1:tool_call:cfda95009af66eb3f40806992c5207df5208fffac96ca08755cae63056a98de2",
    ("tool_call", "e\u0301t\u00e9", 1): "p1:tool_call:9a724dff7f3c2460703b69046f0c0e4cd857a077c6bcbffb87b5422ad2cc1309",
    ("tool_call", "e\u0301t\u00e9", 2): "p1:tool_call:9472baa069d781e1479ea8df56347d8d8f305760dc81dd6725e74c05d3fe2ff1",
    ("tool_call", "e\u0301t\u00e9", 3): "p1:tool_call:19cec5c7a9e1207c8b4965626149650c6f32005af007044a67eccce8e6341a48",
}
"""(kind, run place, occurrence) to the key the asking of `ASKED` has, as recorded."""


@pytest.mark.parametrize(("kind", "run", "occurrence"), sorted(KNOWN, key=repr))
def test_the_key_of_an_asking_is_the_recorded_one(kind: str, run: int | str, occurrence: int) -> None:
    asked = ASKED.replace("model_call", kind)
    assert asking_key(kind, asked, run=run, occurrence=occurrence) == KNOWN[(kind, run, occurrence)]


@pytest.mark.parametrize(("kind", "run", "occurrence"), sorted(KNOWN, key=repr))
def test_the_old_re_keyings_give_the_same_keys(kind: str, run: int | str, occurrence: int) -> None:
    asked = ASKED.replace("model_call", kind)
    chained = occurrence_key(run_key(asked, kind=kind, ordinal=run), kind=kind, occurrence=occurrence)
    assert chained == KNOWN[(kind, run, occurrence)]


RUN_KEYS: list[str] = [
    "p1:model_call:23df3b1520e1fe96a72087a593c4dd00f5a3fc9b13c0645c65dedc2aa9b62d7f",
    "p1:model_call:363b441703e209cb72209d35dd517e23d57362170027c9de4adf54feb9c89eb4",
    "p1:model_call:75038142bb0588eae006b434a6c9e3a978b756f206657f8817129ad19fd7cef4",
    "p1:model_call:996fa1f29135f0c4cd27b2b9ba29efcb4188fc5d2ee6ef371fbfc53507f6dfdb",
    "p1:model_call:ecb15b825de948cb342aae38a9ec0187b53362a594302497fe63f60fe6dd3c91",
    "p1:model_call:f2483a05d1f58d2da9743ae1146cd9f4f9b47629d5c792d0eb514cdaa5b85a4c",
    "p1:tool_call:5740135ad017bda92f4c7d3439f7cf75ecad6ceb89e55a3c5365b3dd49df5189",
    "p1:tool_call:6700a274dbb59f6e92283626e27c341c053fce1047b65b844c9b65b784ad54d5",
    "p1:tool_call:b4da6962c7db2067b8900ef4c862a2fb93a21cb2177105cd9f06da89e8b314bc",
    "p1:tool_call:d9d28b3fd4a50b0deaf7327dc885b8bdc032455603cbb3711f59833843e5f952",
]
"""The keys two runs of one unit pin, sorted: each asks the model thrice and calls `lookup` twice alike."""


def agent_asking_twice() -> Agent[None, str]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if len(returns) < 2:
            return ModelResponse(parts=[ToolCallPart("lookup", {"what": "quota"}, tool_call_id=f"c{len(returns)}")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(answer), output_type=str)

    @agent.tool_plain
    def lookup(what: str) -> str:
        return f"{what}: 12"

    return agent


def test_two_runs_asking_twice_pin_the_recorded_keys(store: SQLiteEventStore, types: EventTypeRegistry) -> None:
    ledger = PinLedger(store, types)
    agent = agent_asking_twice()
    for _ in range(2):
        agent.run_sync("Settle the quota.", capabilities=[Pinning(ledger)])
    ledger.commit()
    pins = [json.loads(e.payload) for e in store.read(namespace="anagrapheus", type="pin_promoted")]
    # A run's id and clock are keyed on the unit, whose id is drawn: only the askings' keys are the same every time.
    keys = sorted(pin["key"] for pin in pins if pin["kind"] in ("model_call", "tool_call"))
    assert keys == RUN_KEYS


def test_a_place_of_another_type_is_keyed_apart_even_once_cached() -> None:
    # A run id "1" and the place 1 are different runs; the cache of keys must not give one the other's key.
    keys = [asking_key("model_call", ASKED, run=run) for run in (1, "1", 1.0, 1)]
    assert keys[0] == keys[3] and len(set(keys[:3])) == 3
