"""Runnable examples of the three ways to train with the hooks (see the README, "Training hooks")."""
