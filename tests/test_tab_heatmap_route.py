"""The `heatmap` route behind the tab's per-layer gradient-norm heatmap, over a real logdir."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_health_plugin.plugin import HealthPlugin
from tb_health_plugin.views.heatmap import depth_key
from tests.eventlogs import write_scalars

PREFIX = "/data/plugin/health"
LAYERS = 4


@pytest.fixture()
def client(tmp_path):
    steps = np.arange(0, 2000)
    series = {"train/loss": (steps, np.linspace(3, 1, steps.size))}
    for layer in range(LAYERS):
        norms = np.full(steps.size, 10.0 ** -(LAYERS - layer))  # early layers vanish
        if layer == 2:
            norms[1234] = 1e6  # one exploding step
        series[f"grad_norm/model.layers.{layer}.attention.wq.weight"] = (steps, norms)
    series["grad_norm/model.tok_embeddings.embedding_weight"] = (steps[::2], np.ones(1000))
    series["grad_norm/lm_head.weight"] = (steps, np.full(steps.size, np.nan))
    write_scalars(tmp_path / "deep", series)
    write_scalars(tmp_path / "flat", {"loss": (steps, np.ones(steps.size))})
    plugin = HealthPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    return Client(application.TensorBoardWSGI([plugin]))


def get(client, query, expect=200):
    response = client.get(f"{PREFIX}/heatmap?{query}")
    assert response.status_code == expect, response.get_data(as_text=True)
    if expect >= 400:  # TensorBoard's answer to a tensorboard.errors.* raised by the route: plain text
        return {"error": response.get_data(as_text=True)}
    return json.loads(response.get_data(as_text=True))


def test_rows_are_ordered_by_depth_embeddings_first_heads_last(client):
    body = get(client, "run=deep&width=100")
    assert body["layers"][0] == "model.tok_embeddings.embedding_weight"
    assert body["layers"][1:5] == [f"model.layers.{i}.attention.wq.weight" for i in range(LAYERS)]
    assert body["layers"][-1] == "lm_head.weight"
    assert body["tags"][1] == "grad_norm/model.layers.0.attention.wq.weight"


def test_buckets_keep_a_one_step_explosion_and_null_for_nonfinite(client):
    body = get(client, "run=deep&width=100")
    assert len(body["steps"]) == 100 and body["downsampled"] and body["end_step"] == 1999
    row = body["values"][body["layers"].index("model.layers.2.attention.wq.weight")]
    assert max(v for v in row if v is not None) == 1e6
    assert row.count(1e6) == 1
    assert all(v is None for v in body["values"][-1])  # lm_head logged only NaN


def test_zoomed_window_is_bucketed_from_the_full_data(client):
    body = get(client, "run=deep&width=10&start=1230&end=1239")
    assert body["steps"] == list(range(1230, 1240))
    row = body["values"][body["layers"].index("model.layers.2.attention.wq.weight")]
    assert row[4] == 1e6 and row[3] == pytest.approx(1e-2)


def test_run_without_per_layer_norms_has_no_rows_and_bad_width_is_rejected(client):
    assert get(client, "run=flat")["layers"] == []
    assert "error" in get(client, "run=deep&width=5", expect=400)
    assert "error" in get(client, "run=nope", expect=404)


def test_depth_key_orders_blocks_numerically():
    names = ["layers.10.w", "layers.2.w", "embed.w", "head.w"]
    assert sorted(names, key=depth_key) == ["embed.w", "layers.2.w", "layers.10.w", "head.w"]
