"""Tests for fedcore.models."""
