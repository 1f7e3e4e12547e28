"""Key one request of `keys.py`'s figure 1 many times, for an instruction count that a busy machine leaves alone.

    PYTHONHASHSEED=0 valgrind --tool=callgrind python benchmarks/key_count.py 2 0
    PYTHONHASHSEED=0 valgrind --tool=callgrind python benchmarks/key_count.py 2 5000

A key's cost is the difference of the two runs' `I refs` divided by the keys (5,000): the run of none carries
the imports and the four first keys, after which the conversation is kept, as a run's growing history is.
To count another tree, copy this file into its `benchmarks/` and run it there with `PYTHONPATH` on that tree.
"""

from __future__ import annotations

import sys

from keys import PARAMETERS, history
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.settings import ModelSettings

from anagrapheus import PinnedModel, ReplayPins


def main(size: int, keys: int) -> None:
    model = PinnedModel(FunctionModel(lambda m, i: ModelResponse(parts=[]), model_name="keys"), ReplayPins({}))
    settings: ModelSettings = {"temperature": 0.0}
    messages = history(size)
    # Four first keys, after which the conversation is kept (from its third request on), in any tree since 57548a9.
    for _ in range(4):
        pin = model.pin_for(messages, settings, PARAMETERS)
    for _ in range(keys):
        pin = model.pin_for(messages, settings, PARAMETERS)
    print(f"keyed {keys} times more: {size} messages" + (f", {pin.key}" if keys else ""))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
