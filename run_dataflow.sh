#!/usr/bin/env bash
# Submits `dcm2tfrecord convert` to Google Cloud Dataflow (Runner v2).
#
#   ./run_dataflow.sh --project P --region R --input gs://bkt/archive --output gs://bkt/ds \
#       --temp_location gs://bkt/tmp --id_salt_file gs://secure/salt [--labels gs://bkt/labels.csv ...] [--dry_run]
#
# --project, --region, --input (repeatable), --output and --temp_location may
# come from the environment instead: PROJECT, REGION, INPUT (space-separated
# patterns), OUTPUT, TEMP_LOCATION. Worker settings (Beam's option names) default
# to --machine_type=n2-highmem-4 (8 GB per SDK process: room for the largest
# record), --max_num_workers=20 and --disk_size_gb=50, or to the environment's
# MACHINE_TYPE, MAX_NUM_WORKERS, DISK_SIZE_GB. Every other flag goes to
# `dcm2tfrecord convert` unchanged (convert options and any Beam option, e.g.
# --sdk_container_image, --service_account_email, --subnetwork, --job_name).
# The workers install this project from ./setup.py, and the format and the reader it
# requires (dcm2tfrecord-reader) from a wheel of ./reader_dist built here and staged with
# --extra_package (workers install extra packages before the sdist); their SDK container is
# the one Beam picks for the installed Beam version unless --sdk_container_image is given.
# Like run_local.sh it runs from the repository root: give local paths
# (--dataflow_job_file, --summary_json) absolute.
#
# --dry_run builds the real Dataflow job (Beam's --dry_run=True) and submits
# nothing; add --dataflow_job_file=job.json to write what it built.
# The identifier salt comes from --id_salt_file gs://BUCKET/OBJECT (an object only the
# workers' service account can read): the workers read it, so the salt never travels in
# the job's parameters or graph. --id_salt and $DCM2TFRECORD_ID_SALT are refused here.
# DCM2TFRECORD_PYTHON=/path/to/python uses that interpreter instead of ./.venv.
set -euo pipefail
cd "$(dirname "$0")"
me="run_dataflow.sh"

die() { echo "$me: error: $*" >&2; exit 2; }

project="${PROJECT:-}"
region="${REGION:-}"
output="${OUTPUT:-}"
temp_location="${TEMP_LOCATION:-}"
machine_type="${MACHINE_TYPE:-n2-highmem-4}"
max_num_workers="${MAX_NUM_WORKERS:-20}"
disk_size_gb="${DISK_SIZE_GB:-50}"
inputs=()
env_inputs=()
[ -n "${INPUT:-}" ] && read -r -a env_inputs <<< "$INPUT"
dry_run=""
setup_given=""
pass=()

# Each flag comes as "--flag=value" or as "--flag value".
while [ "$#" -gt 0 ]; do
  arg="$1"
  case "$arg" in
    --*=*) flag="${arg%%=*}"; value="${arg#*=}"; step=1 ;;
    *) flag="$arg"; value="${2-}"; step=2 ;;
  esac
  case "$flag" in
    --project|--region|--input|--output|--temp_location|--machine_type|--worker_machine_type|\
    --max_num_workers|--disk_size_gb)
      if [ "$step" -eq 2 ] && { [ "$#" -lt 2 ] || [[ "$value" == --* ]]; }; then
        die "$flag needs a value"
      fi
      case "$flag" in
        --project) project="$value" ;;
        --region) region="$value" ;;
        --input) inputs+=("$value") ;;
        --output) output="$value" ;;
        --temp_location) temp_location="$value" ;;
        --machine_type|--worker_machine_type) machine_type="$value" ;;
        --max_num_workers) max_num_workers="$value" ;;
        --disk_size_gb) disk_size_gb="$value" ;;
      esac
      shift "$step" ;;
    --dry_run)
      if [ "$step" -eq 1 ]; then
        case "${value,,}" in true|1|yes) dry_run=1 ;; false|0|no) dry_run="" ;;
          *) die "--dry_run=$value: give true or false" ;; esac
      else
        dry_run=1
      fi
      shift ;;
    *)
      case "$flag" in
        --setup_file) setup_given=1 ;;
        --runner) die "$me always uses --runner=DataflowRunner; use run_local.sh for local runs" ;;
      esac
      pass+=("$arg"); shift ;;
  esac
done
[ "${#inputs[@]}" -eq 0 ] && inputs=("${env_inputs[@]+"${env_inputs[@]}"}")

missing=0
[ -n "$project" ] || { echo "$me: error: missing --project (or env PROJECT): the Google Cloud project that runs the job" >&2; missing=1; }
[ -n "$region" ] || { echo "$me: error: missing --region (or env REGION): the Dataflow region, e.g. europe-west4" >&2; missing=1; }
[ "${#inputs[@]}" -gt 0 ] || { echo "$me: error: missing --input (or env INPUT): the gs:// archive (directory or glob)" >&2; missing=1; }
[ -n "$output" ] || { echo "$me: error: missing --output (or env OUTPUT): the gs:// dataset directory" >&2; missing=1; }
[ -n "$temp_location" ] || { echo "$me: error: missing --temp_location (or env TEMP_LOCATION): a gs:// scratch path for Dataflow" >&2; missing=1; }
[ "$missing" -eq 0 ] || exit 2
for pattern in "${inputs[@]}"; do
  [[ "$pattern" == gs://* ]] || die "--input $pattern: Dataflow workers read gs:// paths only"
done
[[ "$output" == gs://* ]] || die "--output $output: Dataflow workers write gs:// paths only"
[[ "$temp_location" == gs://* ]] || die "--temp_location $temp_location: must be a gs:// path"

source scripts/ensure_venv.sh
project_python

args=(convert)
for pattern in "${inputs[@]}"; do args+=(--input "$pattern"); done
args+=(--output "$output"
       --runner=DataflowRunner
       --project="$project" --region="$region" --temp_location="$temp_location"
       --machine_type="$machine_type" --max_num_workers="$max_num_workers"
       --disk_size_gb="$disk_size_gb"
       --experiments=use_runner_v2)
if [ -z "$setup_given" ]; then
  wheels="$(mktemp -d "${TMPDIR:-/tmp}/dcm2tfrecord-reader-wheel.XXXXXX")"
  "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    --wheel-dir "$wheels" ./reader_dist >&2 || die "could not build the wheel of ./reader_dist"
  args+=(--setup_file=./setup.py --extra_package="$(ls "$wheels"/dcm2tfrecord_reader-*.whl)")
fi
[ -n "$dry_run" ] && args+=(--dry_run=True)
args+=("${pass[@]+"${pass[@]}"}")

exec "$python" -m dcm2tfrecord.pipeline "${args[@]}"
