"""What a person reads after (or during) runs: comparison tables, figures, the progress bar.

- `compare`: final metrics of run directories as one table, mean ± std over seeds;
- `compare_mlflow`: the same table from an MLflow experiment's finished runs, plus a bar chart;
- `plots`: matplotlib figures (noise scene, estimated-vs-true rates, confusion, curves, comparison);
- `progress`: the live progress bar of `fedcore run`.
"""
