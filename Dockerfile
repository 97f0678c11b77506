# The fedcore project image: every pipeline component runs in it, on CPU or GPU nodes.
#   make image                  # builds it (and, where the base cannot be pulled, the base first)
#   docker build -t fedcore:0.1.0 --build-arg GIT_COMMIT="$(git rev-parse HEAD)" .
# Base: Debian 12 slim, the distribution and Python (3.11) the test suite runs on, so the image
# runs no interpreter that CI never tested. torch's PyPI wheels (2.14.1, CUDA 13 build) bring the
# CUDA user-space libraries (cuBLAS, cuDNN, NCCL) themselves, so no CUDA base image is needed: the
# NVIDIA container runtime only has to mount the driver, which the NVIDIA_* variables below ask for.
# GPU nodes need an NVIDIA driver >= 580 (docs/deploy.md, "GPU nodes").
# Pinned by digest (tag debian:12.12-slim). Without a registry, `make image` builds an equivalent
# base from Debian's archive with debootstrap (scripts/debian-base.sh) and passes it as BASE.
ARG BASE=debian:12.12-slim@sha256:d5d3f9c23164ea16f31852f95bd5959aad1c5e854332fe00f7b3a20fcc9f635c

# ---- build: a virtualenv with torch and fedcore installed (non-editable) -------------
FROM ${BASE} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# Every dependency, torch's multi-GB wheels included, from the hashed lock (`make lock`): pip
# refuses any file whose sha256 differs and any package the lock does not pin. Its own layer,
# before the source, so code edits reuse it from the build cache.
# docker/build-ca/: a tracked folder, so a plain `docker build .` from a fresh clone works. `make image`
# writes the CA bundle the build host's pip trusts into it as ca.pem (git-ignored), for networks that
# re-sign TLS; without ca.pem pip uses its own. Only this stage sees it; the runtime stage does not.
COPY docker/requirements.lock /tmp/
COPY docker/build-ca/ /tmp/build-ca/
RUN if [ -s /tmp/build-ca/ca.pem ]; then export PIP_CERT=/tmp/build-ca/ca.pem; fi \
 && pip install --require-hashes --no-deps -r /tmp/requirements.lock && rm /tmp/requirements.lock

# ---- wheel: fedcore itself, built with the lock's setuptools ------------------------------
FROM build AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fedcore ./fedcore
COPY components ./components
COPY pipelines ./pipelines
# --no-build-isolation: built with the lock's setuptools, not an unpinned download.
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

# ---- runtime: python, the venv, a non-root user; no compilers, no source ------------
FROM ${BASE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
# Fashion-MNIST's official files (30 MB) from the distribution, so the configs/fmnist presets and
# the fashion_mnist loader's fallback path work in every pod with no download at run time.
# Build with --build-arg DATASET_PACKAGES= for an image without them.
ARG DATASET_PACKAGES=dataset-fashion-mnist
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates ${DATASET_PACKAGES} \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 fedcore \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/fedcore \
      --shell /usr/sbin/nologin fedcore
# The dependencies' venv (GBs) is one layer that only a new lock rebuilds; fedcore's wheel goes in on
# top, so a code change ships a small layer. --no-deps: everything it needs is in from the lock
# (with [gpu]'s nvidia-ml-py, for GPU use among MLflow's system metrics); `pip check` fails the
# build if the lock misses a requirement. No source tree stays behind, only site-packages.
COPY --from=build /opt/venv /opt/venv
COPY --from=wheel /wheels /tmp/wheels
RUN /opt/venv/bin/pip install --no-deps --no-index --no-compile /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels \
 && /opt/venv/bin/pip check
# Caches go to /tmp so the image also runs with a read-only root filesystem
# (Kubernetes mounts an emptyDir there, `docker run` a tmpfs); FEDCORE_CACHE, where s3:// datasets are
# staged, would otherwise be ./.fedcore-cache (the k8s/runner ConfigMap points it at the cache PVC).
# NVIDIA_*: what the NVIDIA container runtime mounts (the driver's compute and NVML libraries);
# CUDA base images set the same two, and ours must too since it is built on plain Debian.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    XDG_CACHE_HOME=/tmp/cache \
    TORCH_HOME=/tmp/cache/torch \
    FEDCORE_CACHE=/tmp/fedcore-cache \
    HOME=/home/fedcore \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# Runs record the commit they were built from (no .git inside the image).
ARG GIT_COMMIT=unknown
ENV FEDCORE_GIT_COMMIT=${GIT_COMMIT}
LABEL org.opencontainers.image.title="fedcore" \
      org.opencontainers.image.description="Federated learning under noisy labels" \
      org.opencontainers.image.licenses="Apache-2.0"
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /home/fedcore
CMD ["fedcore", "--help"]
