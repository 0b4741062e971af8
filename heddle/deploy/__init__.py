"""Deployment helpers: per-role NATS permissions and their credentials (``heddle deploy``)."""
