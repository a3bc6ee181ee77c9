"""The REST lookup API and the operations routes, served by aiohttp."""
