"""Shapes data for the plugin's routes (downsampling, summaries), independent of HTTP."""
