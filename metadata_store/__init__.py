"""Cluster metadata as the gateway reads it: ZooKeeper (kazoo) and snapshot-file sources of the
lookup core's MetadataSource, seed and dump, the snapshot format, an embedded ZooKeeper."""
