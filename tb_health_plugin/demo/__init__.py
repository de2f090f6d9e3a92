"""`tb-health demo`: small real MindSpore trainings on the CPU, each showing one problem.

`scenarios.py` says what each run is and what the analysis must find in it, `train.py` trains one
run (in its own process, with the project's hooks) and `runner.py` trains them all with progress.
"""
