"""``--spacing auto``'s rule (transforms.images.spacing.auto_spacing): nnU-Net v2's full-resolution
target spacing (nnunetv2/experiment_planning/experiment_planners/default_experiment_planner.py,
``ExperimentPlanner.determine_fullres_target_spacing``), pure, on spacings and shapes in array order
``(depth, height, width)``, answered in the option's ``(x, y, z)``."""
import itertools
import types

import numpy as np
import pytest

from dcm2tfrecord.transforms.images import spacing


def _zyx(result):
    """The answer back in array order, to compare with nnU-Net's (which keeps its axes')."""
    return spacing.axis_order(result.target)


ISOTROPIC = [((1.0, 0.8, 0.7), (100, 200, 210)), ((1.5, 0.9, 0.9), (90, 180, 190)),
             ((1.2, 0.7, 0.8), (110, 190, 200))]
ANISOTROPIC = [((s, 1.0, 1.0), (12, 256, 256)) for s in (5.0, 6.0, 8.0, 9.0, 10.0, 10.0)]
FLOORED = [((0.5, 1.2, 1.2), (10, 300, 300))] * 2 + [((4.0, 1.2, 1.2), (10, 300, 300))] * 8
IN_PLANE = [((1.0, 1.0, s), (300, 300, 20)) for s in (4.0, 5.0, 6.0, 7.0, 8.0)]


def test_isotropic_set_takes_the_per_axis_medians():
    result = spacing.auto_spacing(ISOTROPIC)
    assert result.target == pytest.approx((0.8, 0.8, 1.2))     # x, y, z
    assert result.median == result.target
    assert not result.anisotropic and result.records == 3


def test_anisotropic_set_takes_the_tenth_percentile_of_the_coarse_axis():
    # slice steps 5..10 mm, in-plane 1 mm, few slices: the 10th percentile of the steps
    steps = [s for (s, _, _), _ in ANISOTROPIC]
    result = spacing.auto_spacing(ANISOTROPIC)
    assert result.anisotropic
    assert result.median[2] == pytest.approx(np.percentile(steps, 50))
    assert result.target == pytest.approx((1.0, 1.0, np.percentile(steps, 10)))


def test_anisotropic_spacing_alone_keeps_the_median():
    # coarse slices but as many of them as rows: the voxels are not anisotropic
    samples = [((5.0, 1.0, 1.0), (256, 256, 256)), ((6.0, 1.0, 1.0), (256, 256, 256))]
    result = spacing.auto_spacing(samples)
    assert not result.anisotropic
    assert result.target == pytest.approx((1.0, 1.0, 5.5))


def test_the_coarse_axis_never_drops_below_the_others():
    # median step 4 > 3 x 1.2 but its 10th percentile (0.5) below the in-plane 1.2: 1.2 + 1e-5
    result = spacing.auto_spacing(FLOORED)
    assert result.anisotropic
    assert result.target[2] == pytest.approx(1.2 + 1e-5, abs=1e-9)
    assert result.target[2] > 1.2


def test_the_coarse_axis_may_be_in_plane():
    # the worst axis is the columns' (nnU-Net picks argmax, whichever axis it is)
    result = spacing.auto_spacing(IN_PLANE)
    assert result.anisotropic
    assert result.target == pytest.approx((np.percentile([4.0, 5.0, 6.0, 7.0, 8.0], 10), 1.0, 1.0))


def test_the_answer_does_not_depend_on_the_order_of_the_records():
    rng = np.random.default_rng(5)
    samples = [((float(rng.uniform(3, 8)), float(rng.uniform(0.6, 1.0)), float(rng.uniform(0.6, 1.0))),
                (int(rng.integers(10, 30)), 256, 256)) for _ in range(7)]
    answers = {spacing.auto_spacing(order) for order in itertools.permutations(samples)}
    assert len(answers) == 1


def test_no_record_has_no_target():
    assert spacing.auto_spacing([]).target is None
    assert spacing.auto_spacing_of_slices([]).target is None


def test_slices_only_take_their_in_plane_medians():
    result = spacing.auto_spacing_of_slices([(0.7, 0.6), (0.9, 0.8), (0.8, 0.7)])
    assert result.from_slices
    assert result.target == pytest.approx((0.7, 0.8, 0.8))


def test_parse_accepts_auto():
    assert spacing.parse_spacing("auto") == spacing.AUTO
    assert spacing.parse_spacing(" AUTO ") == spacing.AUTO
    assert spacing.parse_spacing("1,1,2.5") == (1.0, 1.0, 2.5)
    with pytest.raises(ValueError, match="or auto"):
        spacing.parse_spacing("automatic")


def _nnunet_target(samples):
    planners = pytest.importorskip("nnunetv2.experiment_planning.experiment_planners.default_experiment_planner")
    planner = types.SimpleNamespace(
        overwrite_target_spacing=None, anisotropy_threshold=spacing.ANISOTROPY,
        dataset_fingerprint={"spacings": [list(s) for s, _ in samples],
                             "shapes_after_crop": [list(shape) for _, shape in samples]})
    return planners.ExperimentPlanner.determine_fullres_target_spacing(planner)


def _random_set(seed: int) -> list:
    """A random set, half of them anisotropic (one axis coarse and short) to reach both branches."""
    rng = np.random.default_rng(seed)
    axis, coarse = int(rng.integers(0, 3)), bool(seed % 2)
    samples = []
    for _ in range(int(rng.integers(1, 15))):
        steps = [float(rng.uniform(0.5, 1.2)) for _ in range(3)]
        sizes = [int(rng.integers(100, 300)) for _ in range(3)]
        if coarse:
            steps[axis] *= float(rng.uniform(1.0, 12.0))
            sizes[axis] = int(rng.integers(3, 40))
        samples.append((tuple(steps), tuple(sizes)))
    return samples


@pytest.mark.parametrize("samples", [ISOTROPIC, ANISOTROPIC, FLOORED, IN_PLANE] + [_random_set(s) for s in range(24)])
def test_equals_nnunetv2_determine_fullres_target_spacing_where_installed(samples):
    """nnunetv2's own planner function (the test extra installs nnunetv2; skipped where it is not)."""
    expected = _nnunet_target(samples)
    np.testing.assert_allclose(_zyx(spacing.auto_spacing(samples)), expected, rtol=1e-12)


def test_the_random_sets_reach_both_branches():
    results = [spacing.auto_spacing(_random_set(s)) for s in range(24)]
    assert 3 <= sum(r.anisotropic for r in results) <= 21
