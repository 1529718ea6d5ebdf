"""transforms.masks.pairing: --mask_pattern parsed, mask paths resolved and checked, and the two
join groups decided (a path's files and the images naming it; an image and the mask offered)."""
from __future__ import annotations

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.transforms.labels.table import LabelRow
from dcm2tfrecord.transforms.masks import classes, pairing, patterns
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from dcm2tfrecord.transforms.settings import ConversionSettings, DecodeSettings, ShardBounds
from dcm2tfrecord.transforms.record_model import ImageSpec, ProbedRecord, SourceFile
from tests.support.bounded import finishes_within

MSD = r"imagesTr/(.*)_0000\.nii\.gz=labelsTr/\1.nii.gz"
CLASS_MAP = classes.parse_mapping('kidney: ["1"]\ntumour: ["2", "3"]\n', "map.yaml")


def _record(uri: str, rel: str, frame=None, shape=(4, 5, 6)) -> ProbedRecord:
    return ProbedRecord(source=SourceFile(uri, rel, 100, 1.0), record_id=rel, kind="nifti",
                        spec=ImageSpec(*shape, 1, "int16"), frame=frame)


def _masks(**changes) -> MaskSettings:
    return MaskSettings(class_map=CLASS_MAP, **changes)


# ---------------------------------------------------------------- the pattern


def test_the_msd_pattern_names_each_image_its_label_map_and_knows_a_label_map_when_it_sees_one():
    pattern = pairing.parse_mask_pattern(MSD)
    assert pattern.mask_of("imagesTr/la_003_0000.nii.gz") == "labelsTr/la_003.nii.gz"
    assert pattern.mask_of("imagesTr/la_003_0001.nii.gz") is None          # another channel: not named
    assert pattern.mask_of("x/imagesTr/la_003_0000.nii.gz") is None        # the whole path must match
    assert pattern.is_mask("labelsTr/la_003.nii.gz") and pattern.is_mask("labelsTr/sub/x.nii.gz")
    assert not pattern.is_mask("imagesTr/la_003_0000.nii.gz") and not pattern.is_mask("labelsTr/x.nii")


def test_named_groups_repeated_groups_and_an_escaped_equals_sign():
    pattern = pairing.parse_mask_pattern(r"(?P<case>[^/]+)/img\=(\d+)\.nii=\g<case>/seg_\2_\g<case>.nii.gz")
    assert pattern.mask_of("p7/img=12.nii") == "p7/seg_12_p7.nii.gz"
    assert pattern.is_mask("p7/seg_12_p7.nii.gz") and not pattern.is_mask("p7/seg_12_p8.nii.gz")
    lookahead = pairing.parse_mask_pattern(r"(?=a)(.*)\.nii=m/\1.nii")       # '=' inside a group is the regex's
    assert lookahead.mask_of("ab.nii") == "m/ab.nii" and lookahead.mask_of("b.nii") is None


@pytest.mark.parametrize("text,says", [
    (r"imagesTr/(.*)\.nii", "no '=' between"),
    (r"imagesTr/([a=b]", "an unclosed ( before any '='"),
    (r"=labelsTr/x.nii", "the image regex before '=' is empty"),
    (r"(.*))=m/\1", "is not a regular expression"),
    (r"(.*)=m/\2", "refers to group 2; the image regex has 1 group(s)"),
    (r"(.*)=m/\g<case>", "has no group named 'case'"),
    (r"(.*)=m/x.nii", "refers to no group"),
    (r"(.*)=m/\n\1", "is no group reference"),
    (r"(.*)=/abs/\1", "is not a relative path"),
    (r"(.*)=../labels/\1", "'..' component"),
    (r"(.*)=gs://b/\1", "is not a relative path"),
])
def test_a_pattern_typo_is_one_line_naming_it(text, says):
    with pytest.raises(pairing.PatternError) as caught:
        pairing.parse_mask_pattern(text)
    message = str(caught.value)
    assert says in message and "\n" not in message and "--mask_pattern" in message, message


def _named_paths(text: str, paths: list) -> list:
    """(is_mask, mask_of) of each path under the pattern ``text``."""
    pattern = pairing.parse_mask_pattern(text)
    return [(pattern.is_mask(p), pattern.mask_of(p)) for p in paths]


