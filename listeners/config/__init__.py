"""The configuration: broker.conf parsing, the pydantic model that validates it, its rules
across keys, and what can be salvaged from a config that does not validate."""
