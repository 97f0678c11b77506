"""prepare_data (FederatedDataset + noise-scene report) and latest_snapshot (retrain input)."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from kfp.dsl import Artifact, Dataset, Output

from components.base import fedcore_component


@fedcore_component
def prepare_data(
    config: str,
    overrides: list,
    setting: dict,
    dataset: Output[Dataset],
    report: Output[Artifact],
    data_root: str = "",
) -> str:
    """Partition and inject noise; returns the dataset's sha256. It takes no run ids, so its
    cache serves every later pipeline run with the same data settings."""
    from fedcore.pipeline.inputs import RunInputs
    from fedcore.pipeline.ops import prepare

    info = prepare(RunInputs(config, overrides, setting, data_root=data_root), dataset.path, report.path)
    dataset.metadata.update(info)
    report.metadata.update(noisy_clients=info["noisy_clients"], overall_noise_rate=info["overall_noise_rate"])
    return info["sha256"]


@fedcore_component
def latest_snapshot(prefix: str) -> str:
    """The newest data snapshot under a local folder or s3:// prefix."""
    from fedcore.pipeline.retrain import latest_snapshot as latest

    return latest(prefix)
