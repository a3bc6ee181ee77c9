"""The lookup domain: topic names, bundles, the cluster model and resolve().

The core modules (errors, topics, bundles, model, view, selection, resolve) do no I/O, so the
gateway and the Spark job share them and cannot drift apart.
"""
