# docker-compose only (Kubernetes uses the upstream image with fsGroup instead).
# The upstream image keeps its data in a root-owned /data; a named volume copies the
# owner of the directory it is mounted on, so a fresh uid-1000 directory lets the
# server run as non-root with persistent data.
#   built by `docker compose build` (see docker-compose.yml)
FROM chrislusf/seaweedfs:4.00
RUN mkdir -p /srv/seaweedfs \
 && chown 1000:1000 /srv/seaweedfs \
 && printf '[leveldb2]\nenabled = true\ndir = "/srv/seaweedfs/filerldb2"\n' > /etc/seaweedfs/filer.toml
USER 1000:1000
WORKDIR /srv/seaweedfs
