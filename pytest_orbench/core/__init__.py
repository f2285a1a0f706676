"""Foundations every wing stands on: records and their checks, JSON files, the store, endpoints, datasets."""
