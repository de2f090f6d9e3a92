"""Runnable examples of the three ways to train with the hooks (see README_SECTION.md)."""
