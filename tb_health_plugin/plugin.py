"""The Health tab's TensorBoard plugin: routes only.

Each route parses its request, asks `HealthService` (readers + analysis) and responds JSON. It
reads the logdir itself rather than TensorBoard's multiplexer, which is `None` under the Rust data
server (`--load_fast=true`), and which keeps only a sample of each series. Routes are specified in
`http_api.md`.
"""

from __future__ import annotations

import json
import math
import mimetypes
import os
from functools import wraps
from pathlib import Path
from typing import Any

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_health_plugin.contract import SEVERITY_RANK, job_of
from tb_health_plugin.i18n import LANGUAGES, kind_labels
from tb_health_plugin.readers.discovery import MINDSPORE, TFEVENTS, event_file_format
from tb_health_plugin.roles import resolve_roles
from tb_health_plugin.service import HealthService, UnknownRun
from tb_health_plugin.views import heatmap as heatmap_view
from tb_health_plugin.views import series as series_view

PLUGIN_NAME = "health"
TAB_NAME = "Health"
STATIC_DIR = Path(__file__).resolve().parent / "static"


class BadRequest(ValueError):
    pass


def json_body(payload: Any) -> str:
    """Strict JSON; should a non-finite number hide anywhere (a wall time of `inf` in a log, an
    evidence value), it is sent as null instead of failing the whole response."""
    try:
        return json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(_finite_or_none(payload), allow_nan=False, separators=(",", ":"))


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_none(item) for item in value]
    return value


def source_format(logdir: str, run: str) -> str | None:
    """`mindspore` when the run's folder holds MindSpore summary files (TensorBoard's own Scalars tab
    cannot read them, so the tab suggests `tb-health convert`), `tfevents` when it holds only
    TensorBoard event files, None when the folder cannot be listed (e.g. a remote logdir)."""
    folder = logdir if run == "." else os.path.join(logdir, *run.split("/"))
    try:
        kinds = {event_file_format(name) for name in os.listdir(folder)}
    except OSError:
        return None
    return MINDSPORE if MINDSPORE in kinds else TFEVENTS if TFEVENTS in kinds else None


def _json(request, payload: Any, code: int = 200):
    return http_util.Respond(request, json_body(payload), "application/json", code=code)


def _route(handler):
    """Turn a handler's exceptions into JSON errors with the right status code."""

    @wraps(handler)
    @wrappers.Request.application
    def wrapped(self, request):
        if request.method != "GET":
            return _json(request, {"error": "only GET is supported"}, 405)
        try:
            return handler(self, request)
        except UnknownRun as error:
            return _json(request, {"error": f"unknown run: {error.args[0]}"}, 404)
        except BadRequest as error:
            return _json(request, {"error": str(error)}, 400)

    return wrapped


