"""The world the negotiators read: a fish-stock survey and a quayside market, both nondeterministic."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

STOCKS: dict[str, tuple[int, int]] = {
    # species: (typical spawning stock in tonnes, typical quayside price in EUR per tonne)
    "cod": (150_000, 2_600),
    "mackerel": (3_900_000, 1_300),
    "sandeel": (900_000, 240),
}


@dataclass
class World:
    """A simulated survey office and fish market whose readings vary from one reading to the next.

    Each reading draws from `rng`: a replay must see what the recorded run saw, which is why the
    negotiation pins these tools. `readings` counts how often the world was actually consulted.
    """

    rng: random.Random = field(default_factory=random.Random)
    readings: int = 0

    def stock_survey(self, species: str) -> dict[str, str | int]:
        """Read the latest scientific survey of a fish stock in UK and EU waters.

        Args:
            species: The stock, e.g. "cod", "mackerel" or "sandeel".
        """
        self.readings += 1
        if species not in STOCKS:
            return {"species": species, "error": f"no survey of {species}; surveyed stocks: {', '.join(STOCKS)}"}
        typical, _ = STOCKS[species]
        spawning = round(typical * self.rng.uniform(0.7, 1.3), -3)
        trend = self.rng.choice(["falling", "steady", "rising"])
        return {
            "species": species,
            "spawning_stock_tonnes": int(spawning),
            "advised_catch_tonnes": int(round(spawning * 0.22, -2)),
            "trend": trend,
        }

    def market_price(self, species: str) -> dict[str, str | int]:
        """Read today's quayside price of a species at the main UK and EU landing ports.

        Args:
            species: The stock, e.g. "cod", "mackerel" or "sandeel".
        """
        self.readings += 1
        if species not in STOCKS:
            return {"species": species, "error": f"no market for {species}; traded stocks: {', '.join(STOCKS)}"}
        _, typical = STOCKS[species]
        return {"species": species, "eur_per_tonne": int(round(typical * self.rng.uniform(0.8, 1.25), -1))}
