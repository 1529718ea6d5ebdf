"""Each convert option is said once: its ConvertOptions field (type, default) and its row
(help, flag, template); --help shows defaults from the parser; choices are enums; the rules
run once per conversion."""
import dataclasses
import enum
import json
import re

import pytest

from dcm2tfrecord.pipeline import convert
from dcm2tfrecord.pipeline.options import arguments, rules as option_rules
from dcm2tfrecord.pipeline.options.table import OPTIONS, ConvertOptions
from dcm2tfrecord.pipeline.options.usage import UsageError

TEST_SALT = "options-once-salt"


def _help() -> str:
    import argparse
    parser = argparse.ArgumentParser(prog="convert", formatter_class=arguments.DefaultsHelpFormatter)
    arguments.add_convert_arguments(parser)
    return re.sub(r"\s+", " ", parser.format_help())


def test_the_table_is_read_off_the_fields():
    fields = dataclasses.fields(ConvertOptions)
    assert [f.name for f in fields] == [o.name for o in OPTIONS]
    for field, option in zip(fields, OPTIONS):
        assert field.metadata["option"].flag == option.flag
        assert option.value_type is not None, option.name
        assert field.default == option.default_value, option.name   # declared once, defaulted by it


def test_construction_attribute_access_replace_and_hash():
    opts = ConvertOptions(inputs=["/in"], output="/out", id_salt=TEST_SALT, compression="gzip",
                          window_bits=16, split_by="study", keep_tags=["Modality"])
    assert opts.inputs == ("/in",) and opts.keep_tags == ("Modality",)
    assert opts.compression == "gzip" and isinstance(opts.compression, enum.Enum)
    assert opts.window_bits == 16 and opts.split_by == "study"
    assert hash(opts) == hash(ConvertOptions(inputs=("/in",), output="/out", id_salt=TEST_SALT,
                                             compression="gzip", window_bits=16, split_by="study",
                                             keep_tags=("Modality",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.seed = 3
    assert opts.replace(seed=3).seed == 3 and opts.replace(seed=3).compression is opts.compression


def test_a_choice_outside_its_enum_is_refused_naming_the_choices():
    with pytest.raises(UsageError, match=r"--compression: invalid choice: 'bz2' \(choose from 'none', 'gzip'\)"):
        ConvertOptions(inputs=("/in",), output="/out", compression="bz2")


def test_every_option_with_fixed_choices_is_an_enum():
    for option in OPTIONS:
        if option.name in ("compression", "unit", "frames", "duplicates", "resize_mode", "dicom_values",
                           "progress", "channels", "window_bits", "label_key", "label_key_case",
                           "missing_label", "split_by"):
            assert option.choices is not None and issubclass(option.choices, enum.Enum), option.name


def test_recorded_options_hold_plain_values_and_settings_the_enum_members():
    opts = ConvertOptions(inputs=("/in",), output="/out", id_salt=TEST_SALT, compression="gzip")
    recorded = opts.recorded()
    for name, value in recorded.items():
        assert not isinstance(value, enum.Enum), name
    assert json.dumps(recorded["compression"]) == '"gzip"' and type(recorded["window_bits"]) is int
    settings = opts.settings()
    # the settings copy the typed values: each choice its enum member, equal to its plain value
    assert settings.compression == "gzip" and settings.decode.window_bits == 8
    assert settings.decode.resize_mode == "stretch" and settings.unit == "file"
    for option in OPTIONS:
        if option.choices and option.setting:
            target, name = option.setting.split(".")
            if target == "masks":       # MaskSettings, only with --class_map: test_option_choices.py
                continue
            held = getattr(settings.decode if target == "decode" else settings, name)
            if held is None:            # --split_by unset: its absence means something (see its help)
                assert option.default_value is None, option.name
                continue
            assert type(held) is option.choices, option.name
            assert json.dumps(held) == json.dumps(option.plain(held)), option.name


def test_no_help_text_restates_a_default_and_help_shows_every_default():
    shown = _help()
    for option in OPTIONS:
        assert "default" not in option.help.lower(), (option.flag, option.help)
        default = option.default_value
        if option.required or default is None or default == ():
            continue
        literal = str(default.value if isinstance(default, enum.Enum) else default)
        assert f"(default: {literal})" in shown, option.flag
        plain = f"{default:g}" if isinstance(default, float) else literal
        if isinstance(default, (int, float)) and not isinstance(default, (bool, enum.Enum)):
            assert not re.search(rf"(^|\W){re.escape(plain)}(\W|$)", option.help), (option.flag, option.help)


def test_the_rules_run_once_per_command_line_conversion(tmp_path, monkeypatch):
    from tests.support import write_png_archive
    write_png_archive(tmp_path / "in", 2, 8, 8)
    calls = []
    real = option_rules.validate
    monkeypatch.setattr(option_rules, "validate", lambda opts: (calls.append(1), real(opts))[1])
    code = convert.main(["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                         "--id_salt", TEST_SALT, "--progress", "none",
                         "--direct_num_workers=1", "--direct_running_mode=in_memory"])
    assert code == 0 and calls == [1]
    calls.clear()
    convert.run(ConvertOptions(inputs=(str(tmp_path / "in"),), output=str(tmp_path / "out2"),
                               id_salt=TEST_SALT),
                ["--direct_num_workers=1", "--direct_running_mode=in_memory"], quiet=True)
    assert calls == [1]


def test_library_runs_still_check_the_rules(tmp_path):
    opts = ConvertOptions(inputs=(str(tmp_path),), output=str(tmp_path / "o"), id_salt=TEST_SALT,
                          min_shard_mb=600.0)
    with pytest.raises(UsageError, match="--min_shard_mb 600 must be <= --max_shard_mb 500"):
        convert.run(opts, [], quiet=True)


def test_each_template_parameter_help_is_its_argparse_help():
    """metadata.json's helpText of each parameter says the option's --help text (the launcher's
    parameter names standing for the flags), then the default --help shows, then the template's
    note: one text, not two."""
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "metadata.json")) as handle:
        params = {p["name"]: p for p in json.load(handle)["parameters"]}
    rows = {o.flag: o for o in OPTIONS if o.template is not None}
    assert set(params) == set(rows)
    for flag, param in params.items():
        option = rows[flag]
        said = re.sub(r"--([a-z0-9_]+)", r"\1", option.help)
        text = param["helpText"]
        assert said.lower() in text.lower(), (flag, said, text)
        default = option.default_value
        if option.required or default is None or default == ():
            assert "Default:" not in text, flag
        else:
            shown = (str(default.value) if isinstance(default, enum.Enum) else str(default).lower()
                     if isinstance(default, bool) else f"{default:g}" if isinstance(default, float)
                     else str(default))
            assert f"Default: {shown}." in text, (flag, text)
        assert text.endswith(option.template.note), flag
