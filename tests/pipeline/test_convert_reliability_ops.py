"""Reliability III (issue 25), items 2, 6, 7 and 8's reader parts: the output lock and links in
the output, label rows that label nothing, a storage outage while shards are written, and
RandomAccess / split specs / start_step / dataset.json damage reported in one clear line."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.files import OutputLinkError, create_output
from dcm2tfrecord.dataset.lock import LockUnavailable, OutputBusy, OutputLock
from dcm2tfrecord.pipeline.options.usage import UsageError
from tests.support import IN_MEMORY, TEST_SALT, run_convert, write_png_archive
from tests.support.processes import assert_failed_cleanly, cli, errors_of, outage_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = dict(target_shard_mb=1, min_shard_mb=0.5, max_shard_mb=8)
LOCK_FIELDS = {"token", "host", "pid", "started", "heartbeat"}


# ---------------------------------------------------------------- 2. the lock and links in the output


def _victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "victim_dir").mkdir(exist_ok=True)
    return victim


def _hostile_lock(kind: str, out, tmp_path) -> None:
    """Makes OUT/.lock something no run of ours makes."""
    lock = out / names.LOCK_NAME
    if kind == "link_to_file":
        os.symlink(_victim(tmp_path), lock)
    elif kind == "link_to_dir":
        _victim(tmp_path)
        os.symlink(tmp_path / "victim_dir", lock)
    elif kind == "dangling_link":
        os.symlink(tmp_path / "nowhere" / "x", lock)
    elif kind == "directory":
        lock.mkdir()
        (lock / "inside").write_text("x")
    elif kind == "fifo":
        os.mkfifo(lock)
    elif kind == "hard_link":                     # ln in/ct0001.dcm out/.lock: the same file
        os.link(_victim(tmp_path), lock)


LOCK_KINDS = ["link_to_file", "link_to_dir", "dangling_link", "directory", "fifo", "hard_link"]


@pytest.mark.parametrize("kind", LOCK_KINDS)
def test_a_lock_that_cannot_be_taken_is_refused_and_nothing_is_written_through_it(tmp_path, kind):
    out = tmp_path / "out"
    out.mkdir()
    _hostile_lock(kind, out, tmp_path)
    before = {p: open(p, "rb").read() for p in [tmp_path / "victim.txt"] if os.path.exists(p)}
    with pytest.raises(LockUnavailable, match=r"\.lock .*remove it"):
        OutputLock(str(out)).__enter__()
    assert {p: open(p, "rb").read() for p in before} == before
    if os.path.isdir(tmp_path / "victim_dir"):
        assert os.listdir(tmp_path / "victim_dir") == []
    assert not os.path.exists(tmp_path / "nowhere")


@pytest.mark.parametrize("name", [names.LOCK_NAME, names.INCOMPLETE_DIR, names.PROGRESS_DIR,
                                  names.MANIFEST_NAME, names.ERRORS_NAME, "lock directory"])
def test_convert_refuses_links_in_its_output_in_one_line_with_exit_2(tmp_path, name):
    write_png_archive(tmp_path / "in", 2, 8, 8)
    out = tmp_path / "out"
    out.mkdir()
    victim = _victim(tmp_path)
    if name == "lock directory":
        (out / names.LOCK_NAME).mkdir()
    else:
        target = victim if "." in name.lstrip(".") or name == names.LOCK_NAME else tmp_path / "victim_dir"
        os.symlink(target, out / name)
    code, _, stderr = cli("convert", "--input", str(tmp_path / "in"), "--output", str(out),
                          "--id_salt", TEST_SALT, "--progress", "none", *IN_MEMORY)
    assert code == 2, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert ("symbolic link" if name != "lock directory" else "is a directory") in stderr, stderr
    assert victim.read_text() == "precious\n" and os.listdir(tmp_path / "victim_dir") == []
    assert name == names.MANIFEST_NAME or not os.path.exists(out / names.MANIFEST_NAME)


def test_files_of_the_output_are_never_opened_through_a_link(tmp_path):
    """The one place output files are opened: a link anywhere between the output and the file
    (a folder link, a file link, dangling or not) is refused and nothing outside changes."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    victim = _victim(tmp_path)
    os.symlink(tmp_path / "victim_dir", out / "dirlink")
    os.symlink(victim, out / "sub" / "filelink")
    os.symlink(tmp_path / "gone", out / "dangling")
    for path in (out / "dirlink" / "f", out / "dirlink" / "deeper" / "f", out / "sub" / "filelink",
                 out / "dangling", out / "dangling" / "f"):
        with pytest.raises(OutputLinkError):
            create_output(str(out), str(path)).close()
    assert victim.read_text() == "precious\n" and os.listdir(tmp_path / "victim_dir") == []
    assert not os.path.exists(tmp_path / "gone")
    with create_output(str(out), str(out / "new" / "deeper" / "f")) as handle:   # real folders made
        handle.write(b"ok")
    assert (out / "new" / "deeper" / "f").read_bytes() == b"ok"


