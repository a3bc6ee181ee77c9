"""TLS for the gateway's sockets: settings, key material, contexts, hot reload, development
certificates. Imports nothing of the project outside this folder."""
