"""Worked examples of anagrapheus; run one with `python -m examples.<name>` from the repository root."""
