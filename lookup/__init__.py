"""The pure lookup core: topic names, bundles, the cluster model and view, listener selection,
resolve(), authorization rules, the lookup service and the metadata-source interface.

No module here does I/O or imports kazoo, aiohttp, pyspark, pyarrow or matplotlib, so the
gateway and the Spark job share it and cannot drift apart.
"""