def test_a_dead_runs_lock_is_replaced_never_written(tmp_path):
    """A lock left by a dead run (its flock free) is replaced by a new file renamed over it:
    the old file's bytes stay as they were, whatever else may still hold it open."""
    out = tmp_path / "out"
    out.mkdir()
    (out / names.LOCK_NAME).write_text('{"token": "dead run"}')
    with open(out / names.LOCK_NAME, "rb") as old:
        inode = os.fstat(old.fileno()).st_ino
        with OutputLock(str(out)) as lock:
            assert os.lstat(out / names.LOCK_NAME).st_ino != inode
            assert json.loads((out / names.LOCK_NAME).read_text())["token"] == lock.token
            old.seek(0)
            assert old.read() == b'{"token": "dead run"}'
            assert sorted(os.listdir(out)) == [names.LOCK_NAME]          # no temporary left
        assert not os.path.exists(out / names.LOCK_NAME)


_HOLDER = ("import sys, time; sys.path.insert(0, %r)\n"
           "from dcm2tfrecord.dataset.lock import OutputLock\n"
           "lock = OutputLock(sys.argv[1]).__enter__(); print('held', flush=True); time.sleep(60)\n")


def test_the_lock_holds_no_path_and_a_killed_holders_lock_is_taken_over_and_removed(tmp_path):
    patient_dir = tmp_path / "Smith_Jane_12345"
    out = patient_dir / "out"
    argv = [sys.executable, "-c", _HOLDER % ROOT, str(out), "--input", str(patient_dir / "scans"),
            "--labels", str(patient_dir / "labels.csv")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        text = (out / names.LOCK_NAME).read_text()
        holder = json.loads(text)
        assert set(holder) <= LOCK_FIELDS and {"host", "pid", "started", "token"} <= set(holder)
        assert holder["pid"] == proc.pid
        assert "Smith" not in text and str(tmp_path) not in text and "--" not in text
        with pytest.raises(OutputBusy, match=r"process \d+ on .*started") as busy:
            OutputLock(str(out)).__enter__()
        assert "Smith" not in str(busy.value).replace(str(out), "")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert os.path.exists(out / names.LOCK_NAME)          # left by the dead run: nothing identifying
    with OutputLock(str(out)) as lock:                     # its holder is dead: taken over
        assert json.loads((out / names.LOCK_NAME).read_text())["token"] == lock.token
    assert not os.path.exists(out / names.LOCK_NAME)       # and cleaned up


# ---------------------------------------------------------------- 8. the reader on damaged files


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory) -> str:
    base = tmp_path_factory.mktemp("small")
    write_png_archive(base / "in", 10, 24, 24)
    run_convert(base / "in", base / "out", target_shard_mb=0.003, min_shard_mb=0.001, max_shard_mb=1)
    return str(base / "out")


