# The tracking stack's images, built from what a machine without a container registry reaches:
# Debian's postgresql package, and MLflow plus moto's S3 server from the hashed stack lock.
# The same services and settings as docker-compose.yml and k8s/base (scripts/stack.sh runs them):
#   docker build -f docker/stack.Dockerfile --target postgres -t fedcore-local/postgres:15 .
#   docker build -f docker/stack.Dockerfile --target tracking -t fedcore-local/tracking:3.17 .
# BASE: the project Dockerfile's pinned Debian 12 (or its debootstrap twin, scripts/debian-base.sh).
ARG BASE=debian:12.12-slim@sha256:d5d3f9c23164ea16f31852f95bd5959aad1c5e854332fe00f7b3a20fcc9f635c

# ---- postgres: Debian 12's PostgreSQL 15 as uid 70, like compose's alpine image ---------
FROM ${BASE} AS postgres
ARG DEBIAN_FRONTEND=noninteractive
# The user exists before the package so its postinst keeps uid/gid 70 (compose runs "70:70").
RUN groupadd --system --gid 70 postgres \
 && useradd --system --uid 70 --gid 70 --home-dir /var/lib/postgresql --shell /bin/sh postgres \
 && apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o 70 -g 70 -m 0700 /var/lib/postgresql/data
COPY docker/stack/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
USER 70:70
ENTRYPOINT ["postgres-entrypoint"]

# ---- the Python services' virtualenv, from the hashed stack lock --------------------------
FROM ${BASE} AS tracking-build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# docker/build-ca/ca.pem: the build host's CA bundle, when scripts/stack.sh finds one (as in ./Dockerfile).
COPY docker/stack-requirements.lock /tmp/
COPY docker/build-ca/ /tmp/build-ca/
RUN if [ -s /tmp/build-ca/ca.pem ]; then export PIP_CERT=/tmp/build-ca/ca.pem; fi \
 && pip install --require-hashes --no-deps -r /tmp/stack-requirements.lock && pip check

# ---- tracking: `mlflow server` (basic-auth, Postgres, S3 artifacts) and `moto_server` (S3) --
FROM ${BASE} AS tracking
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 mlflow \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --shell /usr/sbin/nologin mlflow
COPY --from=tracking-build /opt/venv /opt/venv
COPY k8s/base/create_bucket.py /opt/fedcore/create_bucket.py
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
USER 10001:10001
WORKDIR /tmp
CMD ["mlflow", "server", "--help"]
