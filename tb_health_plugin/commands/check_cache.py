"""`tb-health check --cache DIR`: re-check a logdir reading only what was appended since the last check.

Per logdir (a folder of DIR named by a hash of its absolute path) the cache holds:
- `runs/<hash of the run name>.state`: the run's reading state (`readers/saved_state.py`): offsets,
  file identities and every series as numpy columns. A run whose files were replaced, truncated
  or rewritten is read again in full; its state is never trusted on its word.
- `reports/<hash of the unit>.json`: the analysed reports of one analysis unit (a run, or every
  rank of a job, as the tab analyses them), keyed by the data token of each member run, the tag
  overrides, the language and the code of tb-health. A unit none of whose runs changed is not
  analysed again.
A run's data token changes whenever its state is saved after it changed, so a report is reused
only for exactly the data it was made from. Everything is written to a temporary name and
renamed, so concurrent checks sharing a cache each see whole files. A cache file that cannot
be read is ignored with a note on stderr and rewritten; the report is the one an uncached check
prints, byte for byte. Only local logdirs are cached (object storage has no inode to check).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tb_health_plugin.contract import job_of

CACHE_FORMAT = 1
STALE_TEMPORARY_S = 3600.0  # a temporary file this old was left by a check that stopped mid-write
_PACKAGE = Path(__file__).resolve().parents[1]
_code_fingerprint: str | None = None


def code_fingerprint() -> str:
    """A hash of tb-health's own source and catalogues: another version never reuses a cache."""
    global _code_fingerprint
    if _code_fingerprint is None:
        digest = hashlib.sha256(str(CACHE_FORMAT).encode())
        for path in sorted(_PACKAGE.rglob("*")):
            if path.suffix in (".py", ".po", ".mo", ".json", ".toml") and "static" not in path.parts:
                digest.update(str(path.relative_to(_PACKAGE)).encode())
                digest.update(path.read_bytes())
        _code_fingerprint = digest.hexdigest()[:32]
    return _code_fingerprint


def _name_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def unit_of(run: str) -> str:
    job = job_of(run)
    return f"job:{job}" if job is not None else f"run:{run}"