def _idx_damages(lines: list[str]):
    """(name, damaged text, line number the damage is on or None) for an index of ``lines``."""
    n = len(lines)
    offsets = [int(line.split()[0]) for line in lines]
    sizes = [int(line.split()[1]) for line in lines]
    for i in range(n):
        for j in range(i + 1, n):
            swapped = list(lines)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            yield f"swap {i},{j}", swapped, i + 1
    for i in range(n):
        for name, line in (("huge size", f"{offsets[i]} {10 ** 15}"), ("negative", f"{offsets[i]} -5"),
                           ("size + 1", f"{offsets[i]} {sizes[i] + 1}"),
                           ("size - 1", f"{offsets[i]} {sizes[i] - 1}"), ("tiny", f"{offsets[i]} 3"),
                           ("offset shifted", f"{offsets[i] + 8} {sizes[i]}"),
                           ("past the end", f"{10 ** 12} {sizes[i]}"), ("three fields", "0 1 2"),
                           ("words", "offset size"), ("float", f"{offsets[i]}.5 {sizes[i]}"),
                           ("overflow", f"{offsets[i]} {10 ** 30}")):
            damaged = list(lines)
            damaged[i] = line
            # a size change on the last line is caught as the shard's end instead of a line
            yield f"{name} at {i}", damaged, (i + 1 if not (name.startswith("size") and i == n - 1) else None)
    yield "last line lost", lines[:-1], None
    yield "line repeated", lines + lines[-1:], n + 1


def test_a_damaged_index_is_one_error_naming_the_file_and_line_and_never_the_wrong_record(
        small_dataset, tmp_path):
    manifest = reader.info(small_dataset)
    shards = manifest["splits"]["train"]["shards"]
    assert len(shards) >= 2 and all(s["num_records"] >= 3 for s in shards), shards
    clean = reader.RandomAccess(small_dataset, "train")
    want = [clean[i]["id"] for i in range(len(clean))]
    copy = tmp_path / "copy"
    shutil.copytree(small_dataset, copy)
    target = shards[-1]
    idx = copy / target["index_file"]
    original = idx.read_text()
    cases = list(_idx_damages(original.splitlines()))
    cases += [("binary", b"\xff\xfe\x00garbage", None), ("empty", "", None)]
    for name, damaged, line in cases:
        if isinstance(damaged, bytes):
            idx.write_bytes(damaged)
        else:
            idx.write_text(damaged if isinstance(damaged, str) else "\n".join(damaged) + "\n")
        ra = reader.RandomAccess(str(copy), "train")
        for i in range(len(ra)):
            try:
                got = ra[i]["id"]
            except reader.CorruptIndexError as error:
                assert str(idx) in str(error), (name, error)
                if line is not None:
                    assert re.search(rf"\bline {line}\b", str(error)), (name, error)
                assert len(str(error)) < 400, (name, error)
                continue
            assert got == want[i], (name, i)        # never another record than asked for
        assert ra.locate(len(ra) - 1)[0] == len(shards) - 1
        with pytest.raises(reader.CorruptIndexError):
            ra[len(ra) - 1]                     # the damaged shard's records are never read
    idx.unlink()
    idx.mkdir()                                    # an .idx that is a folder
    with pytest.raises(reader.CorruptIndexError, match=str(idx)):
        reader.RandomAccess(str(copy), "train")[len(want) - 1]


@pytest.mark.parametrize("cut", [0.0, 0.3, 0.99])
def test_a_truncated_or_foreign_dataset_json_is_one_error_naming_it(small_dataset, tmp_path, cut):
    copy = tmp_path / "copy"
    shutil.copytree(small_dataset, copy)
    path = copy / names.MANIFEST_NAME
    text = path.read_bytes()
    path.write_bytes(text[:int(len(text) * cut)])
    for call in (lambda: reader.info(str(copy)), lambda: reader.RandomAccess(str(copy), "train"),
                 lambda: reader.load(str(copy), "train")):
        with pytest.raises(ValueError, match="incomplete or corrupt") as error:
            call()
        assert str(path) in str(error.value) and not isinstance(error.value, json.JSONDecodeError)
    for foreign in (b"[1, 2]", b'"text"', b'{"no": "splits"}', b"\xff\xfe{}"):
        path.write_bytes(foreign)
        with pytest.raises(ValueError) as error:
            reader.info(str(copy))
        assert str(path) in str(error.value) and "Traceback" not in str(error.value)


@pytest.mark.parametrize("spec", ["x" * 10_000, "train[" + "1" * 10_000 + ":]", "train+" + "v" * 10_000,
                                  "train[:" + "%" * 5000 + "]", "+".join(["train[:1]"] * 2000) + "+nope"])
