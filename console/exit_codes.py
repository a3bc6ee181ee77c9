"""Exit codes of every command: 0 done, 1 failed (a lookup failed, a server did not start),
2 usage (bad arguments or input files)."""

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
