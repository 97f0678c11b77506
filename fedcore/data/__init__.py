"""Datasets, client partitions, label-noise scenes and the FederatedDataset artifact."""
