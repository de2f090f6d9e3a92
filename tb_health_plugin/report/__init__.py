"""Health reports: one self-contained HTML or Markdown file with every run's verdict, each
finding with its evidence and a chart around its step, the configuration as logged and what was
read (`tb-health report`, and the Health tab's report of the runs on screen)."""
