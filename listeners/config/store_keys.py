"""The metadata keys: where the cluster's metadata is read, and the local cluster's name."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, field_validator, model_validator

from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup
from pulsar_lookup_gateway.listeners.config.listener_settings import OptionalText, blank_is_none
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl, parse_metadata_url


class StoreKeys(KeyGroup):
    metadata_store_url: MetadataUrl
    # A separate configuration store (policies, tenants, partitioned topics, clusters); unset:
    # metadataStoreUrl holds everything. Pulsar's older key: configurationStoreServers.
    configuration_metadata_store_url: Annotated[
        MetadataUrl | None, BeforeValidator(blank_is_none)
    ] = None
    # The local cluster's name, for the geo-replication checks (unset: they are skipped).
    cluster_name: OptionalText = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_zookeeper_servers(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and not data.get("metadataStoreUrl")
            and data.get("zookeeperServers")
        ):
            data = {**data, "metadataStoreUrl": "zk:" + data["zookeeperServers"]}
        return data

    @model_validator(mode="before")
    @classmethod
    def _legacy_configuration_store(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and not data.get("configurationMetadataStoreUrl")
            and data.get("configurationStoreServers")
        ):
            servers = data["configurationStoreServers"]
            data = {**data, "configurationMetadataStoreUrl": "zk:" + servers}
        return data

    @field_validator("metadata_store_url", "configuration_metadata_store_url", mode="before")
    @classmethod
    def _metadata_url(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip():
            return parse_metadata_url(value)
        return value
