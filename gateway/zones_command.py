"""`pulsar-lookup-gateway resolve-zones`: the Spark job's arguments and entry point
(zones.cli) as a command of the gateway's command line."""

from __future__ import annotations

import argparse

from pulsar_lookup_gateway.zones import cli as zones_cli


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = zones_cli.DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    zones_cli.add_arguments(parser, master_default=zones_cli.DEFAULT_MASTER)
    parser.set_defaults(handler=zones_cli.run)
