"""The Pulsar binary protocol, sans-IO: the codec is :mod:`listeners.protocol.codec`, the
messages are generated from `pulsar_api.proto` (`make proto`)."""
