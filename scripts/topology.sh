#!/usr/bin/env bash
# Local orchestration topology on one machine, every server bound to 127.0.0.1:
#   S3 (moto_server, dev only)  ->  MLflow tracking server (SQLite backend, S3 artifacts)
#   Prefect server  ->  process work pool `agentr1-process` + a worker  ->  `prefect deploy --all`
#
#   scripts/topology.sh up       start everything in the background (bounded waits), deploy;
#                                with no default DVC remote, set $DVC_REMOTE (s3://$S3_BUCKET/dvcstore)
#                                in the git-ignored .dvc/config.local
#                                moto keeps S3 in memory: a fresh one gets the bucket back from
#                                the mirror .topology/s3/$S3_BUCKET/ that `down`/`save` wrote
#   scripts/topology.sh status   what is running
#   scripts/topology.sh save     mirror the local S3 bucket (DVC remote dvcstore/, MLflow artifacts
#                                mlflow/) to .topology/s3/$S3_BUCKET/ now, one file per object
#   scripts/topology.sh down     stop what `up` started (by the pids it recorded), saving the local
#                                S3 bucket first; DISCARD_S3=1 stops without saving (DELETES it);
#                                removes the DVC remote `up` set from .dvc/config.local
#   scripts/topology.sh env      print the environment variables a client needs
#
# Logs and pid files: $AGENTR1_TOPOLOGY_DIR (default .prefect/topology, git-ignored). The S3
# mirror is always .topology/s3/<bucket>/ in this checkout (git-ignored), next to the mlflow/mlflow.db
# whose runs point at its artifacts; nothing from outside chooses where it writes.
# For a production topology, skip this script: point the variables printed by `env` at your
# servers (docs/OPERATIONS.md).
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
# S3 naming rules (3-63 of a-z 0-9 . -, no '..'): the name is also the mirror's folder name.
if [[ ! "$S3_BUCKET" =~ ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$ || "$S3_BUCKET" == *..* ]]; then
  echo "S3_BUCKET=$S3_BUCKET is not an S3 bucket name: use 3-63 characters of a-z 0-9 . - (no '..')" >&2
  exit 2
fi
S3_STORE=.topology/s3/$S3_BUCKET  # relative to $ROOT (the working directory)

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

running() { [[ -f "$TOPO/$1.pid" ]] && kill -0 "$(cat "$TOPO/$1.pid")" 2>/dev/null; }

start() {  # name, command...: start in the background, record the pid
  local name=$1; shift
  if running "$name"; then
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

save_s3() {  # mirror the bucket of the moto this script started into $S3_STORE
  mkdir -p "$S3_STORE"
  python - "$S3_BUCKET" "$S3_STORE" <<'EOF'
import sys
from agentr1.tracking.storage import S3Storage, mirror_summary, save_bucket
bucket, folder = sys.argv[1:]
r = save_bucket(S3Storage(bucket), folder)
print(f"saved s3://{bucket} -> {folder}/: {mirror_summary(folder)}; "
      f"{len(r.transferred)} downloaded, {len(r.skipped)} unchanged, {len(r.deleted)} removed")
EOF
}

case "${1:-}" in
  up)
    local_s3=${USE_LOCAL_S3:-1} fresh_s3=0
    if [[ "$local_s3" == 1 ]]; then
      running s3 || fresh_s3=1
      start s3 moto_server -H 127.0.0.1 -p "$S3_PORT"
      wait_http "http://127.0.0.1:$S3_PORT/" s3 "$TOPO/s3.pid"
    fi
    # A fresh moto is empty: create the bucket and, for the local S3, upload the mirror into it.
    # If that fails, stop the moto just started, so that no later `down` saves a partial bucket
    # over the mirror.
    if ! python - "$S3_BUCKET" "$S3_STORE" "$local_s3" <<'EOF'
import sys
from pathlib import Path
from agentr1.tracking.storage import S3BucketNotFoundError, S3Storage, mirror_summary, restore_bucket
bucket, folder, local = sys.argv[1:]
store = S3Storage(bucket)
try:
    store.check()
    print(f"bucket s3://{bucket} exists (kept as it is)")
