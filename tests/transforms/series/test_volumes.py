"""transforms.series.volumes: slices into volumes; gaps, localizers, repeated positions, 4-D."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import patient_space
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.series import volumes
from dcm2tfrecord.transforms.record_model import ImageSpec, ProbedRecord, SliceInfo, SourceFile

AXIAL = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
CORONAL = (1.0, 0.0, 0.0, 0.0, 0.0, -1.0)


def _slice(name: str, z: float, orientation=AXIAL, localizer=False, key=(), instance=None,
           xy=(-150.0, -170.0)) -> ProbedRecord:
    return ProbedRecord(source=SourceFile(f"/in/{name}", name, 10, 0.0), record_id=name, kind="dicom",
                        spec=ImageSpec(1, 4, 4, 1, "int16"),
                        slice_info=SliceInfo(orientation=orientation, position=(xy[0], xy[1], z),
                                             instance=instance, localizer=localizer, volume_key=key))


def _names(volume) -> list[str]:
    return [m.source.rel_path for m in volume.members]


def test_a_regular_series_is_one_volume_in_anatomical_order_whatever_the_file_order():
    slices = [_slice(f"s{n}.dcm", z) for n, z in enumerate([2.5, 0.0, 5.0, 1.25, 3.75])]
    [volume] = volumes.plan_volumes(slices)
    assert _names(volume) == ["s1.dcm", "s3.dcm", "s0.dcm", "s4.dcm", "s2.dcm"]
    assert volume.spacing == pytest.approx(1.25) and volume.label == "" and volume.volumes == 1


def test_the_reported_ge_gap_fails_naming_the_gap_and_its_slices():
    slices = [_slice(f"s{n}.dcm", z) for n, z in enumerate([-99.5, 103.0, 104.25, 105.5])]
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes(slices)
    assert info.value.reason == reasons.SERIES_UNEVEN_SPACING
    message = str(info.value)
    assert "202.50 mm" in message and "s0.dcm" in message and "s1.dcm" in message
    assert "-99.50" in message and "103.00" in message and "1.25 mm apart" in message


def test_split_writes_each_even_run_as_its_own_volume():
    slices = [_slice(f"s{n}.dcm", z) for n, z in enumerate([-99.5, 103.0, 104.25, 105.5])]
    runs = volumes.plan_volumes(slices, gaps="split")
    assert [_names(v) for v in runs] == [["s0.dcm"], ["s1.dcm", "s2.dcm", "s3.dcm"]]
    assert [v.label for v in runs] == ["run=0", "run=1"]
    assert runs[1].spacing == pytest.approx(1.25) and runs[0].spacing == 0.0


def test_missing_slices_are_told_apart_from_an_uneven_gap():
    zs = [0.0, 1.25, 2.5, 6.25, 7.5, 8.75]         # two slices (3.75, 5.0) absent
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes([_slice(f"s{n}.dcm", z) for n, z in enumerate(zs)])
    assert info.value.reason == reasons.SERIES_MISSING_SLICES
    assert "2 slice(s) missing from 8" in str(info.value) and "3 x the 1.25 mm spacing" in str(info.value)


def test_a_localizer_is_named_as_one():
    slices = [_slice(f"s{n}.dcm", 1.25 * n) for n in range(6)] + [_slice("scout.dcm", 0.0, CORONAL, True)]
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes(slices)
    assert info.value.reason == reasons.SERIES_LOCALIZER
    assert "scout.dcm" in str(info.value) and "LOCALIZER" in str(info.value)
    split = volumes.plan_volumes(slices, gaps="split")
    assert [_names(v) for v in split] == [[f"s{n}.dcm" for n in range(6)], ["scout.dcm"]]


def test_a_repeated_position_nothing_tells_apart_fails_naming_both_files():
    slices = [_slice(f"s{n}.dcm", 1.25 * n) for n in range(4)] + [_slice("again.dcm", 2.5)]
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes(slices)
    assert info.value.reason == reasons.SERIES_DUPLICATE_POSITION
    assert "again.dcm" in str(info.value) and "s2.dcm" in str(info.value) and "2.50 mm" in str(info.value)


def _dwi(bvalues=(0.0, 1000.0, 1000.0), positions=4):
    gradients = [None, (1.0, 0.0, 0.0), (0.0, 1.0, 0.0)]
    out = []
    for v, b in enumerate(bvalues):
        for p in range(positions):
            key = (("b", b),) + ((("gradient", gradients[v]),) if gradients[v] else ())
            out.append(_slice(f"v{v}p{p}.dcm", 3.0 * p, key=key, instance=v * positions + p + 1))
    return out


def test_repeated_positions_differing_in_b_value_and_gradient_are_a_4d_series():
    split = volumes.plan_volumes(_dwi()[::-1])
    assert [v.label for v in split] == ["volume=0", "volume=1", "volume=2"]
    assert [_names(v) for v in split] == [[f"v{v}p{p}.dcm" for p in range(4)] for v in range(3)]
    assert {(v.volumes, v.spacing) for v in split} == {(3, 3.0)}
    assert [v.volume_index for v in split] == [0, 1, 2]
    [stacked] = volumes.plan_volumes(_dwi(), four_d="stack")
    assert _names(stacked) == [f"v{v}p{p}.dcm" for v in range(3) for p in range(4)]
    assert (stacked.volumes, stacked.volume_index, stacked.label) == (3, -1, "")


def test_a_4d_series_with_a_slice_missing_says_so():
    slices = [s for s in _dwi() if s.source.rel_path != "v2p1.dcm"]
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes(slices)
    assert info.value.reason == reasons.SERIES_MISSING_SLICES and "4-D" in str(info.value)


def test_a_tilted_gantry_keeps_its_shear_as_one_run():
    # the table moves 2 mm along z per slice while the image plane is tilted: positions step
    # along (0, 0.35, 1.97) etc., not along the normal; every step is the same: one volume
    tilt = np.deg2rad(10)
    orientation = (1.0, 0.0, 0.0, 0.0, float(np.cos(tilt)), float(-np.sin(tilt)))
    slices = [_slice(f"s{n}.dcm", 2.0 * n, orientation, xy=(-150.0, -170.0)) for n in range(5)]
    [volume] = volumes.plan_volumes(slices)
    assert _names(volume) == [f"s{n}.dcm" for n in range(5)]
    lps = patient_space.affine(orientation, [m.slice_info.position for m in volume.members], (0.5, 0.5))
    np.testing.assert_allclose(lps[:3, 0], [0.0, 0.0, 2.0])       # the real step, sheared


def test_a_slice_off_the_line_breaks_the_run():
    slices = [_slice(f"s{n}.dcm", 1.25 * n, xy=(-150.0 + (3.0 if n == 2 else 0.0), -170.0)) for n in range(5)]
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes(slices)
    assert info.value.reason == reasons.SERIES_UNEVEN_SPACING and "off one line" in str(info.value)


@pytest.mark.parametrize("jitter", [0.004, -0.009])
def test_rounding_of_positions_is_within_the_tolerance(jitter):
    zs = [1.25 * n + (jitter if n % 2 else 0.0) for n in range(8)]
    [volume] = volumes.plan_volumes([_slice(f"s{n}.dcm", z) for n, z in enumerate(zs)])
    assert len(volume.members) == 8


def test_even_runs_and_the_tolerance():
    z = lambda zs: [(0.0, 0.0, v) for v in zs]     # noqa: E731
    assert patient_space.even_runs(z([0, 1, 2, 3])) == [(0, 4)]
    assert patient_space.even_runs(z([0, 1, 2, 4, 5, 6])) == [(0, 3), (3, 6)]
    assert patient_space.even_runs(z([-99.5, 103.0, 104.25, 105.5])) == [(0, 1), (1, 4)]
    assert patient_space.even_runs(z([0])) == [(0, 1)]
    assert patient_space.step_tolerance(1.25) == patient_space.GAP_ABSOLUTE
    assert patient_space.step_tolerance(5.0) == pytest.approx(0.05)


def test_a_missing_slice_after_the_second_is_told_as_missing_and_split_there():
    zs = [0.0, 1.0, 3.0, 4.0, 5.0, 6.0]
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes([_slice(f"s{n}.dcm", z) for n, z in enumerate(zs)])
    assert info.value.reason == reasons.SERIES_MISSING_SLICES and "1 slice(s) missing from 7" in str(info.value)
    split = volumes.plan_volumes([_slice(f"s{n}.dcm", z) for n, z in enumerate(zs)], gaps="split")
    assert [_names(v) for v in split] == [["s0.dcm", "s1.dcm"], [f"s{n}.dcm" for n in range(2, 6)]]


def test_two_spacings_are_two_runs():
    zs = [0.0, 5.0, 10.0, 15.0, 20.0, 21.0, 22.0, 23.0]
    split = volumes.plan_volumes([_slice(f"s{n:02d}.dcm", z) for n, z in enumerate(zs)], gaps="split")
    assert [len(v.members) for v in split] == [5, 3] and [v.spacing for v in split] == [5.0, 1.0]


def test_one_rescanned_slice_is_a_repeated_position_naming_it():
    slices = [_slice(f"s{n:02d}.dcm", 1.0 * n, key=(("acquisition", 1.0),)) for n in range(20)]
    slices.append(_slice("rescan.dcm", 7.0, key=(("acquisition", 2.0),)))
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes(slices)
    assert info.value.reason == reasons.SERIES_DUPLICATE_POSITION
    assert "rescan.dcm" in str(info.value) and "s07.dcm" in str(info.value) and "7.00 mm" in str(info.value)


def test_volumes_nothing_but_instance_numbers_tell_apart_are_volumes_in_that_order():
    # a GE DWI's repeated b = 0 ("T2") volumes: equal keys, distinct Instance Numbers
    slices = [_slice(f"v{v}p{p}.dcm", 3.0 * p, key=(("b", 0.0),), instance=p * 2 + v + 1)
              for v in range(2) for p in range(3)]
    split = volumes.plan_volumes(slices)
    assert [_names(v) for v in split] == [[f"v0p{p}.dcm" for p in range(3)], [f"v1p{p}.dcm" for p in range(3)]]


def test_volumes_line_up_by_their_b_value_and_gradient_whatever_the_instance_numbers():
    slices = _dwi()
    # position 1 numbers its volumes the other way round
    slices = [dataclasses.replace(s, slice_info=dataclasses.replace(s.slice_info, instance=100 - s.slice_info.instance))
              if s.source.rel_path.endswith("p1.dcm") else s for s in slices]
    split = volumes.plan_volumes(slices)
    assert [_names(v) for v in split] == [[f"v{v}p{p}.dcm" for p in range(4)] for v in range(3)]


def test_a_slice_without_a_position_fails_the_series_rather_than_hiding_a_gap():
    slices = [_slice(f"s{n}.dcm", 1.25 * n, instance=n + 1) for n in range(5)]
    slices[2] = dataclasses.replace(slices[2], slice_info=SliceInfo(instance=3))
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes(slices)
    assert info.value.reason == reasons.SERIES_UNORDERED and "s2.dcm" in str(info.value)


def test_the_plan_does_not_depend_on_the_order_slices_arrive_in():
    zs = [-99.5, 103.0, 104.25, 105.5, 106.75]
    slices = [_slice(f"s{n}.dcm", z) for n, z in enumerate(zs)]
    messages = set()
    for order in (slices, slices[::-1], slices[2:] + slices[:2]):
        with pytest.raises(ConversionError) as info:
            volumes.plan_volumes(order)
        messages.add(str(info.value))
        assert volumes.plan_volumes(order, gaps="split") == volumes.plan_volumes(slices, gaps="split")
    assert len(messages) == 1


def _mosaic(name: str, z: float, key, instance: int) -> ProbedRecord:
    record = _slice(name, z, key=key, instance=instance)
    return dataclasses.replace(record, spec=ImageSpec(10, 4, 4, 1, "int16"))


def test_multi_slice_files_of_one_series_are_its_volumes():
    mosaics = [_mosaic("b0.dcm", 0.0, (("b", 0.0),), 1), _mosaic("b1000.dcm", 0.0, (("b", 1000.0),), 2)]
    split = volumes.plan_volumes(mosaics[::-1])
    assert [(_names(v), v.volume_index, v.volumes) for v in split] == [(["b0.dcm"], 0, 2), (["b1000.dcm"], 1, 2)]
    [stacked] = volumes.plan_volumes(mosaics, four_d="stack")
    assert _names(stacked) == ["b0.dcm", "b1000.dcm"] and stacked.volume_index == -1


def test_multi_slice_files_at_different_places_are_never_stacked_as_one_volume():
    # fMRI mosaics with the slab moved 0.5 mm (PACE/MoCo): each its own record and affine
    mosaics = [_mosaic(f"t{t}.dcm", 0.5 * t, (("acquisition", float(t + 1)),), t + 1) for t in range(3)]
    split = volumes.plan_volumes(mosaics)
    assert [len(v.members) for v in split] == [1, 1, 1]
    with pytest.raises(ConversionError) as info:
        volumes.plan_volumes(mosaics, four_d="stack")
    assert info.value.reason == reasons.SERIES_UNEVEN_SPACING and "t1.dcm" in str(info.value)


@pytest.mark.parametrize("z", [5.0, 1e300, 1.7e308])
@pytest.mark.parametrize("instances", [False, True])
def test_copies_of_one_slice_at_one_position_are_a_duplicate_position_wherever_it_lies(z, instances):
    """Issue 43, item 4: three slices at one position (1e300 mm, or any) told apart by nothing but
    Instance Number were three one-slice volumes of a '4-D series'; a series of one position has
    no volumes to repeat."""
    import warnings
    slices = [_slice(f"s{n}.dcm", z, orientation=(0.6, 0.8, 0.0, 0.0, 0.0, 1.0), xy=(z, -z),
                     instance=n + 1 if instances else None) for n in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # no overflow warning on the way
        with pytest.raises(ConversionError) as info:
            volumes.plan_volumes(slices, gaps="split")
    assert info.value.reason == reasons.SERIES_DUPLICATE_POSITION, str(info.value)
    assert "s0.dcm" in str(info.value) and "s1.dcm" in str(info.value) and len(str(info.value)) < 400


@pytest.mark.parametrize("zs", [[1e300, 2e300, 3e300], [0.0, 1.0, 1e300], [-1.7e308, 0.0, 1.7e308]])
def test_a_series_at_positions_no_record_holds_is_invalid_value(zs):
    import warnings
    slices = [_slice(f"s{n}.dcm", z, instance=n + 1) for n, z in enumerate(zs)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for gaps in ("fail", "split"):
            with pytest.raises(ConversionError) as info:
                volumes.plan_volumes(slices, gaps=gaps)
            assert info.value.reason == reasons.INVALID_VALUE and "Image Position (Patient)" in str(info.value)


def test_volumes_at_one_position_are_still_told_apart_by_what_defines_a_volume():
    # a 2-D cine: one position, its phases told apart by trigger time (not Instance Number alone)
    slices = [_slice(f"t{n}.dcm", 5.0, key=(("trigger", 40.0 * n),), instance=n + 1) for n in range(3)]
    split = volumes.plan_volumes(slices)
    assert [_names(v) for v in split] == [["t0.dcm"], ["t1.dcm"], ["t2.dcm"]]
