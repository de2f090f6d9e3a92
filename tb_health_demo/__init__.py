"""The demo: small real MindSpore trainings on the CPU, each showing one problem.

`scenarios.py` says what each run is and what the analysis must find in it, `train.py` trains one
run (in its own process, with the project's hooks), `runner.py` trains them all with progress and
`__main__.py` (`python -m tb_health_demo`, what `./scripts/demo` runs) trains, checks and serves them.
It sits on top of everything: it uses the hooks and the CLI's check; nothing imports it.
"""
