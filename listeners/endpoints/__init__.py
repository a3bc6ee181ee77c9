"""Where clients meet the gateway: listener endpoints, the socket table, and where a client
really is (PROXY protocol, forwarded headers, the accepted socket's peer)."""
