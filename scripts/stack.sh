#!/usr/bin/env bash
# The tracking stack as containers, built here: Postgres, MLflow (basic-auth, artifacts in S3) and an
# S3 store, with docker-compose.yml's services, users and hardening (read-only root, no capabilities,
# no-new-privileges, ports on 127.0.0.1 only).
#   scripts/stack.sh up     build what is missing, start, wait until healthy, write .stack/*.env
#   scripts/stack.sh down   stop and remove the containers and the network (PURGE=1: the data volume too)
# Pipeline tasks join the internal network `fedcore-stack` and reach nothing else:
#   fedcore pipeline run experiment configs/quickstart.yaml --local --runner docker \
#       --network fedcore-stack --env-file .stack/tasks.env  (STACK=fedcore)
# The host side reads .stack/host.env (set -a; . .stack/host.env; set +a).
set -euo pipefail
cd "$(dirname "$0")/.."
STACK="${STACK:-fedcore}"          # prefix of the containers, network and volume (tests use their own)
STATE="${STACK_DIR:-.stack}"      # credentials and the two env files
NET="$STACK-stack"
IMAGE="${IMAGE:-ghcr.io/fedcore/fedcore:0.1.0}"
PG_IMAGE=fedcore-local/postgres:15
TRACKING_IMAGE=fedcore-local/tracking:3.17
MLFLOW_PORT="${MLFLOW_PORT:-5000}"
S3_PORT="${S3_PORT:-8333}"
HARDENED=(--read-only --cap-drop ALL --security-opt no-new-privileges --tmpfs /tmp:rw,nosuid,nodev,size=256m,mode=1777)

down() {
  docker rm -f "$STACK-mlflow" "$STACK-s3" "$STACK-postgres" >/dev/null 2>&1 || true
  docker network rm "$NET" >/dev/null 2>&1 || true
  if [ "${PURGE:-0}" = 1 ]; then docker volume rm "$STACK-postgres-data" >/dev/null 2>&1 || true; rm -rf "$STATE"; fi
  echo "stack down"
}

secret() { python3 -c 'import secrets; print(secrets.token_hex(24))'; }

credentials() {
  mkdir -p "$STATE"
  chmod 700 "$STATE"
  [ -s "$STATE/credentials.env" ] && return 0
  umask 077
  cat > "$STATE/credentials.env" <<CREDS
POSTGRES_USER=mlflow
POSTGRES_PASSWORD=$(secret)
AWS_ACCESS_KEY_ID=fedcore$(secret | cut -c1-12)
AWS_SECRET_ACCESS_KEY=$(secret)
MLFLOW_AUTH_ADMIN_USERNAME=admin
MLFLOW_AUTH_ADMIN_PASSWORD=$(secret)
MLFLOW_FLASK_SERVER_SECRET_KEY=$(secret)
MLFLOW_TRACKING_USERNAME=fedcore-pod
MLFLOW_TRACKING_PASSWORD=$(secret)
CREDS
}

images() {
  local base
  if ! docker image inspect "$PG_IMAGE" >/dev/null 2>&1 || ! docker image inspect "$TRACKING_IMAGE" >/dev/null 2>&1; then
    base="$(sed -n 's/^ARG BASE=//p' Dockerfile)"
    if ! docker image inspect "$base" >/dev/null 2>&1 && ! docker pull -q "$base" >/dev/null 2>&1; then
      base="$(bash scripts/debian-base.sh)"
    fi
    echo "building $PG_IMAGE and $TRACKING_IMAGE on $base" >&2
    docker build -q -f docker/stack.Dockerfile --build-arg BASE="$base" --target postgres -t "$PG_IMAGE" . >/dev/null
    docker build -q -f docker/stack.Dockerfile --build-arg BASE="$base" --target tracking -t "$TRACKING_IMAGE" . >/dev/null
  fi
  if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "error: $IMAGE is missing (its auth setup runs in it); run make image first" >&2
    exit 2
  fi
}

wait_for() {  # NAME COMMAND...: until the command succeeds in the container, 3 minutes at most
  local name="$1"; shift
  for _ in $(seq 180); do
    if docker exec "$name" "$@" >/dev/null 2>&1; then return 0; fi
    if [ "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" != true ]; then break; fi
    sleep 1
  done
  echo "error: $name did not become healthy; its log:" >&2
  docker logs --tail 30 "$name" >&2 || true
  exit 1
}

