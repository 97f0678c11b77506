"""Shared pytest setup. Fixture modules live in tests/fixtures/ and are loaded as plugins."""

pytest_plugins = [
    "tests.fixtures.common",
    "tests.fixtures.s3",
    "tests.fixtures.mlflow_server",
]
