"""Test doubles and the deterministic cluster simulator; never imported by production code."""