def test_split_spec_errors_quote_a_long_spec_shortly(small_dataset, spec):
    for call in (lambda: reader.info(small_dataset).num_records(spec),
                 lambda: reader.RandomAccess(small_dataset, spec)):
        with pytest.raises(ValueError) as error:
            call()
        assert len(str(error.value)) < 1000, len(str(error.value))
        assert "characters)" in str(error.value)


@pytest.mark.parametrize("step", [True, False, 1.0, 2.5, "3", None, [1], -1, float("nan")])
def test_start_step_of_the_wrong_type_or_sign_is_refused_before_tensorflow(small_dataset, step):
    with pytest.raises((TypeError, ValueError), match="start_step") as error:
        reader.load(small_dataset, "train", batch_size=2, seed=1, resumable=True, start_step=step)
    assert "tensorflow" not in type(error.value).__module__
    import numpy as np
    for good in (0, 3, np.int64(2)):
        reader.load(small_dataset, "train", batch_size=2, seed=1, resumable=True, start_step=good)


# ---------------------------------------------------------------- 7. a storage outage while shards are written


def test_the_outage_breaker_trips_once_storage_is_silent_for_the_budget_and_then_fails_fast():
    from dcm2tfrecord.transforms.errors import StorageOutage
    from dcm2tfrecord.transforms.sources.read import OutageBreaker, process_breaker
    now = [0.0]
    budget = 60.0

    def breaker(limit=5):
        return OutageBreaker(limit, budget, clock=lambda: now[0])

    # silence: a request retried for its budget with nothing answered meanwhile trips at once,
    # whatever number of inputs (one here) failed so far
    for first_failure_after in (budget / 2, budget, 3 * budget):
        b, now[0] = breaker(), 0.0
        now[0] = first_failure_after
        with pytest.raises(StorageOutage, match="not answering"):
            b.note(True, "gs://b/x", "RetryError")
        with pytest.raises(StorageOutage):                 # every later request: at once
            b.check()
    # isolated failures among answered requests trip nothing, however long the run
    b, now[0] = breaker(), 0.0
    for step in range(200):
        now[0] += 1.0
        b.note(step % 3 == 0, f"gs://b/{step}", "503")
        b.check()
    # a partial outage: answers keep coming, yet `limit` inputs in a row fail
    b, now[0] = breaker(limit=4), 0.0
    for step in range(3):
        now[0] += 1.0
        b.note(True, "gs://b/y", "503")
    with pytest.raises(StorageOutage, match="4 inputs in a row"):
        b.note(True, "gs://b/y", "503")
    # one breaker per process and run, shared by the run's steps; another run starts afresh
    assert process_breaker("run-a", 5, 60) is process_breaker("run-a", 5, 60)
    assert process_breaker("run-b", 5, 60) is not process_breaker("run-a", 5, 60)


def test_an_unnamed_write_failure_is_an_outage_when_a_probe_of_the_storage_fails_as_one():
    """Beam's batch copy answers None once its retries give up, which can be before half the
    budget passed (a retry stops when its next wait would pass the deadline): the silence
    alone missed the outage. A probe of the same storage tells it apart from a bug."""
    from dcm2tfrecord.transforms.errors import StorageOutage
    from dcm2tfrecord.transforms.sources.read import OutageBreaker
    now = [10.0]
    calls = []

    def failing(exc):
        def probe():
            calls.append(exc)
            raise exc
        return probe

    b = OutageBreaker(5, 60.0, clock=lambda: now[0])
    with pytest.raises(StorageOutage, match="a request to check the storage then failed too"):
        b.note_failure("gs://b/out train shard 3", "AttributeError: 'NoneType'",
                       probe=failing(ConnectionRefusedError("refused")))
    with pytest.raises(StorageOutage):
        b.check()
    # the probe answered, or failed as a bug does: not an outage; the step's own error stands
    for probe in (lambda: True, failing(ValueError("a bug"))):
        b = OutageBreaker(5, 60.0, clock=lambda: now[0])
        b.note_failure("gs://b/out train shard 3", "AttributeError", probe=probe)
        b.check()
    # silent for half the budget already: tripped without asking storage again
    calls.clear()
    b = OutageBreaker(5, 60.0, clock=lambda: now[0])
    now[0] += 30.0
    with pytest.raises(StorageOutage, match="no request answered for 30 s"):
        b.note_failure("gs://b/out", "AttributeError", probe=failing(ConnectionRefusedError()))
    assert calls == []


