"""A four-round EU-UK fisheries negotiation, pinned and replayable: `python -m examples.negotiation`."""