def _int_arg(request, name: str, default: int | None, low: int | None = None, high: int | None = None):
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {raw!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{name} must be between {low} and {high}, got {value}")
    return value


def _required(request, name: str) -> str:
    value = request.args.get(name)
    if value is None or value == "":
        raise BadRequest(f"missing parameter: {name}")
    return value


def _lang_arg(request) -> str:
    """`?lang=`: the language the findings are written in (default English)."""
    lang = request.args.get("lang") or LANGUAGES[0]
    if lang not in LANGUAGES:
        raise BadRequest(f"lang must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    return lang


def run_summary(report: dict[str, Any], signals: dict[str, str], last_update: float | None) -> dict[str, Any]:
    findings = report["findings"]
    counts = {severity: 0 for severity in SEVERITY_RANK}
    for finding in findings:
        counts[finding["severity"]] += 1
    alarms = [f for f in findings if f["severity"] != "info"]  # info is context, never "worst"
    worst = max(alarms, key=lambda f: (SEVERITY_RANK[f["severity"]], -f["step"]), default=None)
    return {
        "run": report["run"],
        "status": report["status"],
        "counts": counts,
        "worst": {k: worst[k] for k in ("kind", "severity", "step", "message")} if worst else None,
        "kinds": sorted({f["kind"] for f in findings}),
        "steps": report["steps"],
        "last_update": last_update,
        "signals": signals,
    }


class HealthPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        self._logdir = context.logdir or ""
        self._service = HealthService(self._logdir) if self._logdir else None

    def is_active(self) -> bool:
        # Cheap on purpose: TensorBoard calls this often; the tab itself says when there is no data.
        return self._service is not None

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=TAB_NAME)

    def get_plugin_apps(self):
        apps = {
            "/runs": self._serve_runs,
            "/report": self._serve_report,
            "/tags": self._serve_tags,
            "/series": self._serve_series,
            "/heatmap": self._serve_heatmap,
        }
        if STATIC_DIR.is_dir():
            for path in STATIC_DIR.iterdir():
                if path.is_file():
                    apps["/" + path.name] = self._static_file(path)
        return apps

    def _static_file(self, path: Path):
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if path.suffix == ".js":
            content_type = "application/javascript"

        @wrappers.Request.application
        def serve(request):
            if request.method not in ("GET", "HEAD"):
                return _json(request, {"error": "only GET is supported"}, 405)
            return http_util.Respond(request, path.read_bytes(), content_type)

        return serve

    def _require_service(self) -> HealthService:
        if self._service is None:
            raise BadRequest("TensorBoard was started without --logdir; the Health tab needs one")
        return self._service

    @_route
    def _serve_runs(self, request):
        lang = _lang_arg(request)
        if self._service is None:
            return _json(request, {"logdir": "", "language": lang, "kinds": kind_labels(lang), "runs": []})

        reports = self._service.reports(lang=lang)
        runs = []
        for name in sorted(reports):
            try:
                data = self._service.run_data(name)
            except UnknownRun:
                continue  # deleted since it was listed
            roles = resolve_roles(data.scalars.keys(), data.histograms.keys())
            report = reports[name] or {"run": name, "status": "pending", "steps": None, "findings": []}
            summary = run_summary(report, roles.scalars, data.last_wall_time or None)
            summary["job"] = job_of(name)
            summary["source"] = source_format(self._logdir, name)
            runs.append(summary)
        return _json(request, {"logdir": self._logdir, "language": lang, "kinds": kind_labels(lang), "runs": runs})

    @_route
    def _serve_report(self, request):
        service = self._require_service()
        run = _required(request, "run")
        lang = _lang_arg(request)
        report = service.report(run, lang)
        return _json(request, {"version": 1, "logdir": self._logdir, "language": lang, "runs": [report]})

    @_route
    def _serve_tags(self, request):
        service = self._require_service()
        run = _required(request, "run")
        data = service.run_data(run)
        roles = resolve_roles(data.scalars.keys(), data.histograms.keys())
        return _json(
            request,
            {
                "run": run,
                "scalars": sorted(data.scalars),
                "histograms": sorted(data.histograms),
                "signals": roles.scalars,
                "per_parameter": roles.per_parameter,
            },
        )

    @_route
    def _serve_series(self, request):
        service = self._require_service()
        run = _required(request, "run")
        tag = _required(request, "tag")
        width = _int_arg(request, "width", series_view.DEFAULT_WIDTH, series_view.MIN_WIDTH, series_view.MAX_WIDTH)
        start = _int_arg(request, "start", None)
        end = _int_arg(request, "end", None)
        data = service.run_data(run)
        if tag not in data.scalars:
            return _json(request, {"error": f"unknown tag for run {run}: {tag}"}, 404)
        payload = {"run": run, "tag": tag}
        payload.update(series_view.envelope(data.scalars[tag], width, start, end))
        return _json(request, payload)

    @_route
    def _serve_heatmap(self, request):
        service = self._require_service()
        run = _required(request, "run")
        width = _int_arg(request, "width", heatmap_view.DEFAULT_WIDTH, heatmap_view.MIN_WIDTH, heatmap_view.MAX_WIDTH)
        start = _int_arg(request, "start", None)
        end = _int_arg(request, "end", None)

        def render(data) -> str:
            roles = resolve_roles(data.scalars.keys(), data.histograms.keys())
            per_param = {
                param: (tag, data.scalars[tag]) for param, tag in roles.per_parameter.get("param_grad_norm", {}).items()
            }
            payload = {"run": run}
            payload.update(heatmap_view.heatmap(per_param, width, start, end))
            return json_body(payload)

        # With 100k parameters a heatmap takes seconds and megabytes: rendered once per data version.
        body = service.view(run, "heatmap", (width, start, end), render)
        return http_util.Respond(request, body, "application/json")
