"""pydantic-ai adapters: the only layer that imports pydantic_ai."""
