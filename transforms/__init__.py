"""Pure functions that turn source files into TFRecord shards, plus thin Beam shells.

Modules hold one concern each: ``sources`` (matching inputs), ``sniff`` (file
type), ``dicom_header``/``dicom_pixels`` (DICOM), ``raster`` (PNG/JPEG/...),
``probe`` and ``decode`` (dispatch), ``record_format`` + ``example_codec``
(the tf.train.Example), ``shard_plan`` (sizes and order), ``shard_writer``
(atomic shard files), ``manifest`` (dataset.json), ``beam_transforms`` (Beam).
"""
