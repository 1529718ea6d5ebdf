"""The Flex Template's metadata.json, one parameter per option of the table, its help the option's own
(``python -m dcm2tfrecord.pipeline.options.template_metadata --metadata > metadata.json``)."""
from __future__ import annotations

import json
import sys

from dcm2tfrecord.pipeline.options.table import OPTIONS, Option, choices_regex, template_help


def _regexes(option: Option) -> list[str]:
    """The parameter's regexes: its template's, else those of its choices."""
    assert option.template is not None
    return list(option.template.regexes or (choices_regex(option.choice_values) if option.choices else ()))


def template_metadata() -> dict:
    """The Flex Template's metadata.json: one parameter per option, from OPTIONS."""
    return {
        "name": "dcm2tfrecord convert",
        "description": "Converts a DICOM/PNG/JPEG archive on Cloud Storage into deterministic, "
                       "size-bounded TFRecord shards plus dataset.json (see README). Launch with "
                       "sdk_container_image set to the template image so the workers run the same code.",
        "streaming": False,
        "parameters": [
            {"name": o.flag, "label": o.template.label, "helpText": template_help(o),
             "isOptional": not (o.required or o.template.required),
             **({"regexes": _regexes(o)} if _regexes(o) else {})}
            for o in OPTIONS if o.template is not None],
    }


if __name__ == "__main__":   # python -m dcm2tfrecord.pipeline.options.template_metadata --metadata > metadata.json
    if sys.argv[1:] != ["--metadata"]:
        sys.exit("usage: python -m dcm2tfrecord.pipeline.options.template_metadata --metadata")
    print(json.dumps(template_metadata(), indent=2))
