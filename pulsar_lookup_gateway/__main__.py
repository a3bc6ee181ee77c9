"""`python -m pulsar_lookup_gateway ...`: the same command as `pulsar-lookup-gateway ...`."""

from pulsar_lookup_gateway.gateway.cli import main

raise SystemExit(main())
