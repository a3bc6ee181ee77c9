"""KeyGroup: the base of each group of broker.conf keys that GatewayConfig is composed of.
Each key's docstring is its description (docs/configuration/keys.md is generated from them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class KeyGroup(BaseModel):
    """Keys by their broker.conf (camelCase) names or their field names; keys of other groups
    ignored (the whole config warns of unknown ones); frozen, as the config is."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        use_attribute_docstrings=True,
    )
