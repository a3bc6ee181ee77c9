"""The metadata keys: where the cluster's metadata is read, and the local cluster's name."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, field_validator, model_validator

from pulsar_lookup_gateway.listeners.config.key_group import KeyGroup
from pulsar_lookup_gateway.listeners.config.listener_settings import OptionalText, blank_is_none
from pulsar_lookup_gateway.metadata_store.url import MetadataUrl, parse_metadata_url

#: The simple name of the extensible load manager's metadata-store table view (PIP-378).
METADATA_STORE_TABLE_VIEW = "ServiceUnitStateMetadataStoreTableViewImpl"


class StoreKeys(KeyGroup):
    metadata_store_url: MetadataUrl
    """Where the cluster's metadata is read: `zk:host:port[,host:port][/chroot]` (the cluster's
    own ZooKeeper, read-only) or `file:PATH` (a snapshot); `zookeeperServers=host:port` also
    works."""
    # Pulsar's older key: configurationStoreServers.
    configuration_metadata_store_url: Annotated[
        MetadataUrl | None, BeforeValidator(blank_is_none)
    ] = None
    """The cluster's configuration store (`zk:` or `file:`), where namespace policies, tenants,
    partitioned topics and `/admin/clusters` live; `configurationStoreServers=host:port` also
    works. Unset: `metadataStoreUrl` holds everything."""
    cluster_name: OptionalText = None
    """The local cluster's name, for the geo-replication checks; unset: they are skipped (a
    warning at start)."""
    # The brokers' own key: where the extensible load manager keeps bundle ownership. Its
    # metadata-store view (ServiceUnitStateMetadataStoreTableViewImpl) is read under
    # /service_unit_state; any other class (the system-topic default,
    # ServiceUnitStateTableViewImpl) keeps it where the gateway cannot read it, and lookups of
    # bundles are forwarded to a broker. Unset: the tree's presence decides.
    load_manager_service_unit_state_table_view_class_name: OptionalText = None
    """Where the extensible load manager keeps bundle ownership: its metadata-store table view
    is read under `/service_unit_state`; any other class, lookups of bundles are forwarded to a
    broker. Unset: the tree's presence decides."""

    def table_view(self) -> bool | None:
        """True: read /service_unit_state; False: never (forward); None: detect."""
        name = self.load_manager_service_unit_state_table_view_class_name
        if name is None:
            return None
        return name.rsplit(".", 1)[-1] == METADATA_STORE_TABLE_VIEW

    def describe_table_view(self) -> str:
        """check-config's line on where bundle ownership is read (extensible load manager)."""
        view = self.table_view()
        if view is None:
            return (
                "detected (loadManagerServiceUnitStateTableViewClassName unset): "
                "/service_unit_state is read where it exists, else lookups are forwarded"
            )
        if view:
            return "metadata store: /service_unit_state is read"
        return "system topic: lookups are forwarded to a broker; /service_unit_state is never read"

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
