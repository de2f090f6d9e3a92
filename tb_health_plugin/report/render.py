"""A `HealthReport` as one self-contained file: HTML (charts inline as SVG, styles inline, no
script, no fetch of anything) or Markdown (charts as inline `data:` SVG images).

Everything that comes from the logs (run names, tags, messages, configuration text) is escaped
by Jinja2's autoescaping; only the charts, which matplotlib wrote and escaped itself, go in raw.
"""

from __future__ import annotations

import base64
import json

import jinja2

from tb_health_plugin.contract import SEVERITY_RANK, STATUSES
from tb_health_plugin.i18n import LANGUAGES, text
from tb_health_plugin.report.document import HealthReport

LABELS = ("title", "logdir", "generated", "by", "runs", "run", "verdict", "steps", "findings", "no_findings", "step",
          "evidence", "config", "no_config", "read", "file", "bytes", "skipped", "notes", "no_chart")


def labels(lang: str) -> dict:
    """The report's own words in `lang`, from the catalogue (`report.*`, `status.*`, `severity.*`)."""
    return {
        **{name: text(f"report.{name}", lang) for name in LABELS},
        "status": {status: text(f"status.{status}", lang) for status in STATUSES},
        "severity": {severity: text(f"severity.{severity}", lang) for severity in SEVERITY_RANK},
    }


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC","Noto Sans",sans-serif;
 margin:2rem auto;max-width:60rem;padding:0 1rem;color:#212121}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2.2rem;border-bottom:1px solid #ddd}
