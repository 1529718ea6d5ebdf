"""What happens to a record, from source file to serialized tf.train.Example.

One package per concern (sources, dicom, images, records, labels, splits,
series, planning, output). In each, plain modules hold pure functions that
the tests call without Beam; ``steps.py`` holds the thin Beam shells (DoFns
and composite PTransforms) that pipeline/convert.py wires into the job graph.
"""

from dcm2tfrecord.transforms import beam_files  # noqa: E402,F401 - the format package writes through Beam's FileSystems
