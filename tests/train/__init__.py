"""Tests for fedcore.train."""
