# syntax=docker/dockerfile:1
# The fedcore project image: every pipeline component runs in it, on CPU or GPU.
#   docker build -t ghcr.io/fedcore/fedcore:0.1.0 --build-arg GIT_COMMIT="$(git rev-parse HEAD)" .
# torch's PyPI wheels (2.14.1, CUDA 13 build) bundle the CUDA user-space libraries
# (cuBLAS, cuDNN, NCCL), so the base only needs to be a CUDA 13 Ubuntu that the NVIDIA
# container runtime recognises; the `base` flavour avoids a second copy of those libraries.
# They need an NVIDIA driver >= 580 on the GPU nodes (docs/deploy.md, "GPU nodes").
# Base: nvidia/cuda:13.0.1-base-ubuntu24.04. DIGEST PENDING: it could not be read offline when the
# lock landed; pin it as the tag plus `@sha256:<digest>` from
#   docker buildx imagetools inspect nvidia/cuda:13.0.1-base-ubuntu24.04 --format '{{json .Manifest.Digest}}'
# (tests/deploy/test_lock.py holds a strict xfail that turns red once the digest is in).
ARG CUDA_BASE=nvidia/cuda:13.0.1-base-ubuntu24.04

# ---- build: a virtualenv with torch and fedcore installed (non-editable) -------------
FROM ${CUDA_BASE} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.12 python3.12-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3.12 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Every dependency, torch's multi-GB wheels included, from the hashed lock (`make lock`): pip
# refuses any file whose sha256 differs and any package the lock does not pin. Its own layer,
# before the source, so code edits do not re-download it. torch==2.14.1, torchvision==0.29.1
# are pinned in pyproject.toml and the lock (tests/deploy checks both).
COPY docker/requirements.lock /tmp/requirements.lock
RUN pip install --require-hashes --no-deps -r /tmp/requirements.lock && rm /tmp/requirements.lock
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fedcore ./fedcore
COPY components ./components
COPY pipelines ./pipelines
# A regular (wheel) install: the runtime stage gets site-packages, not this source tree.
# --no-deps: the dependencies (with [gpu]'s nvidia-ml-py, for GPU use among MLflow's system
# metrics) are all in from the lock; --no-build-isolation builds with the lock's setuptools,
# not an unpinned download. `pip check` fails the build if the lock misses a requirement.
RUN pip install --no-deps --no-build-isolation . && pip check

# ---- runtime: python, the venv, a non-root user; no compilers, no source ------------
FROM ${CUDA_BASE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
# Fashion-MNIST's official files (30 MB) from the distribution, so the configs/fmnist presets and
# the fashion_mnist loader's fallback path work in every pod with no download at run time.
# Build with --build-arg DATASET_PACKAGES= for an image without them.
ARG DATASET_PACKAGES=dataset-fashion-mnist
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.12 ca-certificates ${DATASET_PACKAGES} \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 fedcore \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/fedcore \
      --shell /usr/sbin/nologin fedcore
COPY --from=build /opt/venv /opt/venv
# Caches go to /tmp so the image also runs with a read-only root filesystem
# (Kubernetes mounts an emptyDir there).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    XDG_CACHE_HOME=/tmp/cache \
    TORCH_HOME=/tmp/cache/torch
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
