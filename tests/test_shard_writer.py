"""The shard writer holds records to their plan: a record that decodes to another size is refused.

Shard sizes are planned from headers (README, "Shard"); the fuzz oracle
(tests/test_fuzz.py) checks that written inputs decode to their probed shape,
and the writer itself refuses a record that does not, with a reason, instead
of writing a shard larger or smaller than planned.
"""
import dataclasses
import os

import tensorflow as tf

from dataset.shard_writer import write_shard
from transforms import reasons
from transforms.records.probe import probe_file
from transforms.records.values import ShardPlan, SourceFile
from tests.conftest import write_png_archive


def _probed(path: str):
    st = os.stat(path)
    return probe_file(SourceFile(path, os.path.basename(path), st.st_size, st.st_mtime))


def test_a_record_whose_decoded_size_differs_from_its_plan_is_refused(tmp_path):
    paths = write_png_archive(tmp_path / "a", count=3, height=40, width=30, seed=5)
    good, lying, small = (_probed(p) for p in paths)
    # what a header that lies looks like to the writer: a plan of 4000 rows for a 40-row image
    lying = dataclasses.replace(lying, spec=dataclasses.replace(lying.spec, height=4000))
    small = dataclasses.replace(small, spec=dataclasses.replace(small.spec, width=3))
    out = tmp_path / "out"
    os.makedirs(out)
    result, outcomes = write_shard(ShardPlan("train", 0, 1, (good, lying, small)), str(out))
    assert [(o.uri, o.status, o.reason) for o in outcomes] == [
        (paths[1], reasons.FAILED, reasons.DECODED_SIZE_MISMATCH),
        (paths[2], reasons.FAILED, reasons.DECODED_SIZE_MISMATCH)]
    assert "(1, 40, 30, 1)" in outcomes[0].message and "(1, 4000, 30, 1)" in outcomes[0].message
    shard = out / result.file
    assert result.num_records == 1 and result.num_bytes == os.path.getsize(shard)
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    assert len(records) == 1
    assert good.record_id.encode() in records[0]
    assert result.num_bytes <= good.planned_bytes
