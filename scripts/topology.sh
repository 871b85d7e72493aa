#!/usr/bin/env bash
# Local orchestration topology on one machine, every server bound to 127.0.0.1:
#   S3 (moto_server, dev only)  ->  MLflow tracking server (SQLite backend, S3 artifacts)
#   Prefect server  ->  process work pool `agentr1-process` + a worker  ->  `prefect deploy --all`
#
#   scripts/topology.sh up       start everything in the background (bounded waits), deploy;
#                                with no default DVC remote, set $DVC_REMOTE (s3://$S3_BUCKET/dvcstore)
#                                in the git-ignored .dvc/config.local
#   scripts/topology.sh status   what is running
#   scripts/topology.sh down     stop what `up` started (by the pids it recorded); moto keeps S3 in
#                                memory, so this DELETES the DVC remote and the MLflow artifacts
#   scripts/topology.sh env      print the environment variables a client needs
#
# Logs and pid files: $AGENTR1_TOPOLOGY_DIR (default .prefect/topology, git-ignored).
# For a production topology, skip this script: point the variables printed by `env` at your
# servers (README "Orchestration and production topology").
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${BIN:-$ROOT/.venv/bin}
TOPO=${AGENTR1_TOPOLOGY_DIR:-$ROOT/.prefect/topology}
S3_PORT=${S3_PORT:-9000}
MLFLOW_PORT=${MLFLOW_PORT:-5000}
PREFECT_PORT=${PREFECT_PORT:-4200}
S3_BUCKET=${S3_BUCKET:-agentr1}
WAIT_S=${WAIT_S:-180}

export PATH="$BIN:$PATH"
export PREFECT_HOME=${PREFECT_HOME:-$TOPO/prefect-home}
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export GX_ANALYTICS_ENABLED=false
export PREFECT_API_URL=${PREFECT_API_URL:-http://127.0.0.1:$PREFECT_PORT/api}
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-http://127.0.0.1:$MLFLOW_PORT}
export MLFLOW_S3_ENDPOINT_URL=${MLFLOW_S3_ENDPOINT_URL:-http://127.0.0.1:$S3_PORT}
export AWS_ENDPOINT_URL_S3=${AWS_ENDPOINT_URL_S3:-$MLFLOW_S3_ENDPOINT_URL}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}
# moto accepts any key pair; these dummies exist only for the local dev server. With real S3,
# export your own (or AWS_PROFILE) before running this script - they are never written to disk.
INVENTED_KEYS=0
if [[ -z "${AWS_ACCESS_KEY_ID:-}" && -z "${AWS_PROFILE:-}" ]]; then
  export AWS_ACCESS_KEY_ID=local-dev AWS_SECRET_ACCESS_KEY=local-dev
  INVENTED_KEYS=1
fi
DVC_REMOTE=${DVC_REMOTE:-agentr1-local}

mkdir -p "$TOPO"

wait_http() {  # url, name, pidfile: poll until HTTP answers, the process dies, or WAIT_S passes
  local url=$1 name=$2 pid
  pid=$(cat "$3")
  for ((i = 0; i < WAIT_S; i++)); do
    if curl -s -o /dev/null --max-time 2 "$url"; then echo "$name up ($url)"; return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then echo "$name died; log: $TOPO/$name.log" >&2; tail -20 "$TOPO/$name.log" >&2; return 1; fi
    sleep 1
  done
  echo "$name not up after ${WAIT_S}s; log: $TOPO/$name.log" >&2
  return 1
}

start() {  # name, command...: start in the background, record the pid
  local name=$1; shift
  if [[ -f "$TOPO/$name.pid" ]] && kill -0 "$(cat "$TOPO/$name.pid")" 2>/dev/null; then
    echo "$name already running (pid $(cat "$TOPO/$name.pid"))"; return 0
  fi
  setsid "$@" >"$TOPO/$name.log" 2>&1 &
  echo $! >"$TOPO/$name.pid"
  echo "started $name (pid $!): $*"
}

stop() {
  local name=$1 pid
  [[ -f "$TOPO/$name.pid" ]] || return 0
  pid=$(cat "$TOPO/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"; }
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$TOPO/$name.pid"
}

case "${1:-}" in
  up)
    if [[ "${USE_LOCAL_S3:-1}" == 1 ]]; then
      start s3 moto_server -H 127.0.0.1 -p "$S3_PORT"
      wait_http "http://127.0.0.1:$S3_PORT/" s3 "$TOPO/s3.pid"
    fi
    python - <<EOF
