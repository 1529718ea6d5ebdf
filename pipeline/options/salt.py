"""The identifier salt: where it comes from (--id_salt, --id_salt_file, $DCM2TFRECORD_ID_SALT,
or a random one), and on which runners it may travel in the job."""
from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING, Optional, Sequence

from dcm2tfrecord.pipeline.launch.beam_args import IN_PROCESS_RUNNERS, is_dataflow, runner_name
from dcm2tfrecord.pipeline.options.locations import absolute
from dcm2tfrecord.pipeline.options.usage import UsageError
from dcm2tfrecord.transforms.settings import SaltFileError, read_salt_file, remember_salt

if TYPE_CHECKING:
    from dcm2tfrecord.pipeline.options.table import ConvertOptions

SALT_ENV = "DCM2TFRECORD_ID_SALT"
RANDOM_SALT = secrets.token_hex(16)


def resolve_salt(id_salt: Optional[str], id_salt_file: Optional[str], allow_random_salt: bool) -> str:
    """--id_salt, else the content of --id_salt_file, else $DCM2TFRECORD_ID_SALT, else (with
    --allow_random_salt) a fresh one."""
    salt = id_salt
    if not salt and id_salt_file:
        salt = salt_file_content(absolute(id_salt_file))
    salt = salt or os.environ.get(SALT_ENV, "")
    if not salt and allow_random_salt:
        salt = RANDOM_SALT
    return salt


_SALT_FILES: dict = {}


def salt_file_content(uri: str) -> str:
    """Read once per launcher process (validation asks for the salt several times): the one
    value of the run, for dataset.json's locations and the record ids alike (the workers that
    share this process's memory use it, others check theirs against it: settings.with_salt)."""
    if uri not in _SALT_FILES:
        try:
            _SALT_FILES[uri] = read_salt_file(uri)
            remember_salt(uri, _SALT_FILES[uri])
        except SaltFileError as exc:    # not a regular file, missing, empty, too large: one line
            raise UsageError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - storage errors: one line
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UsageError(f"--id_salt_file {uri}: cannot read the salt ({reason})") from None
    return _SALT_FILES[uri]


def check_salt_stays_out_of_the_job(opts: "ConvertOptions", beam_args: Sequence[str]) -> None:
    """Outside this process everything in the job graph and its parameters is visible to whoever
    can view the job: there the salt must come from --id_salt_file, read by the workers. On
    Dataflow that is a storage object; on other runners (Flink, Spark, Prism, the portable
    runner) also a path each worker reads, such as a mounted secret."""
    runner = runner_name(beam_args)
    if (runner or None) in IN_PROCESS_RUNNERS:
        return
    dataflow = is_dataflow(runner)
    if not opts.id_salt_file or opts.id_salt:
        where = ("gs://BUCKET/OBJECT (workers read it" if dataflow else
                 "PATH (a regular file at that path on this machine and on every worker, e.g. a "
                 "mounted secret, or a storage object: workers read it")
        raise UsageError(f"on {'Dataflow' if dataflow else runner} give the salt as --id_salt_file "
                         f"{where}; --id_salt, ${SALT_ENV} or --allow_random_salt would travel inside "
                         "the job for anyone who can view it)")
    if dataflow and "://" not in opts.id_salt_file:
        raise UsageError(f"--id_salt_file {opts.id_salt_file}: Dataflow workers cannot read a local "
                         "file; give a gs:// object (readable by the workers' service account)")