except S3BucketNotFoundError:
    store.client.create_bucket(Bucket=bucket)
    print(f"created bucket s3://{bucket}")
    if local == "1" and Path(folder).is_dir():
        r = restore_bucket(store, folder)
        print(f"restored s3://{bucket} from {folder}/: {mirror_summary(folder)}; {len(r.transferred)} uploaded")
    elif local == "1":
        print(f"nothing to restore: no {folder}/ yet (`down` and `save` write it)")
EOF
    then
      if [[ "$fresh_s3" == 1 ]]; then stop s3; fi
      echo "S3 bucket setup failed (above); the mirror $S3_STORE/ is untouched" >&2
      exit 1
    fi
    # `dvc push` needs a remote: .dvc/config tracks none (a localhost URL is wrong for anyone
    # else), so point the git-ignored .dvc/config.local at this topology's bucket - unless the
    # checkout already has a default remote of its own.
    current=$(dvc remote default 2>/dev/null) || current=""  # rc 1: "No default remote set"
    if [[ -z "$current" || "$current" == "$DVC_REMOTE" ]]; then
      dvc remote add --local --default --force "$DVC_REMOTE" "s3://$S3_BUCKET/dvcstore"
      dvc remote modify --local "$DVC_REMOTE" endpointurl "$AWS_ENDPOINT_URL_S3"
      echo "$DVC_REMOTE" >"$TOPO/dvc-remote"  # `down` removes it again: it points at this topology's S3 only
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
  save)
    if ! running s3; then
      echo "no local S3 (moto) started by this script is running: nothing to save" >&2; exit 1
    fi
    save_s3
    ;;
  down)
    # the writers first, then the bucket is saved, then moto (which keeps S3 in memory) stops
    for n in worker prefect-server mlflow; do stop "$n"; done
    if running s3; then
      if [[ "${DISCARD_S3:-0}" == 1 ]]; then
        stop s3
        cat >&2 <<EOF
WARNING: DISCARD_S3=1: moto_server was stopped WITHOUT saving: s3://$S3_BUCKET is gone (DVC
WARNING: remote dvcstore/ and MLflow artifacts mlflow/) except what the last save put in
WARNING: $S3_STORE/, which the next 'up' restores; mlflow/mlflow.db may list artifacts it lacks.
EOF
      elif save_s3; then
        stop s3
        echo "the next 'up' restores s3://$S3_BUCKET from $S3_STORE/"
      else
        cat >&2 <<EOF
ERROR: saving s3://$S3_BUCKET to $S3_STORE/ failed (above), so moto_server is STILL RUNNING with
ERROR: the only copy of what changed since the last save. Fix the error and run 'down' again, or
ERROR: stop it without saving: DISCARD_S3=1 scripts/topology.sh down
EOF
        exit 1
      fi
    elif [[ -f "$TOPO/s3.pid" ]]; then
      rm -f "$TOPO/s3.pid"
      echo "WARNING: moto_server (s3) had died: nothing to save; $S3_STORE/ keeps the last save" >&2
    fi
    # the DVC remote `up` set points at the S3 just stopped: left in .dvc/config.local, it would
    # make every `dvc push/pull/status -c` of a plain shell fail (no endpoint, no credentials)
    if [[ -f "$TOPO/dvc-remote" ]]; then
      remote=$(cat "$TOPO/dvc-remote")
      if dvc remote remove --local "$remote" >/dev/null 2>&1; then
        echo "removed DVC remote $remote from .dvc/config.local (the next 'up' sets it again)"
      else
        echo "DVC remote $remote was no longer in .dvc/config.local"
      fi
      rm -f "$TOPO/dvc-remote"
    fi
    ;;
  status)
    for n in s3 mlflow prefect-server worker; do
      if running "$n"; then
        echo "$n: running (pid $(cat "$TOPO/$n.pid"), log $TOPO/$n.log)"
      else
        echo "$n: stopped"
      fi
    done
    if [[ -d "$S3_STORE" ]]; then
      echo "S3 mirror: $S3_STORE/ ($(find "$S3_STORE" -type f | wc -l) files, $(du -sh "$S3_STORE" | cut -f1))"
    else
      echo "S3 mirror: none yet ($S3_STORE/)"
    fi
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
    echo "usage: $0 up|down|save|status|env" >&2; exit 2 ;;
esac
