"""The event log and pins; knows nothing of pydantic-ai."""