@pytest.mark.parametrize("text, path, expected", [
    (r"(a+)+=m/\1.nii", "a" * 5000 + "!", (False, None)),
    (r"(.*)_(.*)_(.*)\.nii=m/\1/\2/\3.nii", "a_" * 3000, (False, None)),          # cubic in re
    (r"(.*)_(.*)_(.*)=\1/\2/\3.nii.gz", "a/" * 3000, (False, None)),         # the mask side: cubic too
    (r"(.*)_(.*)_(.*)=\1/\2/\3.nii.gz", "a_b_c", (False, "a/b/c.nii.gz")),
    (r"(x+x+)+y/(.*)=m/\2", "x" * 20000 + "/z", (False, None)),
    (r"img/(\w+)_(\d+)\.nii=seg/\1_\2.nii", "img/élan_١٢.nii", (False, "seg/élan_١٢.nii")),  # Python's \w, \d
])
def test_a_backtracking_pattern_against_a_long_path_gives_its_answer_at_once(text, path, expected):
    """Python's re runs these for hours holding the GIL: RE2 answers them with Python's meaning."""
    assert finishes_within(5, _named_paths, text, [path]) == [expected]


def test_a_pattern_only_a_backtracking_engine_runs_is_bounded_per_match(monkeypatch):
    """A backreference RE2 lacks (the mask side of a group used twice) runs in the regex module,
    each match bounded: a path that takes it past the bound fails that image as mask_invalid,
    naming the option, and never hangs."""
    monkeypatch.setattr(patterns, "MATCH_BOUND_S", 0.2)
    pattern = pairing.parse_mask_pattern(r"(.*)/(.*)/(.*)\.nii=\1_\2_\1_\3.seg")
    assert not pattern.mask.linear and pattern.image.linear
    assert pattern.is_mask("p_q_p_r.seg") and not pattern.is_mask("p_q_x_r.seg")
    hostile = _record("/in/" + "a_" * 3000 + "b.seg", "a_" * 3000 + "b.seg")
    [outcome] = finishes_within(5, pairing.named_by_pattern, hostile, pattern)
    assert outcome.uri == hostile.source.uri and outcome.status == "failed" and outcome.reason == "mask_invalid"
    assert outcome.message.startswith("--mask_pattern: ") and "took longer than 0.2 s" in outcome.message
    assert "\n" not in outcome.message


# ---------------------------------------------------------------- paths


@pytest.mark.parametrize("image,path,uri", [
    (SourceFile("/data/Task01/imagesTr/a_0000.nii.gz", "imagesTr/a_0000.nii.gz", 1, 0.0), "labelsTr/a.nii.gz",
     "/data/Task01/labelsTr/a.nii.gz"),
    (SourceFile("gs://bucket/msd/imagesTr/a_0000.nii.gz", "imagesTr/a_0000.nii.gz", 1, 0.0), "./labelsTr/a.nii.gz",
     "gs://bucket/msd/labelsTr/a.nii.gz"),
    (SourceFile("gs://bucket/one.nii", "one.nii", 1, 0.0), "seg/one.nii", "gs://bucket/seg/one.nii"),
])
def test_a_mask_path_is_relative_to_the_images_input_root(image, path, uri):
    assert pairing.mask_uri(image, path, "--mask_column") == uri


@pytest.mark.parametrize("bad", ["", "/etc/passwd", "../x.nii", "a/../../x.nii", "a//b.nii", "a/./b.nii",
                                 "C:/x.nii", "gs://other/x.nii", "a\\b.nii", "a\nb.nii"])
def test_mask_paths_that_leave_the_root_are_refused_by_the_one_check_of_outside_paths(bad):
    with pytest.raises(names.BadName):
        names.check_relative_path(bad, "--mask_column")
    image = SourceFile("/data/in/x.nii", "x.nii", 1, 0.0)
    with pytest.raises(names.BadName):
        pairing.mask_uri(image, bad, "--mask_column")


def test_ordinary_mask_paths_pass():
    for good in ("labelsTr/a.nii.gz", "./seg/b c.nii", "é/x=1.nii", ".hidden/x.nii"):
        assert names.check_relative_path(good, "--mask_column") == good.removeprefix("./")


# ---------------------------------------------------------------- what an image names


def test_by_pattern_a_mask_side_path_is_a_mask_whatever_the_image_side_says():
    pattern = pairing.parse_mask_pattern(r"(.*)\.nii\.gz=\1_mask.nii.gz")
    image = _record("/in/a.nii.gz", "a.nii.gz")
    mask = _record("/in/a_mask.nii.gz", "a_mask.nii.gz")
    assert pairing.named_by_pattern(image, pattern) == pairing.Named(image, "/in/a_mask.nii.gz", "a_mask.nii.gz")
    assert pairing.named_by_pattern(mask, pattern) == pairing.Named(mask, recognised=True)