h3{font-size:1rem;margin:1.2rem 0 .3rem}.muted{color:#666}table{border-collapse:collapse;margin:.4rem 0}
td,th{border:1px solid #ddd;padding:.15rem .5rem;text-align:left;vertical-align:top}
.badge{display:inline-block;padding:0 .45rem;border-radius:.6rem;font-size:.8rem;color:#fff}
.critical{background:#c62828}.warning{background:#ef6c00}.healthy{background:#2e7d32}.info{background:#546e7a}
.no_data{background:#9e9e9e}pre{white-space:pre-wrap;background:#f5f5f5;padding:.4rem;font-size:12px}
.finding{margin:1rem 0 1.6rem}.chart svg{max-width:100%;height:auto}
"""

HTML = """<!doctype html>
<html lang="{{ 'zh-CN' if report.lang == 'zh' else 'en' }}"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>{{ t.title }}: {{ report.logdir }}</title><style>{{ style }}</style></head><body>
<h1>{{ t.title }}</h1>
<p class="muted">{{ t.logdir }}: <code>{{ report.logdir }}</code> · {{ t.generated }} {{ report.generated }}
 · {{ t.by }} {{ report.version }}</p>
<table><tr><th>{{ t.run }}</th><th>{{ t.verdict }}</th><th>{{ t.steps }}</th><th>{{ t.findings }}</th></tr>
{% for run in report.runs %}<tr><td><a href="#run-{{ loop.index }}">{{ run.name }}</a></td>
<td><span class="badge {{ run.status }}">{{ t.status[run.status] }}</span></td>
<td>{% if run.steps %}{{ run.steps.first }}–{{ run.steps.last }}{% endif %}</td><td>{{ run.findings|length }}</td></tr>
{% endfor %}</table>
{% for run in report.runs %}
<h2 id="run-{{ loop.index }}">{{ run.name }} <span class="badge {{ run.status }}">{{ t.status[run.status] }}</span></h2>
{% if not run.findings %}<p>{{ t.no_findings }}</p>{% endif %}
{% for entry in run.findings %}{% set f = entry.finding %}
<div class="finding"><h3><span class="badge {{ f.severity }}">{{ t.severity[f.severity] }}</span>
 {{ f.kind }} · {{ t.step }} {{ f.step }}{% if f.get('end_step') %}–{{ f.end_step }}{% endif %} · <code>{{ f.tag }}</code></h3>
<p>{{ f.message }}</p>
<div class="chart">{% if entry.chart_svg %}{{ entry.chart_svg|safe }}{% else %}<p class="muted">{{ t.no_chart }}</p>{% endif %}</div>
{% if f.get('evidence') %}<details><summary>{{ t.evidence }}</summary><table>
{% for key, value in f.evidence.items() %}<tr><th>{{ key }}</th><td>{{ value|tojson_text }}</td></tr>{% endfor %}
</table></details>{% endif %}</div>
{% endfor %}
<h3>{{ t.config }}</h3>
{% if run.config %}{% for tag, text in run.config.items() %}<p><code>{{ tag }}</code></p><pre>{{ text }}</pre>{% endfor %}
{% else %}<p class="muted">{{ t.no_config }}</p>{% endif %}
<h3>{{ t.read }}</h3><table><tr><th>{{ t.file }}</th><th>{{ t.bytes }}</th></tr>
{% for path, size in run.files %}<tr><td><code>{{ path }}</code></td><td>{{ "{:,}".format(size) }}</td></tr>{% endfor %}
</table><p>{{ t.skipped }}: {{ run.skipped_records }}</p>
{% if run.notes %}<p>{{ t.notes }}:</p><ul>{% for note in run.notes %}<li>{{ note }}</li>{% endfor %}</ul>{% endif %}
{% endfor %}
</body></html>
"""


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    environment.filters["tojson_text"] = lambda value: json.dumps(value, ensure_ascii=False)
    return environment


def render_html(report: HealthReport) -> str:
    template = _environment().from_string(HTML)
    return template.render(report=report, t=labels(_language(report.lang)), style=STYLE)


def render_markdown(report: HealthReport) -> str:
    t = labels(_language(report.lang))
    lines = [f"# {t['title']}", "", f"{t['logdir']}: `{report.logdir}` · {t['generated']} {report.generated} · "
             f"{t['by']} {report.version}", "", f"| {t['run']} | {t['verdict']} | {t['steps']} | {t['findings']} |",
             "|---|---|---|---|"]
    for run in report.runs:
        steps = f"{run.steps['first']}–{run.steps['last']}" if run.steps else ""
        lines.append(f"| {_md(run.name)} | {t['status'][run.status]} | {steps} | {len(run.findings)} |")
    for run in report.runs:
        lines += ["", f"## {_md(run.name)}: {t['status'][run.status]}", ""]
        if not run.findings:
            lines.append(t["no_findings"])
        for entry in run.findings:
            f = entry.finding
            span = f"{f['step']}–{f['end_step']}" if f.get("end_step") else f"{f['step']}"
            lines += [f"### {t['severity'][f['severity']]}: {f['kind']} · {t['step']} {span} · `{_md(f['tag'])}`", "",
                      _md(f["message"]), ""]
            if entry.chart_svg:
                data = base64.b64encode(entry.chart_svg.encode()).decode()
                lines += [f"![{_md(f['tag'])}](data:image/svg+xml;base64,{data})", ""]
            if f.get("evidence"):
                lines.append(f"{t['evidence']}: `{_md(json.dumps(f['evidence'], ensure_ascii=False))}`")
        lines += ["", f"### {t['config']}", ""]
        if run.config:
            for tag, logged in run.config.items():
                lines += [f"`{_md(tag)}`", "", "```", logged.replace("```", "'''"), "```", ""]
        else:
            lines.append(t["no_config"])
        lines += ["", f"### {t['read']}", "", f"| {t['file']} | {t['bytes']} |", "|---|---|"]
        lines += [f"| `{_md(path)}` | {size:,} |" for path, size in run.files]
        lines += ["", f"{t['skipped']}: {run.skipped_records}"]
        lines += [f"- {_md(note)}" for note in run.notes]
    return "\n".join(lines) + "\n"


def _language(lang: str) -> str:
    return lang if lang in LANGUAGES else LANGUAGES[0]


def _md(value: str) -> str:
    """Text from the logs, so that it cannot open HTML or a table cell in a Markdown viewer."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;") \
        .replace("\n", " ").replace("\r", " ")
