"""A Dataflow job built but not run here: ``--dry_run`` (built, submitted nowhere) and
``--template_location`` (written there to run later, as a Flex Template launcher submits),
told apart before the run and reported after it, with no dataset.json to read."""
from __future__ import annotations

import sys

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from dcm2tfrecord.pipeline.options.usage import UsageError


def job_not_run_here(options: PipelineOptions) -> str:
    """"dry_run": Beam's --dry_run (DataflowRunner builds the job, submits nothing);
    "template": --template_location (the job is written there to run later; a Flex
    Template launcher submits this way); "": the job runs now and we wait for it."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, TestOptions
    how = ("dry_run" if options.view_as(TestOptions).dry_run
           else "template" if options.view_as(GoogleCloudOptions).template_location else "")
    runner = str(options.view_as(StandardOptions).runner or "")
    if how and "dataflow" not in runner.lower():   # local runners ignore both and would run
        raise UsageError(f"--{'dry_run' if how == 'dry_run' else 'template_location'} needs "
                         "--runner=DataflowRunner (see run_dataflow.sh)")
    return how


def _job_environment(job, options: PipelineOptions) -> dict:
    """The job's environment as Dataflow would receive it (camelCase names): a dry run stages
    nothing, so Beam never fills the job's own; it is built here the way Beam builds it on
    submission, without packages (the staged files are listed in the pipeline's environments)."""
    import json
    from apache_beam.runners.dataflow.internal import apiclient
    version = getattr(apiclient, "_FNAPI_ENVIRONMENT_MAJOR_VERSION", "")
    proto = apiclient.Environment(packages=[], options=options, environment_version=version,
                                  proto_pipeline_staged_url="", proto_pipeline=job.proto_pipeline).proto
    return json.loads(type(proto).to_json(proto))


def report_job_not_run(result, options: PipelineOptions, how: str, quiet: bool) -> dict:
    """No dataset.json to read yet. A dry run writes the job it built to --dataflow_job_file
    (Beam itself writes that file only on submission): the portable pipeline Runner v2
    executes, with its worker environment, the pipeline options, and the job's environment
    (``environment``: the service account, ``serviceKmsKeyName`` from --dataflow_kms_key)."""
    import json
    from apache_beam.options.pipeline_options import DebugOptions, GoogleCloudOptions
    from google.protobuf import json_format
    job = getattr(result, "job", None)     # the dry run's apiclient.Job
    summary = {"submitted": False, "mode": how,
               "job_name": job.proto.name if job else options.view_as(GoogleCloudOptions).job_name}
    job_file = options.view_as(DebugOptions).dataflow_job_file
    if how == "dry_run" and job is not None and job_file:
        description = {"name": job.proto.name, "type": job.proto.type_.name,
                       "pipeline": json_format.MessageToDict(job.proto_pipeline),
                       "options": options.get_all_options(drop_default=True),
                       "environment": _job_environment(job, options)}
        with FileSystems.create(job_file, mime_type="application/json") as handle:
            handle.write(json.dumps(description, indent=1, sort_keys=True, default=str).encode())
        summary["job_file"] = job_file
    if not quiet:
        where = f"; job written to {job_file}" if summary.get("job_file") else ""
        print(f"dcm2tfrecord convert: {how}: Dataflow job {summary['job_name']} built, "
              f"not run here{where}", file=sys.stderr)
    return summary
