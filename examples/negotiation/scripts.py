"""The scripted negotiators: pydantic-ai FunctionModels whose replies follow fixed rules over what they are told.

They stand in for real models so the demo runs offline, but they are not canned: each reads
the round's prompt and the tools' results, and computes its offer from them. Change what they
are told and they say something else, which is what makes a divergence visible.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings

from examples.negotiation.talks import EU, ROUNDS, UK, Party

_ROUND = re.compile(r"Round (\d) of \d")
_EU_SHARE = re.compile(r"EU proposes an? (\d+)% EU share of the (\w+)")
_UK_SHARE = re.compile(r"UK counters with an? (\d+)% EU share of the (\w+)")


def _prompt(messages: list[ModelMessage]) -> str:
    texts = [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]
    return texts[-1] if texts else ""


def _returned(messages: list[ModelMessage]) -> dict[str, dict[str, object]]:
    """The tool results the run has received so far, by tool name."""
    results: dict[str, dict[str, object]] = {}
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart) and isinstance(part.content, dict):
                    results[part.tool_name] = cast("dict[str, object]", part.content)
    return results


def _last_counter(prompt: str) -> int | None:
    counters = _UK_SHARE.findall(prompt)
    return int(counters[-1][0]) if counters else None


@dataclass
class ScriptedNegotiator:
    """One side of the table, scripted: reads the survey or the market, then states a share as a percentage.

    `calls` counts how often the model was actually reached; under replay it stays at 0.
    """

    party: Party
    clock: Callable[[], datetime]
    calls: int = 0

    @property
    def model_name(self) -> str:
        """The name the model reports, and so part of every pin key it draws."""
        return f"scripted-{self.party.code.lower()}"

    def model(self) -> FunctionModel:
        """Return the pydantic-ai model that plays this side."""
        return FunctionModel(self.reply, model_name=self.model_name)

    def reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """Answer one model request."""
        self.calls += 1
        prompt = _prompt(messages)
        match = _ROUND.search(prompt)
        round_no = int(match.group(1)) if match else len(ROUNDS)
        topic = ROUNDS[min(round_no, len(ROUNDS)) - 1]
        tool = "stock_survey" if self.party is EU else "market_price"
        results = _returned(messages)
        if topic.species is not None and tool not in results and any(t.name == tool for t in info.function_tools):
            # Ids and timestamps are set here, not left to pydantic-ai, so a re-recording writes the same bytes.
            call = ToolCallPart(
                tool, {"species": topic.species}, tool_call_id=f"{self.party.code.lower()}-round-{round_no}-{tool}"
            )
            return ModelResponse(parts=[call], timestamp=self.clock())
        if topic.species is None:
            text = self._settle(prompt)
        elif self.party is EU:
            text = self._propose(prompt, topic.species, results.get(tool, {}))
        else:
            text = self._counter(prompt, topic.species, results.get(tool, {}))
        return ModelResponse(parts=[TextPart(text)], timestamp=self.clock())

    def _propose(self, prompt: str, species: str, survey: dict[str, object]) -> str:
        trend = str(survey.get("trend", "steady"))
        catch = survey.get("advised_catch_tonnes")
        share = 58 + {"rising": 4, "steady": 0, "falling": -4}.get(trend, 0)
        last = _last_counter(prompt)
        if last is not None and last < 50:
            share -= 3  # the UK dug in last round; the EU opens lower to keep the talks moving
        facts = f"an advised catch of {catch:,} t, stock {trend}" if isinstance(catch, int) else "no survey to hand"
        return f"The EU proposes a {share}% EU share of the {species} quota, given {facts}."

    def _counter(self, prompt: str, species: str, market: dict[str, object]) -> str:
        offers = [int(share) for share, named in _EU_SHARE.findall(prompt) if named == species]
        offer = offers[-1] if offers else 55
        price = market.get("eur_per_tonne")
        if not isinstance(price, int):
            counter = offer - 10
            return f"The UK counters with a {counter}% EU share of the {species} quota; with no price it holds."
        # The dearer the fish, the harder the UK holds on to it.
        counter = offer - min(max(price // 200, 4), 16)
        return (
            f"The UK counters with a {counter}% EU share of the {species} quota, at EUR {price:,} a tonne on the quay."
        )

    def _settle(self, prompt: str) -> str:
        proposals = {species: int(share) for share, species in _EU_SHARE.findall(prompt)}
        counters = {species: int(share) for share, species in _UK_SHARE.findall(prompt)}
        settled = {s: (proposals[s] + counters[s]) // 2 for s in proposals if s in counters}
        if self.party is EU:
            terms = ", ".join(f"{species} {share}%" for species, share in settled.items()) or "nothing yet"
            return f"The EU proposes to settle each EU share halfway between the offers: {terms}."
        package = {s: int(v) for s, v in re.findall(r"(\w+) (\d+)%", prompt.rsplit("EU proposes to settle", 1)[-1])}
        refused = [s for s, share in package.items() if s in counters and share - counters[s] > 6]
        if not package:
            return "The UK sees no package to accept."
        if refused:
            return f"The UK accepts the package except {', '.join(refused)}, where the gap is too wide to close today."
        return "The UK accepts the package in full; the accord can be signed."


def scripted_pair(clock: Callable[[], datetime]) -> dict[str, ScriptedNegotiator]:
    """Return one scripted negotiator per side, on distinct models (`scripted-eu`, `scripted-uk`)."""
    return {party.code: ScriptedNegotiator(party, clock) for party in (EU, UK)}


class AbsentModel(Model):
    """Stands in, under strict replay, for a provider model a recording was made with: its id, and nothing else.

    Replay answers every call from pins, so the provider's SDK and key are not needed; if a call
    ever reached this model, the run would have stopped being a replay, and it says so.
    """

    def __init__(self, model_id: str) -> None:
        super().__init__()
        self._system, _, self._name = model_id.partition(":")
        self.calls = 0

    @property
    def model_name(self) -> str:
        """The recorded model's name."""
        return self._name

    @property
    def system(self) -> str:
        """The recorded model's provider."""
        return self._system

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """Refuse: a replay that reaches the model is no longer a replay."""
        self.calls += 1
        raise RuntimeError(f"{self.model_id} is not available offline; only a pinned replay can stand in for it")
