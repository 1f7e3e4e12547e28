"""The store conformance suite's old import path: it ships as `anagrapheus.testing.conformance`."""

from anagrapheus.testing.conformance import StoreConformance, copied_event, pending

__all__ = ["StoreConformance", "copied_event", "pending"]
