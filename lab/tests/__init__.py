"""The lab's tests: its scripts and records against the library (lab/README.md, "Tests")."""
