"""What the Kubeflow components call: plain functions over fedcore, no kfp import.

`plan`      compile-time planning: which runs a sweep makes, their overrides and hashes
`ops`       the work of each component (prepare, run_stage, evaluate, compare)
`retrain`   champion/challenger decision and model registration
`resources` cluster settings of the tasks (CPU, memory, accelerators, node placement)
"""
