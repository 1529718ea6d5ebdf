"""The ``convert`` command line: the argparse parser built from the option table, and argv
parsed into ConvertOptions and the Beam arguments, then checked before any work."""
from __future__ import annotations

import argparse
from typing import Any, Callable, Sequence

from dcm2tfrecord.pipeline.launch.beam_args import check_runner, unknown_beam_args
from dcm2tfrecord.pipeline.options.input_checks import check_inputs_exist, check_output_outside_inputs
from dcm2tfrecord.pipeline.options.rules import check_options
from dcm2tfrecord.pipeline.options.table import OPTIONS, ConvertOptions, Option
from dcm2tfrecord.pipeline.options.usage import UsageError


def parse_flag(text: str) -> bool:
    """A switch that also takes a value (--incremental=true), as Flex Template launchers pass it."""
    value = str(text).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


CONVERT_DESCRIPTION = "Convert DICOM/image archives into size-bounded TFRecord shards plus dataset.json."
CONVERT_EPILOG = """examples:
  dcm2tfrecord convert --input /archive/ct --output /data/ct --id_salt_file ~/.secrets/salt
  dcm2tfrecord convert --input /archive/cxr --output /data/cxr512 --dicom_values window \\
      --resize 512x512 --resize_mode pad --labels labels.csv --label_key patient_id \\
      --splits train=0.8,validation=0.1,test=0.1

Beam options pass through, e.g. --direct_num_workers=4 (local worker processes; default:
one per core, or one process for local inputs of at most 256 files and 256 MiB),
--direct_running_mode=in_memory, --runner=DataflowRunner (see
run_dataflow.sh), --runner=PortableRunner --job_endpoint=HOST:8099 for Flink or Spark (see
run_portable.sh). An option that neither convert nor Beam knows is refused."""


def _unknown_message(flag: str) -> str:
    import difflib
    name = flag.split("=", 1)[0]
    close = difflib.get_close_matches(name.lstrip("-"), [o.flag for o in OPTIONS], n=1, cutoff=0.6)
    hint = f" (did you mean --{close[0]}?)" if close else ""
    return (f"unknown option {name}{hint}: neither a convert option nor a Beam pipeline option; "
            "see 'dcm2tfrecord convert --help'")


class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default from the parser, never restated in its help text;
    an option without one (None, no list items) says in its help what its absence means."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default == () or action.required:
            return action.help or ""
        return super()._get_help_string(action) or ""


def _argparse_type(option: Option) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return option.from_text(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def add_convert_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    groups: dict[str, Any] = {}
    for option in OPTIONS:
        group = groups.get(option.group) or groups.setdefault(
            option.group, parser.add_argument_group(option.group))
        kwargs: dict[str, Any] = {"help": option.help, "dest": option.name}
        if option.kind == "switch":
            kwargs.update(nargs="?", const=True, default=option.default_value, type=parse_flag,
                          metavar="true|false")
        elif option.kind == "list":
            if option.flag == "input":
                kwargs.update(action="append")
            else:
                kwargs.update(nargs="+", default=option.default_value)
        else:
            kwargs["default"] = option.default_value
            if option.choices:
                # the enum (pipeline.options.choices) refuses any other value; argparse's own check
                # of what it returns then always passes (choices listed for help and tools)
                kwargs.update(type=_argparse_type(option), choices=option.choice_values)
            elif option.value_type in (int, float):
                kwargs["type"] = option.value_type
        if option.required:
            kwargs["required"] = required
            kwargs.pop("default", None)
        if option.metavar:
            kwargs["metavar"] = option.metavar
        group.add_argument(f"--{option.flag}", **kwargs)


def parse_convert(argv: Sequence[str]) -> tuple[ConvertOptions, list[str]]:
    """(our options, checked, and the remaining Beam pipeline options)."""
    opts, beam_args = read_convert(argv)
    check_convert(opts, beam_args)
    return opts, beam_args


def read_convert(argv: Sequence[str]) -> tuple[ConvertOptions, list[str]]:
    """(our options, parsed but not yet checked (:func:`check_convert`), and the remaining Beam
    pipeline options): UsageError for an unknown flag or a missing option."""
    parser = argparse.ArgumentParser(prog="dcm2tfrecord convert", allow_abbrev=False,
                                     description=CONVERT_DESCRIPTION, epilog=CONVERT_EPILOG,
                                     formatter_class=DefaultsHelpFormatter)
    add_convert_arguments(parser, required=False)     # a missing one is said below, after typos
    known, beam_args = parser.parse_known_args(list(argv))
    check_runner(beam_args)
    unknown = unknown_beam_args(beam_args)
    if unknown:
        raise UsageError(_unknown_message(unknown[0]))
    missing = [f"--{o.flag}" for o in OPTIONS if o.required and not getattr(known, o.name)]
    if missing:
        raise UsageError(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required "
                         "(see 'dcm2tfrecord convert --help')")
    values = {o.name: getattr(known, o.name) for o in OPTIONS}
    values["inputs"] = tuple(known.inputs)
    # --keep_tags A B, or A,B as one value (the Flex Template's form)
    values["keep_tags"] = tuple(t for item in known.keep_tags or () for t in item.split(",") if t)
    values["output"] = known.output.rstrip("/") or "/"
    return ConvertOptions(**values), beam_args


def check_convert(opts: ConvertOptions, beam_args: Sequence[str]) -> None:
    """The checks before any work of options :func:`read_convert` parsed (UsageError)."""
    check_options(opts, beam_args)      # once: main goes on with convert.run_checked
    check_inputs_exist(opts.inputs)
    assert opts.output is not None      # read_convert requires it
    check_output_outside_inputs(opts.output, opts.inputs)
