"""pulsar-lookup-gateway: Apache Pulsar topic lookups answered per network listener (PIP-95).

The one import name the distribution installs. In the repository its subpackages (`gateway`,
`zones`, `http_api`, `listeners`, `metadata_store`, `lookup`, `tls`, `console`) are the folders at
the top level, linked here, so that the wheel, the editable install, `python -m`, mypy and the
zip a Spark job ships all see the same names: `pulsar_lookup_gateway.lookup`, ...
"""
