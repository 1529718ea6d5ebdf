"""Each fixed choice of a convert option is an enum defined beside the code that implements it;
no product module restates its strings as a tuple; the settings take the enum members, typed."""
import ast
import dataclasses
import glob
import os
import typing

import pytest

from dcm2tfrecord.pipeline.options import choices as option_choices
from dcm2tfrecord.pipeline.options.table import OPTIONS
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from dcm2tfrecord.transforms.settings import ConversionSettings, DecodeSettings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRODUCT = ("dataset", "reader", "pipeline", "transforms")
CHOICES = [o for o in OPTIONS if o.choices is not None]


def test_the_choices_are_the_enums_of_every_option_with_fixed_choices():
    assert {o.name for o in CHOICES} == {
        "duplicates", "compression", "pixel_encoding", "dicom_values", "window_bits", "resize_mode", "crop",
        "intensity", "channels", "frames", "unit", "series_gaps", "series_4d", "label_key", "label_key_case",
        "mask_layout", "missing_mask", "missing_label", "split_by", "progress", "volume_codec"}


@pytest.mark.parametrize("option", CHOICES, ids=lambda o: o.name)
def test_each_choice_enum_is_defined_beside_its_owner(option):
    module = option.choices.__module__
    assert module.startswith("dcm2tfrecord.") and module != option_choices.__name__, (option.name, module)
    # the option table names it through option_choices, the same class
    assert getattr(option_choices, option.choices.__name__) is option.choices


def _string_collections(path: str):
    """(line, set of strings) of every tuple, list or set literal of two or more string constants."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            yield node.lineno, {e.value for e in node.elts}


def _product_modules():
    for package in PRODUCT:
        yield from sorted(glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True))


def test_no_product_module_restates_an_enum_as_a_tuple_of_its_strings():
    enums = {o.choices for o in CHOICES if issubclass(o.choices, str)}
    found = []
    for path in _product_modules():
        for line, strings in _string_collections(path):
            for choices in enums:
                if strings <= {m.value for m in choices}:
                    found.append(f"{os.path.relpath(path, ROOT)}:{line} {sorted(strings)} ({choices.__name__})")
    assert not found, "\n".join(found)


def test_the_restatement_check_finds_a_tuple_of_choices(tmp_path):
    """The scan above sees what it looks for: a tuple of an enum's values."""
    path = tmp_path / "module.py"
    path.write_text('MODES = ("stretch", "pad", "crop")\nif x in ["1", "3"]:\n    pass\n')
    assert [s for _, s in _string_collections(str(path))] == [{"stretch", "pad", "crop"}, {"1", "3"}]


def _settings_hints(cls: type) -> dict:
    names = {c.__name__: c for c in (o.choices for o in CHOICES)}
    return typing.get_type_hints(cls, localns={**names, "ClassMap": object, "MaskPattern": object,
                                                   "MaskSettings": object})


@pytest.mark.parametrize("option", [o for o in CHOICES if o.setting],
                         ids=lambda o: o.name)
def test_the_settings_field_a_choice_feeds_is_typed_with_its_enum(option):
    target, name = option.setting.split(".")
    cls = {"decode": DecodeSettings, "conversion": ConversionSettings, "masks": MaskSettings}[target]
    hint = _settings_hints(cls)[name]
    if typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    assert hint is option.choices, (option.name, hint)
    default = {f.name: f for f in dataclasses.fields(cls)}[name].default
    assert default is None or default in {m.value for m in option.choices}, (option.name, default)


@pytest.mark.parametrize("name, text", [("window", "40,400"), ("resize", "64x32"), ("spacing", "1,1,2.5"),
                                        ("splits", "train=0.5,test=0.5")])
def test_a_structured_option_is_parsed_once_and_the_settings_copy_the_parsed_value(name, text):
    from dcm2tfrecord.pipeline.options.table import ConvertOptions
    opts = ConvertOptions(inputs=("/in",), output="/out", id_salt="choices-salt", **{name: text},
                          **({"dicom_values": "window"} if name == "window" else {}))
    assert getattr(opts, name) == text          # the text, as dataset.json records it
    parsed = opts.typed(name)
    assert parsed is not None and not isinstance(parsed, str)
    settings = opts.settings()
    held = getattr(settings.decode, name) if name in ("window", "resize", "spacing") else settings.splits
    assert held is parsed                        # the same object: copied, not parsed again


def test_spacing_auto_is_parsed_to_its_constant_and_the_settings_carry_it():
    """--spacing auto: the settings hold spacing.AUTO (the target is chosen in the run,
    transforms.records.steps.ChooseSpacing); dataset.json records the text as given."""
    from dcm2tfrecord.pipeline.options.table import ConvertOptions
    from dcm2tfrecord.transforms.images.spacing import AUTO
    opts = ConvertOptions(inputs=("/in",), output="/out", id_salt="choices-salt", spacing="auto")
    assert opts.spacing == "auto"
    assert opts.settings().decode.spacing == AUTO


def test_a_bad_structured_option_is_refused_when_the_options_are_made():
    from dcm2tfrecord.pipeline.options.table import ConvertOptions
    from dcm2tfrecord.pipeline.options.usage import UsageError
    with pytest.raises(UsageError, match="--resize"):
        ConvertOptions(inputs=("/in",), output="/out", resize="512by512")