def test_by_rows_the_first_line_of_a_path_names_the_mask_and_a_bad_path_fails_the_image():
    settings = ConversionSettings(patterns=("/in",), output_dir="/out", bounds=ShardBounds(1, 1, 1),
                                  labels_csv="/l.csv", decode=DecodeSettings(masks=_masks(column="mask")))
    a, b, c = (_record(f"/in/{n}.nii", f"{n}.nii") for n in "abc")
    rows = [LabelRow("a.nii", "seg/a.nii", None, 3), LabelRow("a.nii", "seg/other.nii", None, 2),
            LabelRow("b.nii", "../b.nii", None, 4)]
    got = pairing.named_by_rows([a], rows[:2], settings) + pairing.named_by_rows([b], rows[2:], settings) \
        + pairing.named_by_rows([c], [], settings)
    assert got[0] == pairing.Named(a, "/in/seg/other.nii", "seg/other.nii")       # line 2 before line 3
    [failed] = got[1]
    assert failed.uri == "/in/b.nii" and failed.reason == "mask_invalid" and "line 4 of --labels" in failed.message
    assert got[2] == pairing.Named(c)


# ---------------------------------------------------------------- the two join groups


def test_a_named_file_is_a_mask_offered_to_the_first_image_and_taken_from_the_others():
    mask = pairing.Named(_record("/in/m.nii", "m.nii"))
    claims = [pairing.Claim("/in/z.nii", "z.nii", "/in/m.nii"), pairing.Claim("/in/a.nii", "a.nii", "/in/m.nii"),
              pairing.Claim("/in/a.nii", "a.nii", "/in/m.nii")]      # a 4-D image's volumes claim once
    images, offers, outcomes = pairing.resolve_mask_file([mask], claims)
    assert images == [] and outcomes == []
    assert offers == [pairing.Offer("/in/a.nii", mask=mask.record.source, mask_path="m.nii"),
                      pairing.Offer("/in/z.nii", mask_path="m.nii", owner="a.nii")]


def test_an_unnamed_file_is_an_image_unless_the_pattern_recognises_it_as_a_mask():
    plain = pairing.Named(_record("/in/x.nii", "x.nii"))
    assert pairing.resolve_mask_file([plain], []) == ([plain], [], [])
    orphan = pairing.Named(_record("/in/labelsTr/x.nii", "labelsTr/x.nii"), recognised=True)
    _, _, [outcome] = pairing.resolve_mask_file([orphan], [])
    assert (outcome.uri, outcome.status, outcome.reason) == ("/in/labelsTr/x.nii", "failed", "mask_without_image")
    assert pairing.resolve_mask_file([], [pairing.Claim("/in/a.nii", "a.nii", "/in/gone.nii")]) == ([], [], [])


def test_an_image_carries_its_mask_and_its_planned_bytes_on_every_volume():
    volumes = [pairing.Named(_record("/in/a.nii", "a.nii", frame=v), "/in/m.nii", "m.nii") for v in (1, 0)]
    mask = SourceFile("/in/m.nii", "m.nii", 50, 2.0)
    records, outcomes = pairing.attach(volumes, [pairing.Offer("/in/a.nii", mask=mask, mask_path="m.nii")],
                                       _masks(layout="binary"))
    assert outcomes == [] and [r.frame for r in records] == [0, 1]
    assert all(r.annotations == ((mask, "nifti"),) and r.mask_bytes == 4 * 5 * 6 * 2 for r in records)
    assert records[0].sources == (records[0].source, mask)          # written: the mask is accounted for


@pytest.mark.parametrize("missing_mask", ["skip", "error", "empty"])
def test_an_image_without_its_mask_follows_missing_mask_once_per_file(missing_mask):
    volumes = [pairing.Named(_record("/in/a.nii", "a.nii", frame=v), "/in/m.nii", "m.nii") for v in (0, 1)]
    records, outcomes = pairing.attach(volumes, [], _masks(missing=missing_mask))
    if missing_mask == "empty":
        assert outcomes == [] and all(r.annotations == () and r.mask_bytes == 4 * 5 * 6 for r in records)
        return
    assert records == []
    [outcome] = outcomes
    assert outcome.status == ("skipped" if missing_mask == "skip" else "failed") and outcome.reason == "missing_mask"
    assert "names the mask m.nii, which is not among the converted inputs" in outcome.message


def test_a_taken_mask_fails_the_image_and_an_offer_to_no_image_fails_the_mask():
    image = [pairing.Named(_record("/in/z.nii", "z.nii"), "/in/m.nii", "m.nii")]
    _, [shared] = pairing.attach(image, [pairing.Offer("/in/z.nii", mask_path="m.nii", owner="a.nii")], _masks())
    assert shared.reason == "mask_shared" and "a.nii names too and takes" in shared.message
    mask = SourceFile("/in/m.nii", "m.nii", 50, 2.0)
    _, [orphan] = pairing.attach([], [pairing.Offer("/in/x.nii", mask=mask, mask_path="m.nii")], _masks())
    assert (orphan.uri, orphan.reason) == ("/in/m.nii", "mask_without_image")
