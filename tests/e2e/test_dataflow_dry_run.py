"""run_dataflow.sh: the real Dataflow job, built dry (Beam's --dry_run=True), never submitted.

The script runs against gcp-storage-emulator (inputs and labels must exist:
convert checks them before building), with a fake project and region and the
emulator fixture's offline credentials, so nothing reaches Google Cloud. The
job it builds (the portable pipeline Runner v2 executes, its worker
environment, the options) is inspected: the expected steps are there, the
worker SDK matches the installed Beam, the workers get this project's sdist,
and only metadata crosses a shuffle.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys

import apache_beam
import pytest
from google.protobuf import json_format

from tests.support import pydicom_test_files
from tests.support import TEST_SALT, write_png_archive
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)
from tests.support.runners import _byte_strings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "run_dataflow.sh")
# a customer-managed key for the job's state (Beam's --dataflow_kms_key): passed through
KMS_KEY = "projects/fake-project/locations/europe-west4/keyRings/ring/cryptoKeys/job-state"
REQUIRED = ("PROJECT", "REGION", "INPUT", "OUTPUT", "TEMP_LOCATION")

EXPECTED_STEPS = ("MatchInputs", "ProbeHeaders", "AttachLabels", "AssignSplits", "ReuseShards",
                  "PlanShards", "DistributeShards", "WriteShards", "CommitDataset")

# Every top-level step of ConvertArchive that holds a GroupByKey (a Reshuffle,
# CoGroupByKey, Combine*, Distinct and Count are GroupByKeys underneath) and what
# crosses that shuffle. All of it is metadata; a step that adds a shuffle must be
# added here with what it moves, and pixels are never an answer.
SHUFFLING_STEPS = {
    "MatchInputs": "SourceFile (uri, rel path, size, mtime) keyed by uri",
    "CountMatched": "counts",
    "DropDuplicates": "ProbedRecord (header metadata) keyed by SOP Instance UID (by uri without one)",
    "AttachLabels": "ProbedRecord and LabelRow keyed by the join key; label values",
    "BuildVolumes": "ProbedRecord (slice headers) keyed by series",
    "CountGroups": "(split, group key) pairs",
    "PlanShards": "(split, planned bytes), bucket sizes, ProbedRecord keyed by bucket/shard",
    "DistributeShards": "ShardPlan (the record list of one shard: uris and header metadata)",
    "ReuseShards": "ProbedRecord and base shard names keyed by record fingerprint; counts, bytes",
}


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in REQUIRED}
    env.update({"DCM2TFRECORD_PYTHON": sys.executable,
                "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2"})
    env.pop("DCM2TFRECORD_ID_SALT", None)
    env.update(extra)
    return env


def _script(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *args], env=env or _env(), capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def dry_run(gcs_emulator, tmp_path_factory):
    """(job description written by the dry run, emulator, the run's stderr)."""
    work = tmp_path_factory.mktemp("dataflow")
    archive = work / "archive"
    write_png_archive(archive / "png", 2, 16, 16)
    os.makedirs(archive / "dicom")
    shutil.copyfile(os.path.join(pydicom_test_files(), "CT_small.dcm"), archive / "dicom" / "CT_small.dcm")
    (work / "labels.csv").write_text("path,label\npng/img_0000.png,a\npng/img_0001.png,b\n"
                                     "dicom/CT_small.dcm,a\n")
    gcs_emulator.upload_tree(str(archive), "df/archive")
    labels = gcs_emulator.upload_file(str(work / "labels.csv"), "df/labels.csv")
    (work / "salt").write_text(TEST_SALT + "\n")
    salt_file = gcs_emulator.upload_file(str(work / "salt"), "secure/salt")
    job_file = work / "job.json"
    os.makedirs(work / "tmp")      # Beam's stager leaves its sdist build folder behind
    proc = _script("--project", "fake-project", "--region=europe-west4",
                   "--input", gcs_emulator.url("df/archive"), "--output", gcs_emulator.url("df/out"),
                   "--temp_location", gcs_emulator.url("df/tmp"), "--dry_run",
                   "--labels", labels, "--splits=train=0.8,validation=0.2", "--incremental",
                   "--max_num_workers=7", f"--dataflow_job_file={job_file}", "--id_salt_file", salt_file,
                   "--unit", "series", f"--dataflow_kms_key={KMS_KEY}",
                   env=_env(TMPDIR=str(work / "tmp")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(job_file) as handle:
        job = json.load(handle)
    return job, gcs_emulator, proc.stderr


def _pipeline(job):
    from apache_beam.portability.api import beam_runner_api_pb2
    return json_format.ParseDict(job["pipeline"], beam_runner_api_pb2.Pipeline())


def _step(name: str) -> str:
    parts = name.split("/")
    return parts[1] if len(parts) > 1 and parts[0] == "ConvertArchive" else parts[0]


def test_missing_settings_are_one_line_errors_each():
    proc = _script(env=_env())
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert [line.split(":", 2)[2].split()[1] for line in lines] == \
        ["--project", "--region", "--input", "--output", "--temp_location"], proc.stderr
    assert all(line.startswith("run_dataflow.sh: error: missing --") for line in lines)
    for name in REQUIRED:
        assert f"env {name})" in proc.stderr
    proc = _script("--project", env=_env())
    assert proc.returncode == 2 and proc.stderr.strip() == "run_dataflow.sh: error: --project needs a value"


def test_settings_come_from_the_environment_too():
    """Env settings reach the checks (only the local --output is refused here, before any Python)."""
    env = _env(PROJECT="p", REGION="r", INPUT="gs://b/a gs://b/c", OUTPUT="/local/out",
               TEMP_LOCATION="gs://b/tmp")
    proc = _script(env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == \
        "run_dataflow.sh: error: --output /local/out: Dataflow workers write gs:// paths only"


def test_dry_run_submits_nothing_and_touches_no_output(dry_run):
    job, emulator, stderr = dry_run
    assert "dry_run: Dataflow job" in stderr and "not run here" in stderr
    assert job["type"] == "JOB_TYPE_BATCH" and job["name"].startswith("beamapp-")
    assert emulator.list("df/out") == [] and emulator.list("df/tmp") == []


def test_the_salt_is_nowhere_in_the_job_and_its_parameters(dry_run):
    """--id_salt_file: the workers read the salt; the job graph (pickled DoFns included),
    its options and the launcher's output hold only the file's name."""
    job, emulator, stderr = dry_run
    blobs = list(_byte_strings(job))
    pickled = [blob for blob in blobs if b"ProbeHeadersFn" in blob or b"WriteShardFn" in blob]
    assert pickled, "no pickled DoFn found: the search would see nothing"
    assert any(b"secure/salt" in blob for blob in pickled)      # the file name does travel
    salt = TEST_SALT.encode()
    for form in (salt, TEST_SALT.encode("utf-16-le"), base64.b64encode(salt)):
        assert not any(form in blob for blob in blobs), form
    assert TEST_SALT not in stderr


def test_id_salt_is_refused_on_dataflow(tmp_path):
    proc = _script("--project", "p", "--region", "r", "--input", "gs://b/a", "--output", "gs://b/o",
                   "--temp_location", "gs://b/t", "--dry_run", env=_env(DCM2TFRECORD_ID_SALT=TEST_SALT))
    assert proc.returncode == 2 and "--id_salt_file" in proc.stderr, proc.stderr[-2000:]
    assert TEST_SALT not in proc.stderr


def test_worker_settings_and_defaults(dry_run):
    options = dry_run[0]["options"]
    assert options["runner"] == "DataflowRunner"
    assert options["project"] == "fake-project" and options["region"] == "europe-west4"
    assert options["setup_file"] == "./setup.py"
    assert "use_runner_v2" in options["experiments"]
    assert options["machine_type"] == "n2-highmem-4" and options["disk_size_gb"] == 50
    assert options["max_num_workers"] == 7      # a flag overrides the default
    assert "id_salt" not in options             # convert's own options are not Beam options


def test_customer_managed_key_reaches_the_job(dry_run):
    """--dataflow_kms_key: the job's state (shuffle, Persistent Disks, temp files Dataflow
    writes) is encrypted with the user's Cloud KMS key: the option reaches the job the runner
    builds (environment.serviceKmsKeyName), not only the option list."""
    job = dry_run[0]
    assert job["options"]["dataflow_kms_key"] == KMS_KEY
    assert job["environment"]["serviceKmsKeyName"] == KMS_KEY, job["environment"]


def test_worker_sdk_matches_installed_beam_and_gets_the_sdist(dry_run):
    from apache_beam.portability.api import beam_runner_api_pb2
    pipeline = _pipeline(dry_run[0])
    envs = list(pipeline.components.environments.values())
    assert envs
    wanted = f"beam_python{sys.version_info.major}.{sys.version_info.minor}_sdk:{apache_beam.__version__}"
    for env in envs:
        assert env.urn == "beam:env:docker:v1"
        image = beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
        assert image.endswith(wanted), image
        staged = {beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(d.role_payload).staged_name
                  for d in env.dependencies if d.role_urn == "beam:artifact:role:staging_to:v1"}
        assert "workflow.tar.gz" in staged, staged     # the sdist of ./setup.py
        # and the format and the reader it requires, from reader_dist/ (never in the sdist)
        assert any(n.startswith("dcm2tfrecord_reader-") and n.endswith(".whl") for n in staged), staged


def test_job_graph_has_the_expected_steps(dry_run):
    pipeline = _pipeline(dry_run[0])
    steps = {_step(t.unique_name) for t in pipeline.components.transforms.values()}
    missing = [s for s in EXPECTED_STEPS if s not in steps]
    assert not missing, sorted(steps)


def test_only_metadata_crosses_a_shuffle(dry_run):
    pipeline = _pipeline(dry_run[0])
    transforms = pipeline.components.transforms
    leaves = {tid: t for tid, t in transforms.items() if not t.subtransforms}
    producer = {pc: tid for tid, t in leaves.items() for pc in t.outputs.values()}
    consumers: dict = {}
    for tid, t in leaves.items():
        for pc in t.inputs.values():
            consumers.setdefault(pc, []).append(tid)
    shuffles = {tid: t for tid, t in leaves.items()
                if t.spec.urn in ("beam:transform:group_by_key:v1", "beam:transform:reshuffle:v1")}
    assert shuffles

    # 1. each shuffle sits in a step known to move metadata only
    unknown = sorted({t.unique_name for t in shuffles.values()
                      if _step(t.unique_name) not in SHUFFLING_STEPS})
    assert not unknown, f"new shuffles; add their steps to SHUFFLING_STEPS with what they move: {unknown}"

    # 2. nothing downstream of WriteShards (the one step that reads and decodes pixels)
    #    is shuffled: its outputs are ShardResult and Outcome, taken as side inputs by the commit
    writer = [tid for tid, t in leaves.items() if _step(t.unique_name) == "WriteShards"]
    assert writer
    seen, frontier = set(), list(writer)
    while frontier:
        tid = frontier.pop()
        for pc in leaves[tid].outputs.values():
            for nxt in consumers.get(pc, []):
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
    assert any(_step(leaves[t].unique_name) == "CommitDataset" for t in seen)
    after_write = sorted(leaves[t].unique_name for t in seen if t in shuffles)
    assert not after_write, after_write
    assert {_step(leaves[t].unique_name) for t in seen} <= {"ShardResults", "WriteOutcomes",
                                                            "CollectOutcomes", "CommitDataset",
                                                            "WrittenAndReused"}, \
        sorted({leaves[t].unique_name for t in seen})

    # 3. the shuffle that spreads the writing gets ShardPlans straight from the planner
    #    (header metadata), and the writer reads from it
    distribute = [t for t in shuffles.values() if _step(t.unique_name) == "DistributeShards"]
    assert len(distribute) == 1
    feeding = {leaves[producer[pc]].unique_name for pc in distribute[0].inputs.values()}
    composite = transforms[next(tid for tid, t in transforms.items()
                                if t.unique_name == "ConvertArchive/DistributeShards")]
    outer_feeding = {leaves[producer[pc]].unique_name for pc in composite.inputs.values()}
    assert outer_feeding == {"ConvertArchive/PlanShards/OrderShardRecords"}, outer_feeding
    assert all(_step(name) == "DistributeShards" for name in feeding), feeding
    from apache_beam.portability.api import beam_runner_api_pb2
    main_inputs = set()
    for tid in writer:
        side = beam_runner_api_pb2.ParDoPayload.FromString(leaves[tid].spec.payload).side_inputs
        main_inputs |= {leaves[producer[pc]].unique_name for tag, pc in leaves[tid].inputs.items()
                        if tag not in side}
    assert main_inputs and all(_step(name) == "DistributeShards" for name in main_inputs), main_inputs


def test_script_is_executable_bash():
    assert os.access(SCRIPT, os.X_OK)
    with open(SCRIPT) as handle:
        assert handle.readline().strip() == "#!/usr/bin/env bash"
    assert subprocess.run(["bash", "-n", SCRIPT]).returncode == 0


# ---------------------------------------------------------------- Flex Template

# A value for each parameter whose option has neither choices nor a default.
SAMPLES = {"incremental": "True", "input": "gs://bucket/archive", "output": "gs://bucket/datasets/ct/2024-06-01",
           "id_salt_file": "gs://secure/salt", "labels": "gs://bucket/labels.csv", "class_map": "gs://bucket/classes.yaml",
           "split_column": "split", "window": "lung", "resize": "512x512", "spacing": "0.8,0.8,2.5",
           "max_failures": "3",
           "keep_tags": "BodyPartExamined,ViewPosition", "summary_json": "gs://bucket/summary.json",
           "mask_pattern": r"imagesTr/(.*)_0000\.nii\.gz=labelsTr/\1.nii.gz", "mask_column": "mask",
           "encrypt": "gcp-kms://projects/p/locations/europe-west4/keyRings/r/cryptoKeys/k"}


def _metadata() -> dict:
    with open(os.path.join(ROOT, "metadata.json")) as handle:
        return json.load(handle)


def _convert_parser():
    import argparse
    from dcm2tfrecord.pipeline.options.arguments import add_convert_arguments
    parser = argparse.ArgumentParser(prog="dcm2tfrecord convert", allow_abbrev=False)
    add_convert_arguments(parser)
    return parser


def test_flex_template_parameters_are_convert_options():
    """Every metadata.json parameter is a convert option taking one value, so the Flex
    Template launcher's --name=value form parses; regexes accept the option's own values."""
    import re
    meta = _metadata()
    params = meta["parameters"]
    names = [p["name"] for p in params]
    assert len(names) == len(set(names)), names
    parser = _convert_parser()
    actions = {a.option_strings[0][2:]: a for a in parser._actions if a.option_strings}
    argv = []
    for param in params:
        name = param["name"]
        action = actions.get(name)
        assert action is not None and f"--{name}" in action.option_strings, \
            f"metadata.json parameter {name!r} is not a convert option"
        assert action.nargs in (None, "?", "+") and (action.const is None or action.type is not None), \
            f"--{name} takes no single value: the launcher passes --{name}=VALUE"
        assert set(param) <= {"name", "label", "helpText", "isOptional", "regexes", "paramType"}, param
        assert param["label"] and param["helpText"]
        if action.required:
            assert param["isOptional"] is False, name
        regexes = [re.compile(r) for r in param.get("regexes", [])]
        values = [str(c) for c in action.choices] if action.choices else []
        if action.default not in (None, (), []):
            values.append(str(action.default))
        values.append(SAMPLES.get(name, values[0] if values else ""))
        for value in values:
            assert all(r.fullmatch(value) for r in regexes), f"{name}: regexes refuse {value!r}"
        argv.append(f"--{name}={values[-1]}")
    known, rest = parser.parse_known_args(argv)
    assert rest == []
    for param, arg in zip(params, argv):
        parsed = getattr(known, actions[param["name"]].dest)
        parsed = parsed[0] if isinstance(parsed, list) else parsed
        assert str(parsed) == arg.split("=", 1)[1], param["name"]
    required = {flag for flag, a in actions.items() if a.required}
    assert required <= {p["name"] for p in params if not p["isOptional"]}


def test_flex_template_metadata_is_generated_from_the_option_table_and_lists_every_option():
    from dcm2tfrecord.pipeline.options.table import OPTIONS
    from dcm2tfrecord.pipeline.options.template_metadata import template_metadata
    assert _metadata() == template_metadata(), \
        "metadata.json is stale: python -m dcm2tfrecord.pipeline.options.template_metadata --metadata > metadata.json"
    parser = _convert_parser()
    flags = {s[2:] for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"help"}
    assert flags == {o.flag for o in OPTIONS}
    left_out = {o.flag for o in OPTIONS if o.template is None}
    assert all(o.not_in_template for o in OPTIONS if o.template is None)   # each says why
    assert {p["name"] for p in _metadata()["parameters"]} == flags - left_out
    assert left_out == {"id_salt"}          # visible to whoever can view the job


def test_dockerfile_uses_the_installed_beam_sdk_image_and_ships_the_packages():
    import re
    with open(os.path.join(ROOT, "Dockerfile")) as handle:
        dockerfile = handle.read()
    froms = re.findall(r"^FROM\s+(\S+)", dockerfile, flags=re.M)
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert froms[-1] == f"apache/beam_python{py}_sdk:{apache_beam.__version__}", froms
    from tests.support import PACKAGE_FOLDERS
    for folder in [*PACKAGE_FOLDERS.values(), "reader_dist"]:     # both distributions' folders
        assert re.search(rf"^COPY\s+{folder}\s", dockerfile, flags=re.M), f"{folder} not copied"
    assert re.search(r'^RUN pip install .*reader_dist.* "\$\{WORKDIR\}"$', dockerfile, flags=re.M)
    assert re.search(r'^ENV FLEX_TEMPLATE_PYTHON_PY_FILE="\$\{WORKDIR\}/main.py"', dockerfile, flags=re.M)


def test_flex_template_main_file_runs_convert(tmp_path):
    """The launcher's main.py (written by the Dockerfile) hands its flags to convert."""
    import re
    with open(os.path.join(ROOT, "Dockerfile")) as handle:
        dockerfile = handle.read()
    block = re.search(r"RUN printf '%s\\n' (.*?) > \$\{WORKDIR\}/main.py", dockerfile, flags=re.S).group(1)
    lines = re.findall(r"'([^']*)'", block)
    main = tmp_path / "main.py"
    main.write_text("\n".join(lines) + "\n")
    env = _env()
    proc = subprocess.run([sys.executable, str(main), "--input=gs://b/a"], capture_output=True,
                          text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "dcm2tfrecord convert: error: --output is required" in proc.stderr
