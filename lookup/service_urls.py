"""Service URLs that list several hosts, as a cluster's `serviceUrl` may
(`http://h1:8080,h2:8080`): Pulsar's ServiceURI reads them as one scheme and a list of hosts,
and a redirect goes to one of them (PulsarWebResource.getRedirectionUrl resolves one with
PulsarServiceNameResolver). Pure: no I/O."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["service_hosts"]

#: ServiceURI's default port of each scheme, for a host listed without one.
DEFAULT_PORTS = {"http": 80, "https": 443, "pulsar": 6650, "pulsar+ssl": 6651}


def service_hosts(url: str) -> list[str]:
    """`scheme://host[:port]` for each host of a service URL, in order (a host without a port
    gets its scheme's default, as ServiceURI gives it); the URL whole when it lists one host
    or is not of that shape."""
    scheme, sep, rest = url.partition("://")
    authority = rest.split("/", 1)[0]
    if not sep or "," not in authority:
        return [url]
    hosts: list[str] = []
    for host in authority.split(","):
        host = host.strip()
        if not host:
            continue
        try:
            port = urlsplit(f"//{host}").port
        except ValueError:
            return [url]
        if port is None and scheme.lower() in DEFAULT_PORTS:
            host = f"{host}:{DEFAULT_PORTS[scheme.lower()]}"
        hosts.append(f"{scheme}://{host}")
    return hosts or [url]
