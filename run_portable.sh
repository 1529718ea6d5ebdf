#!/usr/bin/env bash
# Submits `dcm2tfrecord convert` to a Flink or Spark cluster through Beam's portable runner.
#
#   ./run_portable.sh --job_endpoint HOST:8099 --input /shared/archive --output /shared/datasets/ct \
#       --id_salt_file /run/secrets/dcm2tfrecord-salt [--labels /shared/labels.csv ...]
#
# --job_endpoint is the Beam job server of your cluster (Flink's or Spark's, see
# docs/OPERATIONS.md, "On your own cluster"); --job_endpoint embed runs Beam's own job service in this process
# (to try the workers without a cluster). The SDK workers default to
# --environment_type=EXTERNAL --environment_config=localhost:50000: a Beam worker pool
# beside each task manager (python -m apache_beam.runners.worker.worker_pool_main
# --service_port=50000, started from a Python that has this project installed).
# Give DOCKER or PROCESS instead as Beam documents them.
# --job_endpoint, --input (repeatable), --output, --id_salt_file, --environment_type and
# --environment_config may come from the environment instead: JOB_ENDPOINT, INPUT
# (space-separated patterns), OUTPUT, ID_SALT_FILE, ENVIRONMENT_TYPE, ENVIRONMENT_CONFIG.
# Every other flag goes to `dcm2tfrecord convert` unchanged (convert options and any Beam
# option, e.g. --sdk_worker_parallelism, --s3_endpoint_url, --hdfs_host).
#
# Paths are read by every worker: --input, --output and --labels on a filesystem mounted
# at the same path everywhere, or gs://, s3://, hdfs://. Relative local paths are made
# absolute here. The identifier salt comes from --id_salt_file: a regular file at the same
# path on this machine and on every worker (a mounted secret) or a storage object; the
# workers read it, so the salt never travels in the job. --id_salt and
# $DCM2TFRECORD_ID_SALT are refused.
# DCM2TFRECORD_PYTHON=/path/to/python uses that interpreter instead of ./.venv.
set -euo pipefail
me="run_portable.sh"

die() { echo "$me: error: $*" >&2; exit 2; }

# A local path as every worker sees it: absolute (this script runs from the repository root).
abs() { case "$1" in *://*|/*) printf '%s' "$1" ;; *) printf '%s/%s' "$PWD" "$1" ;; esac; }

job_endpoint="${JOB_ENDPOINT:-}"
output="${OUTPUT:-}"
salt_file="${ID_SALT_FILE:-}"
environment_type="${ENVIRONMENT_TYPE:-EXTERNAL}"
environment_config="${ENVIRONMENT_CONFIG:-}"
inputs=()
env_inputs=()
[ -n "${INPUT:-}" ] && read -r -a env_inputs <<< "$INPUT"
pass=()

# Each flag comes as "--flag=value" or as "--flag value".
while [ "$#" -gt 0 ]; do
  arg="$1"
  case "$arg" in
    --*=*) flag="${arg%%=*}"; value="${arg#*=}"; step=1 ;;
    *) flag="$arg"; value="${2-}"; step=2 ;;
  esac
  case "$flag" in
    --job_endpoint|--input|--output|--id_salt_file|--environment_type|--environment_config|\
    --labels|--summary_json)
      if [ "$step" -eq 2 ] && { [ "$#" -lt 2 ] || [[ "$value" == --* ]]; }; then
        die "$flag needs a value"
      fi
      case "$flag" in
        --job_endpoint) job_endpoint="$value" ;;
        --input) inputs+=("$(abs "$value")") ;;
        --output) output="$(abs "$value")" ;;
        --id_salt_file) salt_file="$(abs "$value")" ;;
        --environment_type) environment_type="$value" ;;
        --environment_config) environment_config="$value" ;;
        --labels|--summary_json) pass+=("$flag=$(abs "$value")") ;;
      esac
      shift "$step" ;;
    --runner) die "$me always uses --runner=PortableRunner; use run_local.sh for local runs, run_dataflow.sh for Dataflow" ;;
    --id_salt) die "--id_salt would travel inside the job; give --id_salt_file (a mounted secret or a storage object)" ;;
    *) pass+=("$arg"); shift ;;
  esac
done
[ "${#inputs[@]}" -eq 0 ] && for pattern in "${env_inputs[@]+"${env_inputs[@]}"}"; do inputs+=("$(abs "$pattern")"); done
[ -n "$output" ] && output="$(abs "$output")"
[ -n "$salt_file" ] && salt_file="$(abs "$salt_file")"

missing=0
[ -n "$job_endpoint" ] || { echo "$me: error: missing --job_endpoint (or env JOB_ENDPOINT): your Flink or Spark Beam job server, e.g. localhost:8099" >&2; missing=1; }
[ "${#inputs[@]}" -gt 0 ] || { echo "$me: error: missing --input (or env INPUT): the archive, at a path every worker reads (directory or glob)" >&2; missing=1; }
[ -n "$output" ] || { echo "$me: error: missing --output (or env OUTPUT): the dataset directory, at a path every worker writes" >&2; missing=1; }
[ -n "$salt_file" ] || { echo "$me: error: missing --id_salt_file (or env ID_SALT_FILE): the salt, a file every worker reads (a mounted secret) or a storage object" >&2; missing=1; }
[ "$missing" -eq 0 ] || exit 2
case "$environment_type" in
  EXTERNAL) environment_config="${environment_config:-localhost:50000}" ;;
  DOCKER|PROCESS|LOOPBACK) ;;
  *) die "--environment_type $environment_type: give EXTERNAL (a worker pool, the default), DOCKER, PROCESS or LOOPBACK" ;;
esac

cd "$(dirname "$0")"
source scripts/ensure_venv.sh
project_python

args=(convert)
for pattern in "${inputs[@]}"; do args+=(--input "$pattern"); done
args+=(--output "$output" --id_salt_file "$salt_file"
       --runner=PortableRunner --job_endpoint="$job_endpoint" --environment_type="$environment_type")
[ -n "$environment_config" ] && args+=(--environment_config="$environment_config")
args+=("${pass[@]+"${pass[@]}"}")

exec "$python" -m dcm2tfrecord.pipeline "${args[@]}"