class CheckCache:
    """The cache of one logdir inside DIR; `note(message_id, **fields)` is told what was ignored
    and why (ids of the message catalogue: `cli.cache.*`)."""

    def __init__(self, cache_dir: str, logdir: str, note: Callable[..., None]) -> None:
        self.root = os.path.join(cache_dir, _name_hash(os.path.abspath(logdir)))
        self.note = note
        self.code = code_fingerprint()
        self.runs_dir = os.path.join(self.root, "runs")
        self.reports_dir = os.path.join(self.root, "reports")
        self.findings_dir = os.path.join(self.root, "findings")
        self.tokens: dict[str, str] = {}  # run -> data token of its saved state
        self._restored: dict[str, tuple[Any, int]] = {}  # run -> (state restored into the reader, its version)
        for folder in (self.root, self.runs_dir, self.reports_dir, self.findings_dir):
            os.makedirs(folder, mode=0o700, exist_ok=True)

    # ----- reading state

    def restore(self, reader) -> None:
        """Put every usable saved run state into `reader` (a fresh local `LogdirReader`)."""
        from tb_health_plugin.readers.saved_state import UnusableState, load_run

        for entry in os.scandir(self.runs_dir):
            if not entry.name.endswith(".state") or entry.name.startswith("."):
                continue
            try:
                state, token = load_run(entry.path, self.code)
            except UnusableState as why:
                if "unreadable" in str(why):
                    self.note("cli.cache.ignored", path=entry.path,
                              problem=str(why).removeprefix("unreadable (").removesuffix(")"))
                continue
            if _name_hash(state.name) + ".state" != entry.name:
                continue
            self._restored[state.name] = (state, state.version)
            self.tokens[state.name] = token
        reader.take_saved_states({name: state for name, (state, _) in self._restored.items()})

    def save(self, reader) -> None:
        """Save the state of every run that changed (or was not cached); forget runs gone."""
        from tb_health_plugin.readers.saved_state import save_run

        names = reader.run_names()
        for name in names:
            state = reader.run_state(name)
            if self._restored.get(name) == (state, state.version):
                continue  # restored and nothing read into it since: unchanged
            path = os.path.join(self.runs_dir, _name_hash(name) + ".state")
            if state.skipped_records or state.failed_files:
                # Damage is said on stderr (and sets the exit code) as it is read: read such a
                # run in full every time, so every check says it as an uncached one does.
                self.tokens.pop(name, None)
                _remove(path)
                continue
            token = uuid.uuid4().hex
            self.tokens.pop(name, None)
            try:
                with state.lock:
                    save_run(state, path, self.code, token)
            except OSError as error:
                self.note("cli.cache.unwritable", path=path, problem=error.strerror or error)
                continue
            self.tokens[name] = token
        _sweep(self.runs_dir, {_name_hash(name) for name in names})

    # ----- analysis results

    def analyse(self, runs: list, overrides: dict[str, str], lang: str,
                analyze: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The rendered reports of `runs` (in their order): reused for units whose runs did not
        change since they were analysed with these overrides, language and code, the others
        analysed by `analyze(runs of those units, run_findings=...)` and saved; in those, the
        own findings of runs that did not change (the other ranks of a grown rank's job) are
        reused too, so only the cross-rank checks and the diagnosis look at them again."""
        units: dict[str, list] = defaultdict(list)
        for run in runs:
            units[unit_of(run.name)].append(run)
        reports: dict[str, dict[str, Any]] = {}
        stale: dict[str, tuple[str, list]] = {}
        for unit, members in units.items():
            key = self._unit_key(members, overrides, lang)
            cached = self._load_unit(unit, key) if key is not None else None
            if cached is not None and set(cached) == {run.name for run in members}:
                reports.update(cached)
            else:
                stale[unit] = (key, members)
        if stale:
            analysed = [run for _, members in stale.values() for run in members]
            fresh = analyze(analysed, run_findings=self._run_findings(overrides))
            by_name = {run.name: report for run, report in zip(analysed, fresh, strict=True)}
            reports.update(by_name)
            for unit, (key, members) in stale.items():
                if key is not None:
                    self._save_unit(unit, key, {run.name: by_name[run.name] for run in members})
        _sweep(self.reports_dir, {_name_hash(unit) for unit in units})
        _sweep(self.findings_dir, {_name_hash(run.name) for run in runs})
        return [reports[run.name] for run in runs]

    def _run_findings(self, overrides: dict[str, str]) -> Callable:
        """Each run's own findings, from the cache when made from the same data, overrides and code."""
        from tb_health_plugin.analysis import engine
        from tb_health_plugin.commands.saved_findings import findings_from_json, findings_to_json

        def run_findings(signals) -> list:
            token = self.tokens.get(signals.run)
            if token is None:
                return engine.findings_for_run(signals)
            key = hashlib.sha256(json.dumps([CACHE_FORMAT, self.code, sorted(overrides.items()), token])
                                 .encode("utf-8", "surrogatepass")).hexdigest()
            path = os.path.join(self.findings_dir, _name_hash(signals.run) + ".json")
            try:
                with open(path, encoding="utf-8") as handle:
                    saved = json.load(handle)
                if saved["key"] == key:
                    return findings_from_json(saved["findings"])
            except FileNotFoundError:
                pass
            except (OSError, ValueError, KeyError, TypeError) as error:
                self.note("cli.cache.ignored", path=path, problem=type(error).__name__)
            found = engine.findings_for_run(signals)
            try:
                _write_atomically(path, json.dumps({"key": key, "findings": findings_to_json(found)}))
            except (OSError, TypeError, ValueError):
                _remove(path)  # kept for this check only
            return found

        return run_findings

    def _unit_key(self, members: list, overrides: dict[str, str], lang: str) -> str | None:
        tokens = [(run.name, self.tokens.get(run.name)) for run in members]
        if any(token is None for _, token in tokens):
            return None
        text = json.dumps([CACHE_FORMAT, self.code, lang, sorted(overrides.items()), sorted(tokens)])
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def _load_unit(self, unit: str, key: str) -> dict[str, dict[str, Any]] | None:
        path = os.path.join(self.reports_dir, _name_hash(unit) + ".json")
        try:
            with open(path, encoding="utf-8") as handle:
                saved = json.load(handle)
            if saved["key"] != key:
                return None
            reports = saved["reports"]
            if not isinstance(reports, dict) or not all(isinstance(r, dict) for r in reports.values()):
                raise ValueError("no reports")
            return reports
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            self.note("cli.cache.ignored", path=path, problem=type(error).__name__)
            return None

    def _save_unit(self, unit: str, key: str, reports: dict[str, dict[str, Any]]) -> None:
        path = os.path.join(self.reports_dir, _name_hash(unit) + ".json")
        try:
            _write_atomically(path, json.dumps({"key": key, "reports": reports}, allow_nan=False))
        except (OSError, ValueError) as error:
            self.note("cli.cache.unwritable", path=path, problem=error)


def _sweep(folder: str, live: set[str]) -> None:
    """Remove the files of runs or units gone, and temporary files a check stopped mid-write left."""
    now = time.time()
    for entry in os.scandir(folder):
        if entry.name.startswith("."):
            try:
                if now - entry.stat().st_mtime > STALE_TEMPORARY_S:
                    _remove(entry.path)
            except OSError:
                pass
        elif entry.name.split(".", 1)[0] not in live:
            _remove(entry.path)


def _write_atomically(path: str, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
