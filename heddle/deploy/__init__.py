"""Deployment helpers: NATS permissions per identity and their credentials (``heddle deploy``).

Modules: ``roles`` (what each identity may publish and subscribe to: the shared roles, each
worker, each trainer), ``auth`` (``heddle deploy auth``: a nats-server authorization config and
one credential per identity).
"""
