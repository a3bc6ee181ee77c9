"""The network face: the configuration, endpoints and socket table, authentication, and the
binary protocol (its sans-IO codec in protocol/, the asyncio server around it)."""
