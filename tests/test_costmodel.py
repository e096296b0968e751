"""The cost model learns a ranking (held-out workloads) and survives save/load."""

from __future__ import annotations

import numpy as np
import pytest

from xcomp.costmodel import CostModel, ranking_quality, relevance
from xcomp.costmodel.features import LENGTH, knob_vector


def synthetic(n_groups=30, per_group=24, seed=0):
    """Latency depends on a few features non-linearly, as tile sizes do: the model must find which."""
    rng = np.random.default_rng(seed)
    feats, lats, groups = [], [], []
    for g in range(n_groups):
        base = rng.uniform(0.5, 50)  # workloads differ in absolute time by orders of magnitude
        for _ in range(per_group):
            x = rng.uniform(0, 1, LENGTH).astype(np.float32)
            lat = base * (1 + 3 * (x[0] - 0.3) ** 2 + 2 * x[5] * x[9]) * rng.uniform(0.97, 1.03)
            if rng.uniform() < 0.05:
                lat = np.inf  # failed candidate
            feats.append(x)
            lats.append(lat)
            groups.append(f"w{g}")
    return np.stack(feats), np.asarray(lats), groups


def test_relevance_labels():
    np.testing.assert_allclose(relevance(np.array([2.0, 1.0, np.inf, 4.0])), [0.5, 1.0, 0.0, 0.25])


def test_ranks_held_out_workloads_better_than_chance(tmp_path):
    x, y, g = synthetic()
    train = np.array([int(k[1:]) < 24 for k in g])
    model = CostModel(seed=0).fit(x[train], y[train], [k for k, t in zip(g, train) if t])
    test_groups = [k for k, t in zip(g, train) if not t]
    quality = ranking_quality(model.predict(x[~train]), y[~train], test_groups)
    rng = np.random.default_rng(1)
    chance = ranking_quality(rng.uniform(size=(~train).sum()), y[~train], test_groups)
    assert quality["workloads"] == 6
    assert quality["spearman"] > 0.6 > chance["spearman"] + 0.3
    assert quality["top1_vs_best"] > 0.85

    model.save(tmp_path / "cm.json")
    again = CostModel.load(tmp_path / "cm.json")
    np.testing.assert_allclose(again.predict(x[~train]), model.predict(x[~train]), rtol=1e-6)


def test_untrained_model_has_no_preference():
    assert not CostModel().predict(np.zeros((3, LENGTH))).any()
    with pytest.raises(ValueError):
        CostModel().save("unused.json")


def test_knob_vector_is_order_independent():
    assert np.array_equal(knob_vector({"mr": 4, "pack_b": True}), knob_vector({"pack_b": True, "mr": 4}))


def test_a_knob_keeps_its_feature_slot_when_a_template_gains_another():
    """A trained model reads each knob where it learned it: adding ci_chunk to the conv template (v2 features
    packed knobs in name order) may not move co_block's value into another knob's slot."""
    before = knob_vector({"co_block": 4, "oh_block": 2, "order": "co_outer"})
    after = knob_vector({"ci_chunk": 8, "co_block": 4, "oh_block": 2, "order": "co_outer"})
    assert np.count_nonzero(before != after) == 1 and np.count_nonzero(before) == 3


def test_a_knob_no_template_declares_is_refused():
    with pytest.raises(ValueError, match="'new_knob' is declared by no template"):
        knob_vector({"co_block": 4, "new_knob": 2})


def test_knob_features_are_the_same_in_every_process():
    """A saved (or shipped) model must see the values it was trained on: categorical knobs may not go through
    Python's per-process salted hash()."""
    import json
    import os
    import subprocess
    import sys

    from xcomp.costmodel import knob_vector

    code = "from xcomp.costmodel import knob_vector; print(knob_vector({'order': 'co_outer', 'pad': 'stage'}).tolist())"
    here = knob_vector({"order": "co_outer", "pad": "stage"}).tolist()
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        assert json.loads(out) == here


def test_the_declared_knobs_keep_the_slots_the_shipped_model_learned():
    """Feature slots come from the templates' knob declarations; the layout of FEATURES_VERSION 3, which the
    shipped model was trained on, must not move. Knobs declared since take slots after it."""
    from xcomp.costmodel.features import knob_slots

    learned = ("block_x", "block_y", "ci_chunk", "co_block", "frags_m", "frags_n", "k_frags", "micro_k", "micro_x",
               "micro_y", "mr", "nr", "oh_block", "order", "ow_block", "pack_b", "pad", "parallel", "pixel_block",
               "unroll", "unroll_k", "unroll_kw", "vector", "vectorize", "warps_m", "warps_n", "tile_block",
               "prefetch", "stages")
    slots = knob_slots()
    assert {name: slots[name] for name in learned} == {name: slot for slot, name in enumerate(learned)}
    assert all(slot >= len(learned) for name, slot in slots.items() if name not in learned)


def test_two_declarations_of_one_knob_must_agree_on_its_slot(monkeypatch):
    from xcomp.costmodel.features import knob_slots
    from xcomp.schedules.cpu.matmul import MatmulTemplate
    from xcomp.schedules.template import Knob

    monkeypatch.setattr(MatmulTemplate, "knobs", (*MatmulTemplate.knobs, Knob("co_block", int, 30, "a clash")))
    with pytest.raises(ValueError, match="'co_block' is declared with slots"):
        knob_slots.__wrapped__()
    monkeypatch.setattr(MatmulTemplate, "knobs", (*MatmulTemplate.knobs[:-1], Knob("new", int, 10, "mr's slot")))
    with pytest.raises(ValueError, match="distinct"):
        knob_slots.__wrapped__()
