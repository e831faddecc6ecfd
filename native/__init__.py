"""Compiled hot paths (Cython). Import the façades in `logstore.formats`, not these modules."""
