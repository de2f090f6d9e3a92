"""The Health tab's TensorBoard plugin: routes only.

Each route parses its request, asks `HealthService` (readers, analysis, roles, summaries and
their caches) and responds JSON. Errors are raised as TensorBoard's `errors.*`
(`InvalidArgumentError` 400, `NotFoundError` 404, `MethodNotAllowedError` 405), which
TensorBoard's application turns into HTTP answers for every plugin alike. The plugin reads the
logdir itself rather than TensorBoard's multiplexer, which is `None` under the Rust data server
(`--load_fast=true`), and which keeps only a sample of each series. Routes are specified in
`http_api.md`.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorboard import errors
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_health_plugin.analysis.render import kind_labels
from tb_health_plugin.answers import json_body
from tb_health_plugin.i18n import LANGUAGES
from tb_health_plugin.service import HealthService
from tb_health_plugin.views import envelope as envelope_view
from tb_health_plugin.views import heatmap as heatmap_view
from tb_health_plugin.views.overview import PENDING
from tb_health_plugin.views.response_cache import ResponseCache
from tb_health_plugin.worker import WorkerService

PLUGIN_NAME = "health"
TAB_NAME = "Health"
STATIC_DIR = Path(__file__).resolve().parent / "static"


class MethodNotAllowedError(errors.PublicError):
    """Every route is read-only: anything but GET (or HEAD for static files) is a 405."""

    http_code = 405

    def __init__(self, allowed: tuple[str, ...] = ("GET",)) -> None:
        super().__init__(f"Method not allowed: only {', '.join(allowed)} is supported")
        self.headers.append(("Allow", ", ".join(allowed)))


EXPORT_TYPES = {"html": "text/html", "md": "text/markdown"}  # /export formats and their types

def _json(request, payload: Any):
    return http_util.Respond(request, json_body(payload), "application/json")


def _read_only(handler: Callable, methods: tuple[str, ...] = ("GET",)):
    """A WSGI app of `handler(request)` that refuses other methods (errors go to TensorBoard)."""

    @wrappers.Request.application
    def app(request):
        if request.method not in methods:
            raise MethodNotAllowedError(methods)
        return handler(request)

    return app


def _int_arg(request, name: str, default: int | None, low: int | None = None, high: int | None = None):
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise errors.InvalidArgumentError(f"{name} must be an integer, got {raw!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise errors.InvalidArgumentError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _required(request, name: str) -> str:
    value = request.args.get(name)
    if value is None or value == "":
        raise errors.InvalidArgumentError(f"missing parameter: {name}")
    return value


def _lang_arg(request) -> str:
    """`?lang=`: the language the findings are written in (default English)."""
    lang = request.args.get("lang") or LANGUAGES[0]
    if lang not in LANGUAGES:
        raise errors.InvalidArgumentError(f"lang must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    return lang


def analysis_status(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """`analysing` while a run listed waits for its first analysis (`pending`) or has newer data
    being analysed (`analysing`), with how many runs are done; `idle` once every run is current."""
    done = sum(1 for run in runs if run["status"] != PENDING and not run.get("analysing"))
    return {"state": "analysing" if done < len(runs) else "idle", "done": done, "total": len(runs)}


class HealthPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext, worker: bool | None = None):
        """`worker`: read and analyse in a worker process (`worker.py`), which is the default
        when TensorBoard loads the plugin (its context has flags); in this interpreter when the
        plugin is built bare (a script, a test of the routes), unless asked. The worker starts
        here, with TensorBoard: the logdir is read while TensorBoard loads it too, not from the
        tab's first request on."""
        self._logdir = context.logdir or ""
        if worker is None:
            worker = context.flags is not None
        self._service: HealthService | WorkerService | None = None
        self._runs_bodies = ResponseCache()  # the overview's JSON, rendered once per overview
        if self._logdir:
            self._service = WorkerService(self._logdir) if worker else HealthService(self._logdir)
            if worker:
                self._service.start()

    def is_active(self) -> bool:
        # Cheap on purpose: TensorBoard calls this often; the tab itself says when there is no data.
        return self._service is not None

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=TAB_NAME)

    def get_plugin_apps(self):
        routes = {
            "/runs": self._serve_runs,
            "/report": self._serve_report,
            "/tags": self._serve_tags,
            "/series": self._serve_series,
            "/heatmap": self._serve_heatmap,
            "/export": self._serve_export,
        }
        apps = {path: _read_only(handler) for path, handler in routes.items()}
        if STATIC_DIR.is_dir():
            for path in STATIC_DIR.iterdir():
                if path.is_file():
                    apps["/" + path.name] = _read_only(self._static_file(path), ("GET", "HEAD"))
        return apps

    @staticmethod
    def _static_file(path: Path):
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if path.suffix == ".js":
            content_type = "application/javascript"
        return lambda request: http_util.Respond(request, path.read_bytes(), content_type)

    def _require_service(self) -> HealthService | WorkerService:
        if self._service is None:
            raise errors.InvalidArgumentError("TensorBoard was started without --logdir; the Health tab needs one")
        return self._service

    def _serve_runs(self, request):
        lang = _lang_arg(request)
        if self._service is None:
            return _json(request, {"logdir": "", "language": lang, "kinds": kind_labels(lang), "runs": [],
                                   "jobs": [], "config": None, "storage": None, "analysis": analysis_status([]),
                                   "worker": None, "reading": None})
        # the overview is cached per data version; the store's, the reader's and the worker's state
        # change without new data
        overview = self._service.overview(lang=lang)
        extras = {"storage": self._service.storage_status(), "reading": self._service.reading_status(),
                  "worker": self._service.worker_status() if isinstance(self._service, WorkerService) else None}
        return self._runs_bodies.respond(
            request, lang, overview, extras,
            lambda: json_body({**overview, **extras, "analysis": analysis_status(overview["runs"])}))

    def _serve_report(self, request):
        service = self._require_service()
        return _json(request, service.report_response(_required(request, "run"), _lang_arg(request)))

    def _serve_tags(self, request):
        return _json(request, self._require_service().tags(_required(request, "run")))

    def _serve_series(self, request):
        service = self._require_service()
        run = _required(request, "run")
        tag = _required(request, "tag")
        width = _int_arg(request, "width", envelope_view.DEFAULT_WIDTH, envelope_view.MIN_WIDTH, envelope_view.MAX_WIDTH)
        start = _int_arg(request, "start", None)
        end = _int_arg(request, "end", None)
        return _json(request, service.series(run, tag, width, start, end))

    def _serve_export(self, request):
        """The health report of the runs named (`run`, repeated) as one self-contained file."""
        service = self._require_service()
        runs = [run for run in request.args.getlist("run") if run]
        if not runs:
            raise errors.InvalidArgumentError("missing parameter: run")
        output_format = request.args.get("format", "html")
        lang = request.args.get("lang", "en")
        if output_format not in EXPORT_TYPES:
            raise errors.InvalidArgumentError(f"format must be one of {', '.join(EXPORT_TYPES)}")
        if lang not in ("en", "zh"):
            raise errors.InvalidArgumentError("lang must be en or zh")
        body = service.health_report(runs, lang, output_format)
        response = http_util.Respond(request, body, EXPORT_TYPES[output_format])
        response.headers["Content-Disposition"] = f'attachment; filename="tb-health-report.{output_format}"'
        return response

    def _serve_heatmap(self, request):
        service = self._require_service()
        run = _required(request, "run")
        width = _int_arg(request, "width", heatmap_view.DEFAULT_WIDTH, heatmap_view.MIN_WIDTH, heatmap_view.MAX_WIDTH)
        start = _int_arg(request, "start", None)
        end = _int_arg(request, "end", None)

        # With 100k parameters a heatmap takes seconds and megabytes: rendered once per data version.
        body = service.heatmap(run, width, start, end)
        return http_util.Respond(request, body, "application/json")
