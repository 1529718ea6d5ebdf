import sys

from dcm2tfrecord.pipeline.cli import main

sys.exit(main())
