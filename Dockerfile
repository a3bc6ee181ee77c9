# syntax=docker/dockerfile:1
# pulsar-lookup-gateway, from the repository's root (the tag is the project's version):
#   docker build -t pulsar-lookup-gateway:0.1.0 .
# Run it on a config of your own (a copy of configs/gateway.conf, the image's default) with the
# TLS files that config names (server.crt, server.key, ca.crt under /etc/pulsar-lookup-gateway/tls;
# `pulsar-lookup-gateway certs` writes a development set), publishing every port of its
# bindAddresses; --user lets the container read key files only you may read (mode 0600):
#   cp configs/gateway.conf gateway.conf    # then set metadataStoreUrl and the listeners
#   pulsar-lookup-gateway certs --out tls --host pulsar.example.com
#   docker run --rm --user "$(id -u):$(id -g)" \
#     -v "$PWD/gateway.conf:/etc/pulsar-lookup-gateway/gateway.conf:ro" \
#     -v "$PWD/tls:/etc/pulsar-lookup-gateway/tls:ro" \
#     -p 6650:6650 -p 6651:6651 -p 8080:8080 -p 8443:8443 pulsar-lookup-gateway:0.1.0
# Any key can also be set as an environment variable, e.g.
#   -e PULSAR_GATEWAY_metadataStoreUrl=zk:zk-0:2181/pulsar

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: a wheel of the project, installed with its dependencies into /opt/venv ----------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# What the wheel is made of (.dockerignore keeps everything else out of the context).
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY zones ./zones
COPY http_api ./http_api
COPY brokers ./brokers
COPY listeners ./listeners
COPY serving ./serving
COPY metadata_store ./metadata_store
COPY lookup ./lookup
COPY tls ./tls
COPY console ./console
COPY pulsar_lookup_gateway ./pulsar_lookup_gateway
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir /wheels/*.whl

# --- the image: the venv on a slim Python, no compilers, no pip cache, not root ---------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="pulsar-lookup-gateway" \
      org.opencontainers.image.description="Apache Pulsar topic lookups answered per network listener (PIP-95)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 pulsar-gateway \
    && useradd --system --uid 10001 --gid pulsar-gateway --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin pulsar-gateway
COPY --from=builder /opt/venv /opt/venv
# A default config (the documented example, configs/gateway.conf); mount your own over it, with
# its TLS and token files (deploy/kubernetes puts them under /etc/pulsar-lookup-gateway/).
COPY configs/gateway.conf /etc/pulsar-lookup-gateway/gateway.conf
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The ports of the example config's bindAddresses (configs/gateway.conf): binary 6650 (internal)
# and 6651 (external, TLS), HTTP 8080 (internal) and 8443 (external, TLS).
EXPOSE 6650 6651 8080 8443
USER 10001:10001
# Liveness on the internal HTTP socket (slim has no curl); /health needs no credentials.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=4)"]
STOPSIGNAL SIGTERM
# More options go after the image name: docker run ... pulsar-lookup-gateway --workers 2
ENTRYPOINT ["pulsar-lookup-gateway", "run", "--config", "/etc/pulsar-lookup-gateway/gateway.conf"]
