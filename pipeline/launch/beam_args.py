"""The Beam arguments ``convert`` passes through: which runner they name, runners refused,
and arguments that neither convert nor any Beam options class knows."""
from __future__ import annotations

from typing import Sequence

from dcm2tfrecord.pipeline.options.usage import UsageError

LOCAL_RUNNERS = (None, "DirectRunner", "direct", "FnApiRunner")
# Runners that run the job inside this process: the graph never leaves it, so the salt
# may be given directly (--id_salt, $DCM2TFRECORD_ID_SALT).
IN_PROCESS_RUNNERS = LOCAL_RUNNERS + ("BundleBasedDirectRunner",)


def runner_name(beam_args: Sequence[str]) -> str:
    """The --runner given ("" for none: the local runner)."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    runner = PipelineOptions(list(beam_args)).view_as(StandardOptions).runner
    return "" if runner is None else runner if isinstance(runner, str) else type(runner).__name__


def is_dataflow(runner: str) -> bool:
    return "dataflow" in runner.lower()


DASK_REFUSAL = ("--runner=DaskRunner is not supported: Beam's DaskRunner keeps one collection per "
                "step, not per output (tagged outputs mix), recomputes side inputs (each file was "
                "probed 13-15 times), computes only the last step and has no data parallelism "
                "(Reshuffle does nothing there); run on your own cluster through Flink or Spark "
                "instead (docs/OPERATIONS.md, 'On your own cluster')")


def check_runner(beam_args: Sequence[str]) -> None:
    """Runners this job cannot run on are refused in one line, before anything is built."""
    if runner_name(beam_args).lower().rsplit(".", 1)[-1] in ("daskrunner", "dask"):
        raise UsageError(DASK_REFUSAL)



# Modules that define Beam pipeline options outside apache_beam.options.pipeline_options,
# imported only so that their options are known; each may need an optional dependency
# (the Dask runner needs dask), and one that cannot be imported is skipped.
RUNNER_OPTION_MODULES = ("apache_beam.runners.dask.dask_runner", "apache_beam.runners.render",
                         "apache_beam.yaml.options")


def _import_runner_options() -> None:
    import importlib
    for module in RUNNER_OPTION_MODULES:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - ImportError, or whatever a half-installed extra raises
            continue


def _bad_beam_value(message: str):
    raise UsageError(f"Beam pipeline option {message}")


def unknown_beam_args(beam_args: Sequence[str]) -> list[str]:
    """Arguments that neither convert nor any Beam PipelineOptions class knows.

    Beam only warns about these and drops them; a typo like --max_shard_mbb
    would then silently run with the default, so we refuse instead. The parser
    is the one Beam builds from every options class (handed out by its public
    ``add_extra_args_fn`` hook).
    """
    from apache_beam.options.pipeline_options import PipelineOptions
    _import_runner_options()
    parsers: list = []

    def keep(parser):
        parser.error = _bad_beam_value      # one line, not argparse's usage of every Beam option
        parsers.append(parser)

    PipelineOptions(list(beam_args)).get_all_options(add_extra_args_fn=keep)
    _, unknown = parsers[0].parse_known_args(list(beam_args))
    return [a for a in unknown if a.startswith("-")] or unknown
