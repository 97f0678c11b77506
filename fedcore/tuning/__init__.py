"""Equal-budget tuning: search spaces read from the params classes, an Optuna study whose trials
are fedcore runs judged on validation (`study`), and the same space as a Katib Experiment (`katib`)."""
