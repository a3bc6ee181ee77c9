"""The process on top: every command, the wiring of a gateway, signals, --workers."""
