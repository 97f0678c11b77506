"""`fedcore bench`: pick a method for a federation by the equal-budget tuning protocol.

A grid (grid.py) names scenes, methods, the trial budget, the tuning seed and the reporting
seeds. Every (scene, method) gets the same `fedcore tune` budget on the tuning seed, judged on
the clients' noisy validation split; then the default and the tuned setting run on each
reporting seed, every method of a seed on one shared dataset artifact (runner.py). The choice
per scene (choice.py) reads validation scores only; bench.json, a tuned sweep file per scene and
a `fedcore report` page hold the results (results.py, sweepfile.py).
"""
