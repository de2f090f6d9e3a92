"""Training-side hooks for MindSpore and MindFormers that log health signals as tfevents."""
