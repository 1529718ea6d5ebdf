"""`python -m dcm2tfrecord.pipeline`: the dcm2tfrecord command (pipeline/cli.py)."""
import sys

from dcm2tfrecord.pipeline.cli import main

sys.exit(main())
