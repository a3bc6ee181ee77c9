"""`pulsar-lookup-gateway certs --out DIR`: a development CA, server and client certificates,
and the config lines and client settings that use them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pulsar_lookup_gateway.console.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pulsar_lookup_gateway.tls.devcerts import DEFAULT_HOSTS, write_dev_certs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="directory to write into")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a DNS name or IP address for the server certificate (repeatable); "
        f"{', '.join(DEFAULT_HOSTS)} are always included",
    )
    parser.add_argument("--client-cn", default="client", help="client certificate CN")
    parser.add_argument("--days", type=int, default=365, help="validity (default 365)")
    parser.add_argument("--key-type", choices=("ec", "rsa"), default="ec")
    parser.add_argument("--p12-password", help="server.p12 password (default: random)")
    parser.add_argument("--force", action="store_true", help="replace existing files")
    parser.set_defaults(handler=cmd_certs)


def cmd_certs(args: argparse.Namespace) -> int:
    if args.days < 1:
        print("--days: must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        certs = write_dev_certs(
            args.out,
            args.host,
            client_cn=args.client_cn,
            p12_password=args.p12_password,
            days=args.days,
            key_type=args.key_type,
            overwrite=args.force,
        )
    except FileExistsError as exc:
        print(f"certs: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError) as exc:
        print(f"certs: {exc}", file=sys.stderr)
        return EXIT_USAGE
    d = certs.directory
    print(f"wrote a development CA and certificates to {d} (for development only)")
    print(f"  server certificate SANs: {', '.join(certs.hosts)}")
    print(f"  server.p12 password: {certs.p12_password}")
    print("gateway config:")
    print(f"  tlsCertificateFilePath={d / 'server.crt'}")
    print(f"  tlsKeyFilePath={d / 'server.key'}")
    print(f"  tlsTrustCertsFilePath={d / 'ca.crt'}")
    print(
        f"  # or: tlsKeyStoreType=PKCS12, tlsKeyStore={d / 'server.p12'}, tlsKeyStorePassword=..."
    )
    print("clients:")
    print(f"  tls_trust_certs_file_path={d / 'ca.crt'}   (curl --cacert {d / 'ca.crt'})")
    print(f"  mTLS: pulsar.AuthenticationTLS('{d / 'client.crt'}', '{d / 'client.key'}')")
    return EXIT_OK