@pytest.mark.parametrize("retry_s", [4, 8])
def test_an_outage_mid_write_ends_the_run_within_twice_the_retry_budget(tmp_path, retry_s):
    """Storage stops while shards are being written (one per record, many bundles): the run
    ends within about twice --gcs_retry_s, exit 1, nothing committed. Two budgets show the
    end is proportional to the budget, not to the shards or inputs left."""
    code, elapsed, stderr, listed = outage_run(tmp_path, 60, [f"--gcs_retry_s={retry_s}"],
                                                names.DONE_SUFFIX)
    assert_failed_cleanly(code, stderr, listed)
    # + a fixed tail (~5 s here: the lock's release, Beam's teardown of its workers); the
    # breaker of "5 inputs in a row" alone took 5 budgets per worker, ~45 s at 8 s
    assert elapsed < 2 * retry_s + 10, elapsed


@pytest.mark.slow
def test_an_outage_mid_write_at_default_settings_ends_within_twice_the_default_budget(tmp_path):
    """The same at default settings (--gcs_retry_s 60, the default local runner), with more
    shards than a run could write in the budget one at a time: about 1 to 2 minutes."""
    from dcm2tfrecord.pipeline.options.table import ConvertOptions
    default_retry = ConvertOptions(inputs=("x",), output="y").gcs_retry_s
    code, elapsed, stderr, listed = outage_run(tmp_path, 240, [], names.DONE_SUFFIX)
    assert_failed_cleanly(code, stderr, listed)
    assert elapsed < 2 * default_retry, elapsed
    print(f"outage at default settings: the run ended {elapsed:.0f} s after storage stopped")


# ---------------------------------------------------------------- 6. label rows that label nothing


def _png(path, seed: int = 0) -> None:
    import numpy as np
    from PIL import Image
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.full((8, 8), seed * 10 % 256, np.uint8)).save(path, format="PNG")


NFD_E = "e\u0301"   # é decomposed, as macOS writes file names
# file on disk -> the key a labels CSV gives it (None: no row); every row's label is its own class
ON_DISK = {
    "caf\u00e9.png": f"caf{NFD_E}.png",               # NFC on disk, NFD in the CSV
    f"r{NFD_E}sum{NFD_E}.png": "r\u00e9sum\u00e9.png",  # NFD on disk, NFC in the CSV
    "b.png ": "b.png ",                                # a blank that is part of the name
    "b.png": "b.png",                                  # ... beside the name without it
    "sub/c.png": "./sub/c.png",                        # a leading ./
    " lead.png": "lead.png",                           # blanks only in one side, one candidate
    "Upper.png": "upper.png",                          # case: only with --label_key_case fold
    "nolabel.png": None,
}
NOTHING = ["ghost.png", "sub/ghost.png", "./ghost2.png", " ", "b.png  ", "caf\u00e9.png/x"]


