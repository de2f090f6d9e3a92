"""Every route of the Health plugin, attacked through TensorBoard's own WSGI app.

Each route in `http_api.md` (and each static file) answers hostile parameters with TensorBoard's
error answer (400 bad parameter, 404 unknown run or tag, as plain text), never a path outside the logdir, never a
method other than GET, never a change on disk, and never a NaN/Infinity literal. Hostile run
and tag names (HTML, quotes, unicode) round-trip exactly through the JSON.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from urllib.parse import quote, urlencode

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_health_plugin.plugin import STATIC_DIR, HealthPlugin
from tests.eventlogs import write_scalars
from tests.readers_fixtures import event, legacy_histogram_value, scalar_value, write_events

PREFIX = "/data/plugin/health"
API_DOC = Path(__file__).resolve().parents[1] / "tb_health_plugin" / "http_api.md"
XSS_RUN = "<img src=x onerror=alert(1)>"
ODD_RUNS = [XSS_RUN, "ünïcødé run/with space", "quote\"and'apos&amp;"]
ODD_TAG = "weird/</script>\"'&<b>ü"
SECRET_TEXT = "top-secret-outside-the-logdir"
STEPS = np.arange(200)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, Path]:
    """(logdir, a sibling folder outside it holding event files and a secret)."""
    root = tmp_path_factory.mktemp("http")
    logdir, outside = root / "logs", root / "outside"
    loss = 2.0 / (1 + STEPS / 20.0)
    bad = loss.copy()
    bad[[50, 120]] = [np.nan, np.inf]
    bad[121] = -np.inf
    write_scalars(logdir / "exp" / "rank_0", {
        "train/loss": (STEPS, bad), "train/grad_norm": (STEPS, np.where(STEPS == 60, np.nan, 1.0)),
        "grad_norm/layers.0.w": (STEPS, np.full(200, np.inf)), "grad_norm/layers.1.w": (STEPS, np.ones(200)),
        ODD_TAG: (STEPS, loss),
    })
    data = np.linspace(-1.0, 1.0, 100)
    write_events(logdir / "exp" / "rank_0", [event(5, legacy_histogram_value("grad/w", data, np.linspace(-1, 1, 6)))])
    for name in ODD_RUNS:
        write_scalars(logdir / name, {"loss": (STEPS, loss)})
    write_scalars(outside, {"loss": (STEPS, loss)})
    (outside / "secret.txt").write_text(SECRET_TEXT)
    write_events(logdir / "only_text", [event(1, scalar_value("x", float("nan")))])
    return logdir, outside


@pytest.fixture(scope="module")
def client(tree):
    logdir, _ = tree
    plugin = HealthPlugin(base_plugin.TBContext(logdir=str(logdir)))
    yield Client(application.TensorBoardWSGI([plugin]))
    if plugin._service is not None:
        plugin._service.stop()


def reject_constant(name: str):
    raise AssertionError(f"non-standard JSON literal {name} in a response")


def strict_json(text: str):
    return json.loads(text, parse_constant=reject_constant)


def get(client, path: str, expect: int = 200):
    response = client.get(PREFIX + path)
    text = response.get_data(as_text=True)
    assert response.status_code == expect, f"{path}: {response.status_code} {text[:300]}"
    if expect >= 400:  # raised as tensorboard.errors.*: TensorBoard answers with the message as text
        assert response.headers["Content-Type"].startswith("text/plain"), path
        assert response.headers["X-Content-Type-Options"] == "nosniff", path
        assert text.strip(), f"{path}: no message"
        return {"error": text}
    assert response.headers["Content-Type"].startswith("application/json"), path
    return strict_json(text)


def query(route: str, **params) -> str:
    return f"/{route}?" + urlencode(params, quote_via=quote)


def documented_routes() -> set[str]:
    return {match.group(1) for match in re.finditer(r"^## `(\w+)", API_DOC.read_text(), re.MULTILINE)}


RUN_ROUTES = ["report", "tags", "series", "heatmap"]  # every route taking a run


def test_this_file_covers_every_documented_route():
    assert documented_routes() == {"runs", *RUN_ROUTES}


def tree_state(root: Path) -> dict[str, tuple[int, int, int]]:
    state = {}
    for folder, _, names in os.walk(root):
        for name in [".", *names]:
            path = os.path.join(folder, name)
            info = os.stat(path)
            state[path] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return state


def test_routes_serve_strict_json_and_hostile_names_round_trip(client, tree):
    runs = {r["run"]: r for r in get(client, "/runs")["runs"]}
    assert set(ODD_RUNS) <= set(runs) and "exp/rank_0" in runs
    assert not any(name.startswith("..") or name.startswith("/") for name in runs)
    for name in runs:
        report = get(client, query("report", run=name))
        assert [r["run"] for r in report["runs"]] == [name]
        tags = get(client, query("tags", run=name))
        assert tags["run"] == name
        for tag in tags["scalars"]:
            series = get(client, query("series", run=name, tag=tag, width=10))
            assert (series["run"], series["tag"]) == (name, tag)
        get(client, query("heatmap", run=name, width=10))
    tags = get(client, query("tags", run="exp/rank_0"))
    assert ODD_TAG in tags["scalars"] and "grad/w" in tags["histograms"]
    series = get(client, query("series", run="exp/rank_0", tag="train/loss"))
    assert {(p["step"], p["value"]) for p in series["nonfinite"]} == {(50, "nan"), (120, "inf"), (121, "-inf")}
    assert all(v is None or math.isfinite(v) for v in series["min"] + series["max"] + series["mean"])
    heatmap = get(client, query("heatmap", run="exp/rank_0", width=10))
    assert heatmap["layers"] == ["layers.0.w", "layers.1.w"]
    assert all(v is None for v in heatmap["values"][0])  # every norm of that layer is infinite


TRAVERSALS = [
    "..", "../outside", "../../etc", "exp/../../outside", "/etc", "/etc/passwd", "//etc", "exp/rank_0/..",
    "%2e%2e/outside", "..%2foutside", "%2e%2e%2foutside", "exp/rank_0\x00", "exp\x00/rank_0", "\x00",
    "./exp/rank_0", "exp//rank_0", "exp/rank_0/", "exp\\rank_0", "..\\outside", ".", "~", "~root",
    "exp/rank_0/events.out.tfevents", XSS_RUN + "/..", " exp/rank_0", "exp/rank_0 ",
]


def test_runs_outside_or_beside_the_logdir_are_unknown(client, tree):
    logdir, outside = tree
    traversals = [*TRAVERSALS, str(outside), str(logdir / "exp" / "rank_0"), os.path.relpath(outside, logdir)]
    for route in RUN_ROUTES:
        for run in traversals:
            params = {"run": run, "tag": "loss"} if route == "series" else {"run": run}
            body = get(client, query(route, **params), expect=404)
            assert "unknown run" in body["error"]
            assert SECRET_TEXT not in json.dumps(body)


def test_raw_encoded_traversal_in_the_url(client):
    paths = [
        "/report?run=%2E%2E%2Foutside", "/report?run=%252e%252e%252foutside", "/report?run=..%00",
        "/series?run=exp%2Frank_0&tag=..%2F..%2Fsecret.txt", "/series?run=exp/rank_0&tag=%00",
        "/tags?run=%C0%AE%C0%AE%2Foutside", "/report?run=%FF%FE",
    ]
    for path in paths:
        response = client.get(PREFIX + path)
        assert response.status_code == 404, path
        assert SECRET_TEXT not in response.get_data(as_text=True)
        assert response.headers["Content-Type"].startswith("text/plain"), path


def test_static_files_do_not_traverse(client):
    for name in ("index.js", "index.css"):
        response = client.get(f"{PREFIX}/{name}")
        assert response.status_code == 200 and response.get_data() == (STATIC_DIR / name).read_bytes()
    for path in ("/../../../etc/passwd", "/index.js/../../../outside/secret.txt", "/%2e%2e/%2e%2e/outside/secret.txt",
                 "/..%2f..%2foutside%2fsecret.txt", "/static/../plugin.py", "/plugin.py", "/index.js%00.css"):
        response = client.get(PREFIX + path)
        body = response.get_data(as_text=True)
        assert response.status_code == 404, path
        assert SECRET_TEXT not in body and "class HealthPlugin" not in body and "root:" not in body


BAD_PARAMETERS = [
    ("report", {}), ("tags", {}), ("series", {"run": "exp/rank_0"}), ("series", {"tag": "loss"}), ("heatmap", {}),
    ("report", {"run": ""}), ("series", {"run": "exp/rank_0", "tag": ""}),
    *[("series", {"run": "exp/rank_0", "tag": "train/loss", name: value})
      for name in ("width", "start", "end")
      for value in ("abc", "1.5", "1e3", "0x10", "NaN", "inf", "--1", "1 2", "\x00")],
    *[("series", {"run": "exp/rank_0", "tag": "train/loss", "width": value})
      for value in ("9", "-1", "0", "20001", "9" * 400)],
    *[("heatmap", {"run": "exp/rank_0", name: value})
      for name in ("width", "start", "end") for value in ("abc", "1.5", "\x00")],
    *[("heatmap", {"run": "exp/rank_0", "width": value}) for value in ("9", "2001", "-5", "9" * 400)],
]


@pytest.mark.parametrize(("route", "params"), BAD_PARAMETERS, ids=lambda v: repr(v)[:40])
def test_bad_parameters_are_400_with_a_message(client, route, params):
    get(client, query(route, **params), expect=400)


EXTREME_BUT_VALID = [
    ("series", {"start": "-" + "9" * 30}), ("series", {"end": "9" * 30}), ("series", {"start": "9" * 30}),
    ("series", {"start": "100", "end": "10"}), ("series", {"start": str(2**63), "end": str(2**64)}),
    ("heatmap", {"start": "-" + "9" * 30, "end": "9" * 30}), ("heatmap", {"start": "150", "end": "20"}),
    ("series", {"width": "10", "start": "-1", "end": "-1"}),
]


@pytest.mark.parametrize(("route", "params"), EXTREME_BUT_VALID, ids=lambda v: repr(v)[:40])
def test_out_of_range_step_windows_answer_json_never_a_crash(client, route, params):
    base = {"run": "exp/rank_0", "tag": "train/loss"} if route == "series" else {"run": "exp/rank_0"}
    response = client.get(PREFIX + query(route, **base, **params))
    assert response.status_code in (200, 400), response.get_data(as_text=True)[:300]
    if response.status_code == 200:
        strict_json(response.get_data(as_text=True))


def test_unknown_tag_is_404(client):
    for tag in ("nope", "../train/loss", "train/loss\x00", "TRAIN/LOSS"):
        assert "unknown tag" in get(client, query("series", run="exp/rank_0", tag=tag), expect=404)["error"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_only_get_is_accepted_and_nothing_changes_on_disk(client, tree, method):
    logdir, outside = tree
    before = tree_state(logdir.parent)
    paths = ["/runs", *(query(route, run="exp/rank_0", tag="train/loss") for route in RUN_ROUTES),
             "/index.js", "/index.css"]
    for path in paths:
        response = client.open(PREFIX + path, method=method, data=b"run=..%2Foutside",
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert response.status_code in (400, 403, 405), f"{method} {path}: {response.status_code}"
        assert SECRET_TEXT not in response.get_data(as_text=True)
    for path in paths:  # GETs are read-only too
        client.get(PREFIX + path)
    assert tree_state(logdir.parent) == before