from agentr1.tracking.storage import S3Storage, S3BucketNotFoundError
import boto3, os
try:
    S3Storage("$S3_BUCKET").check(); print("bucket s3://$S3_BUCKET exists")
except S3BucketNotFoundError:
    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"]).create_bucket(Bucket="$S3_BUCKET")
    print("created bucket s3://$S3_BUCKET")
EOF
    # `dvc push` needs a remote: .dvc/config tracks none (a localhost URL is wrong for anyone
    # else), so point the git-ignored .dvc/config.local at this topology's bucket - unless the
    # checkout already has a default remote of its own.
    current=$(dvc remote default 2>/dev/null) || current=""  # rc 1: "No default remote set"
    if [[ -z "$current" || "$current" == "$DVC_REMOTE" ]]; then
      dvc remote add --local --default --force "$DVC_REMOTE" "s3://$S3_BUCKET/dvcstore"
      dvc remote modify --local "$DVC_REMOTE" endpointurl "$AWS_ENDPOINT_URL_S3"
      echo "DVC remote $DVC_REMOTE -> s3://$S3_BUCKET/dvcstore ($AWS_ENDPOINT_URL_S3), in .dvc/config.local"
    else
      echo "DVC default remote: $current (kept)"
    fi
    mkdir -p mlflow
    start mlflow mlflow server --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 \
      --backend-store-uri "sqlite:///$ROOT/mlflow/mlflow.db" \
      --artifacts-destination "s3://$S3_BUCKET/mlflow" \
      --allowed-hosts "127.0.0.1:$MLFLOW_PORT,localhost:$MLFLOW_PORT"
    start prefect-server prefect server start --host 127.0.0.1 --port "$PREFECT_PORT"
    wait_http "http://127.0.0.1:$PREFECT_PORT/api/health" prefect-server "$TOPO/prefect-server.pid"
    wait_http "http://127.0.0.1:$MLFLOW_PORT/health" mlflow "$TOPO/mlflow.pid"
    prefect work-pool create agentr1-process --type process --overwrite
    prefect --no-prompt deploy --all
    start worker prefect worker start --pool agentr1-process --limit 1
    echo "topology up: Prefect UI http://127.0.0.1:$PREFECT_PORT  MLflow UI $MLFLOW_TRACKING_URI  S3 $AWS_ENDPOINT_URL_S3"
    ;;
  down)
    had_s3=0
    if [[ -f "$TOPO/s3.pid" ]]; then had_s3=1; fi
    for n in worker prefect-server mlflow s3; do stop "$n"; done
    if [[ "$had_s3" == 1 ]]; then
      cat >&2 <<EOF
WARNING: moto_server keeps S3 in memory only: stopping it DELETED s3://$S3_BUCKET, i.e. the
WARNING: DVC remote (dvcstore/) and every MLflow artifact (mlflow/). mlflow/mlflow.db still lists
WARNING: the runs, but their artifacts are gone; after the next 'up', run 'dvc push' again.
EOF
    fi
    ;;
  status)
    for n in s3 mlflow prefect-server worker; do
      if [[ -f "$TOPO/$n.pid" ]] && kill -0 "$(cat "$TOPO/$n.pid")" 2>/dev/null; then
        echo "$n: running (pid $(cat "$TOPO/$n.pid"), log $TOPO/$n.log)"
      else
        echo "$n: stopped"
      fi
    done
    ;;
  env)
    echo "export PREFECT_API_URL=$PREFECT_API_URL"
    echo "export MLFLOW_TRACKING_URI=$MLFLOW_TRACKING_URI"
    echo "export MLFLOW_S3_ENDPOINT_URL=$MLFLOW_S3_ENDPOINT_URL"
    echo "export AWS_ENDPOINT_URL_S3=$AWS_ENDPOINT_URL_S3"
    echo "export AWS_DEFAULT_REGION=$AWS_DEFAULT_REGION"
    if [[ "$INVENTED_KEYS" == 1 ]]; then  # the dummy pair this script gives moto, not a secret
      echo "export AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID"
      echo "export AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY"
    else
      echo "# AWS credentials: your own AWS_PROFILE / AWS_ACCESS_KEY_ID (not printed)"
    fi
    ;;
  *)
    echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
