"""Federated methods: one file per method, registered by name."""
