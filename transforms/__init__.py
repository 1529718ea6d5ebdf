"""What happens to a record, from source file to serialized tf.train.Example.

One package per concern (sources, dicom, nifti, images, records, masks, labels,
splits, series, planning, output). In each, plain modules hold pure functions that
the tests call without Beam; ``steps.py`` holds the thin Beam shells (DoFns
and composite PTransforms) that pipeline/graph.py wires into the job graph.
Importing it changes nothing elsewhere: Beam's FileSystems go under the format
package's storage facade by an explicit call (beam_files.install_beam_storage),
at launch and in each worker.
"""
