"""`metadataStoreUrl`: `zk:host:port[,host:port][/chroot]` or `file:PATH`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ZK_DEFAULT_PORT = 2181


@dataclass(frozen=True, slots=True)
class MetadataUrl:
    kind: Literal["zk", "file"]
    hosts: tuple[tuple[str, int], ...] = ()  # zk only
    chroot: str = ""  # zk only, "" or "/path"
    path: str = ""  # file only

    @property
    def zk_hosts(self) -> str:
        """The connect string kazoo takes (`host:port,host:port`)."""
        return ",".join(f"{host}:{port}" for host, port in self.hosts)

    @property
    def connect_string(self) -> str:
        """The hosts and the chroot, as a kazoo client inside the chroot takes them."""
        return self.zk_hosts + self.chroot

    def __str__(self) -> str:
        if self.kind == "file":
            return f"file:{self.path}"
        return f"zk:{self.connect_string}"


def parse_metadata_url(text: str) -> MetadataUrl:
    """Raises ValueError saying what is wrong."""
    text = text.strip()
    if text.startswith("file:"):
        path = text[len("file:") :]
        if path.startswith("//"):  # file:///abs/path
            path = path[2:]
        if not path:
            raise ValueError(f"'{text}': file: needs a path")
        return MetadataUrl("file", path=path)
    if not text.startswith("zk:"):
        raise ValueError(f"'{text}' is neither zk:host:port[,host:port][/chroot] nor file:PATH")
    rest = text[len("zk:") :].removeprefix("//")
    hosts_text, slash, chroot = rest.partition("/")
    chroot = f"/{chroot}".rstrip("/") if slash else ""
    hosts: list[tuple[str, int]] = []
    for item in hosts_text.split(","):
        host, colon, port_text = item.strip().rpartition(":")
        if not colon:
            host, port_text = port_text, str(ZK_DEFAULT_PORT)
        if not host:
            raise ValueError(f"'{text}': '{item}' has no host")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"'{text}': '{item}' has no valid port")
        hosts.append((host, int(port_text)))
    if "//" in chroot:
        raise ValueError(f"'{text}': chroot '{chroot}' has an empty path element")
    return MetadataUrl("zk", hosts=tuple(hosts), chroot=chroot)