up() {
  command -v docker >/dev/null && docker info >/dev/null 2>&1 \
    || { echo "error: no running Docker daemon; start Docker first (dockerd &)" >&2; exit 2; }
  credentials
  images
  set -a; . "$STATE/credentials.env"; set +a
  # Internal: containers on it reach each other and nothing outside (the tasks' only network).
  docker network inspect "$NET" >/dev/null 2>&1 || docker network create --internal "$NET" >/dev/null
  docker rm -f "$STACK-mlflow" "$STACK-s3" "$STACK-postgres" >/dev/null 2>&1 || true

  docker run -d --name "$STACK-postgres" --network "$NET" --network-alias postgres --user 70:70 "${HARDENED[@]}" \
    -e POSTGRES_USER -e POSTGRES_PASSWORD -e POSTGRES_DB=mlflow \
    -v "$STACK-postgres-data":/var/lib/postgresql/data "$PG_IMAGE" >/dev/null
  # The S3 store and MLflow publish a port on 127.0.0.1 (the default bridge), then join the stack network.
  docker run -d --name "$STACK-s3" --user 10001:10001 "${HARDENED[@]}" -p "127.0.0.1:$S3_PORT:8333" \
    -e MOTO_ALLOW_NONEXISTENT_REGION=true "$TRACKING_IMAGE" moto_server -H 0.0.0.0 -p 8333 >/dev/null
  docker network connect --alias s3 --alias seaweedfs-s3 "$NET" "$STACK-s3"
  wait_for "$STACK-postgres" pg_isready -h 127.0.0.1 -p 5432
  wait_for "$STACK-s3" python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8333/')"
  docker run --rm --network "$NET" --user 10001:10001 "${HARDENED[@]}" -e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY \
    -e AWS_DEFAULT_REGION=us-east-1 -e MLFLOW_S3_ENDPOINT_URL=http://s3:8333 "$TRACKING_IMAGE" \
    python /opt/fedcore/create_bucket.py fedcore >/dev/null

  # k8s/base/mlflow-auth.ini, pointed at this stack's Postgres.
  sed 's#^database_uri = .*#database_uri = postgresql+psycopg://postgres:5432/mlflow#' k8s/base/mlflow-auth.ini \
    > "$STATE/mlflow-auth.ini"
  chmod 644 "$STATE/mlflow-auth.ini"
  docker run -d --name "$STACK-mlflow" --user 10001:10001 "${HARDENED[@]}" -p "127.0.0.1:$MLFLOW_PORT:5000" \
    -v "$(cd "$STATE" && pwd)/mlflow-auth.ini:/etc/mlflow-auth/basic_auth.ini:ro" \
    -e MLFLOW_BACKEND_STORE_URI=postgresql+psycopg://postgres:5432/mlflow -e PGUSER="$POSTGRES_USER" \
    -e PGPASSWORD="$POSTGRES_PASSWORD" -e HOME=/tmp -e MLFLOW_AUTH_CONFIG_PATH=/etc/mlflow-auth/basic_auth.ini \
    -e MLFLOW_AUTH_ADMIN_USERNAME -e MLFLOW_AUTH_ADMIN_PASSWORD -e MLFLOW_FLASK_SERVER_SECRET_KEY \
    -e MLFLOW_S3_ENDPOINT_URL=http://s3:8333 -e MLFLOW_BOTO_CLIENT_ADDRESSING_STYLE=path \
    -e AWS_DEFAULT_REGION=us-east-1 -e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY \
    "$TRACKING_IMAGE" mlflow server --app-name basic-auth --host 0.0.0.0 --port 5000 --workers 2 \
    --artifacts-destination s3://fedcore/mlflow-artifacts \
    "--allowed-hosts=mlflow:5000,localhost:*,127.0.0.1:*" >/dev/null
  docker network connect --alias mlflow "$NET" "$STACK-mlflow"
  wait_for "$STACK-mlflow" python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5000/health')"

  write_env tasks.env "http://mlflow:5000" "http://s3:8333"
  write_env host.env "http://127.0.0.1:$MLFLOW_PORT" "http://127.0.0.1:$S3_PORT"
  # The pods' non-admin user, as k8s/base's mlflow-auth-setup Job makes it (fedcore deploy mlflow-auth).
  docker run --rm --network "$NET" --user 10001:10001 "${HARDENED[@]}" --env-file "$STATE/tasks.env" \
    -e FEDCORE_MLFLOW_ADMIN_USERNAME="$MLFLOW_AUTH_ADMIN_USERNAME" \
    -e FEDCORE_MLFLOW_ADMIN_PASSWORD="$MLFLOW_AUTH_ADMIN_PASSWORD" "$IMAGE" \
    fedcore deploy mlflow-auth --experiment=fedcore --model=fedcore-digits-fedavg ${STACK_MODELS:-} >/dev/null
  echo "stack up: MLflow http://127.0.0.1:$MLFLOW_PORT (user $MLFLOW_TRACKING_USERNAME), S3 http://127.0.0.1:$S3_PORT;" \
       "tasks: --network $NET --env-file $STATE/tasks.env; host: $STATE/host.env"
}

write_env() {  # FILE MLFLOW_URL S3_URL: what a fedcore client needs, as seen from the host or the network
  umask 077
  cat > "$STATE/$1" <<ENV
MLFLOW_TRACKING_URI=$2
MLFLOW_TRACKING_USERNAME=$MLFLOW_TRACKING_USERNAME
MLFLOW_TRACKING_PASSWORD=$MLFLOW_TRACKING_PASSWORD
MLFLOW_S3_ENDPOINT_URL=$3
AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID
AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY
AWS_DEFAULT_REGION=us-east-1
FEDCORE_S3_ADDRESSING=path
ENV
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: scripts/stack.sh up|down" >&2; exit 2 ;;
esac
