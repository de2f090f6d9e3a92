"""Subcommands of the `tb-health` console script."""