def _labels_case(tmp_path):
    for i, name in enumerate(ON_DISK):
        _png(str(tmp_path / "in" / name), i)
    lines, expected = ["path,label"], {}
    for name, key in ON_DISK.items():
        if key is not None:
            lines.append(f'"{key}",class_{len(lines) + 1}')
            expected[name] = len(lines)
    for key in NOTHING:
        lines.append(f'"{key}",ghost_{len(lines) + 1}')
    lines.append(f'"b.png",class_{expected["b.png"]}')       # a duplicate of an earlier row
    (tmp_path / "labels.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return expected, len(lines)


@pytest.mark.parametrize("case", ["exact", "fold"])
def test_every_label_row_labels_a_record_or_is_rejected_and_only_labelling_rows_make_classes(
        tmp_path, case):
    from tests.support import rid
    expected, last_line = _labels_case(tmp_path)
    if case == "exact":
        expected.pop("Upper.png")          # 'upper.png' labels nothing unless case is folded
    out = tmp_path / "out"
    run_convert(tmp_path / "in", out, labels=str(tmp_path / "labels.csv"), missing_label="unlabeled",
                label_key_case=case, **SMALL)
    manifest = reader.info(str(out))
    names_ = manifest["labels"]["class_names"]
    ra = reader.RandomAccess(str(out), "train")
    label_of = {ra[i]["id"].decode(): int(ra[i]["label"]) for i in range(len(ra))}
    labelled_lines = {}
    for name in ON_DISK:
        label = label_of[rid(name)]
        if name in expected:
            assert label >= 0 and names_[label] == f"class_{expected[name]}", (name, label, names_)
            labelled_lines[int(names_[label].split("_")[1])] = name
        else:
            assert label == -1, name
    assert sorted(names_) == sorted(f"class_{line}" for line in labelled_lines)  # no class from nothing
    rejected = {int(e["uri"].rsplit(":", 1)[1]): e for e in errors_of(out) if e["status"] == "rejected"}
    for line in range(2, last_line + 1):       # every data line: labels a record, or is rejected
        assert (line in labelled_lines) != (line in rejected), line
    assert {e["reason"] for e in rejected.values()} == {"unmatched_label_row", "duplicate_label_row",
                                                         "malformed_label_row"}    # " ": an empty key
    assert sum(manifest["counts"]["label_rows_rejected"].values()) == len(rejected)
    assert all(e["message"] for e in rejected.values())


def test_nul_bytes_and_repeated_header_columns_in_a_labels_csv_are_refused_in_one_line(tmp_path):
    write_png_archive(tmp_path / "in", 2, 8, 8)
    for name, text, needle in (
            ("nul_cell", "path,label\nimg_0000.png,a\x00b\n", "NUL"),
            ("nul_key", "path,label\nimg_0000.png,a\nimg\x00_0001.png,b\n", "NUL"),
            ("nul_header", "pa\x00th,label\nimg_0000.png,a\n", "NUL"),
            ("repeated", "path,label,path\nimg_0000.png,a,x\n", "more than once"),
            ("repeated_blanks", "label, path ,path\na,img_0000.png,x\n", "more than once"),
            ("repeated_other", "path,label,note,note\nimg_0000.png,a,x,y\n", "more than once")):
        csv_path = tmp_path / f"{name}.csv"
        csv_path.write_text(text, encoding="utf-8")
        with pytest.raises(UsageError, match=needle) as error:
            run_convert(tmp_path / "in", tmp_path / f"out_{name}", labels=str(csv_path))
        assert "\n" not in str(error.value) and str(csv_path) in str(error.value)
        assert not os.path.exists(tmp_path / f"out_{name}" / names.MANIFEST_NAME)
    code, _, stderr = cli("convert", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "o"),
                          "--labels", str(tmp_path / "nul_cell.csv"), "--id_salt", TEST_SALT, *IN_MEMORY)
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "NUL" in stderr, stderr


def test_a_version_written_before_an_option_existed_counts_it_at_its_default():
    """--label_key_case is new: a version that did not record it used its default, so the
    next --incremental run reuses its shards instead of rebuilding everything."""
    from dcm2tfrecord.dataset.versions import changed_options
    from dcm2tfrecord.pipeline.options.table import OPTIONS, ConvertOptions
    from dcm2tfrecord.dataset.manifest import Manifest
    from dcm2tfrecord.pipeline.output_dir import with_new_options
    now = ConvertOptions(inputs=("/in",), output="/out", id_salt=TEST_SALT).recorded()
    for option in OPTIONS:       # any option at its default, missing from an older manifest
        if option.recorded and option.name in now and now[option.name] == option.default_value:
            older = {k: v for k, v in now.items() if k != option.name}
            assert changed_options(with_new_options(Manifest(splits={}, options=older)).options, now) == [], option.name
    folded = ConvertOptions(inputs=("/in",), output="/out", id_salt=TEST_SALT, label_key_case="fold").recorded()
    older = {k: v for k, v in now.items() if k != "label_key_case"}
    assert changed_options(with_new_options(Manifest(splits={}, options=older)).options, folded) == ["label_key_case"]
